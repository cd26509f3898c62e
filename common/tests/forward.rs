//! The forwarding decision: every path of `Forwarder`, and what happens to each kind of
//! bad input (which drop reason counts it), carried out by the executor through an
//! egress that sends everything.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{
    CLIENT, CLUSTER, DTLS, PlannedEgress, RTP, SECRET, TRANSCEIVER, TestRelay, VIP, a,
    binding_request, binding_request_with_transaction, frame, frame_marked, keys, minted,
    minted_binding_request, policy,
};
use ufrag_common::admission::AdmissionPolicy;
use ufrag_common::execute::RouteCacheRequest;
use ufrag_common::flow::{FlowKey, FlowTable};
use ufrag_common::forward::{
    FlowMirror, ForwardPolicy, REROUTE_MIN_IDLE, Route, SERVER_SILENT_SHED, SHED_MIN_IDLE, Verdict,
};
use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::{HintKey, HintKeys, RoutingHint};
use ufrag_common::reasons::{Direction, DropReason};
use ufrag_common::returns::SharedReturns;
use ufrag_common::stun::{StunClass, StunWriter, attr};

fn forwarder_with(policy: ForwardPolicy, capacity: usize, t0: Instant) -> TestRelay {
    let forwarder = support::started_forwarder(
        policy,
        FlowTable::new(capacity, Duration::from_secs(30), t0).unwrap(),
        t0,
    );
    TestRelay::new(forwarder, PlannedEgress::logging())
}

fn forwarder(t0: Instant) -> TestRelay {
    forwarder_with(policy(), 16, t0)
}

/// DTLS both ways on `client`'s flow: a session's path, which is never shed.
fn prove(fwd: &mut TestRelay, client: SocketAddr, at: Instant) {
    assert!(matches!(
        fwd.from_client(&DTLS, client, a(VIP), at),
        Verdict::Forward { .. }
    ));
    let returned = fwd.from_internal(&frame(&client.to_string(), VIP, &DTLS), a(TRANSCEIVER), at);
    assert!(matches!(returned, Verdict::Return { .. }), "{returned:?}");
}

fn expect_drop(v: Verdict, reason: DropReason, fwd: &mut TestRelay) {
    assert_eq!(v, Verdict::Drop(reason));
    assert_eq!(
        fwd.counters().drops_of(reason),
        1,
        "{reason:?} counted once"
    );
}

#[test]
fn a_valid_binding_request_creates_the_flow_and_media_reuses_it() {
    let t0 = Instant::now();
    let mut fwd = forwarder(t0);
    let v = fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    assert_eq!(
        v,
        Verdict::Forward {
            to: a(TRANSCEIVER),
            header: FrameHeader::new(a(CLIENT), a(VIP)),
            payload_at: 0,
            record: None,
        }
    );
    for datagram in [&DTLS[..], &RTP[..]] {
        let v = fwd.from_client(datagram, a(CLIENT), a(VIP), t0);
        assert!(
            matches!(v, Verdict::Forward { to, record: None, .. } if to == a(TRANSCEIVER)),
            "{v:?}"
        );
    }
    assert_eq!(
        fwd.counters().forwarded_datagrams[Direction::In as usize],
        3
    );
    assert_eq!(fwd.counters().flows_created, 1);
    assert_eq!(fwd.counters().flows_active, 1);
    assert_eq!(fwd.counters().dropped_datagrams.iter().sum::<u64>(), 0);
}

#[test]
fn non_stun_without_a_flow_is_never_forwarded() {
    let t0 = Instant::now();
    let mut fwd = forwarder(t0);
    expect_drop(
        fwd.from_client(&RTP, a(CLIENT), a(VIP), t0),
        DropReason::NoFlow,
        &mut fwd,
    );
    let mut cached = forwarder_with(
        ForwardPolicy {
            route_cache: true,
            ..policy()
        },
        4,
        t0,
    );
    let v = cached.from_client(&DTLS, a(CLIENT), a(VIP), t0);
    assert_eq!(
        v,
        Verdict::LookupRoute {
            key: FlowKey::new(a(CLIENT), a(VIP)),
            question_out: false,
        }
    );
    assert_eq!(cached.counters().drops_of(DropReason::NoFlowCacheLookup), 1);
    assert_eq!(cached.counters().forwarded_datagrams, [0, 0]);
}

/// A Binding Request with `username` and MESSAGE-INTEGRITY under a password that is not
/// the session's.
fn request_with_username(username: &[u8]) -> Vec<u8> {
    let mut b = [0u8; 128];
    let mut w = StunWriter::new(&mut b, 1, StunClass::Request, &[0; 12]).unwrap();
    w.attribute(attr::USERNAME, username).unwrap();
    w.integrity(b"whatever").unwrap();
    let n = w.finish();
    b[..n].to_vec()
}

/// A Binding Request whose server ufrag is a hint minted under `key` (not the relay's).
fn request_under_key(key: HintKey) -> Vec<u8> {
    let other = HintKeys::new(key, None).unwrap();
    let ufrag = other.encode(
        &RoutingHint {
            cluster: CLUSTER,
            transceiver: a(TRANSCEIVER),
        },
        ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
        [0; 5],
    );
    let mut u = ufrag.as_bytes().to_vec();
    u.extend_from_slice(b":cli1");
    request_with_username(&u)
}

#[test]
fn each_bad_first_packet_is_dropped_under_its_reason() {
    let t0 = Instant::now();
    let good = binding_request(TRANSCEIVER, CLUSTER, 1);

    let mut bad_cookie = good.clone();
    bad_cookie[5] ^= 1;
    let mut bad_integrity = good.clone();
    bad_integrity[good.len() - 20] ^= 1; // inside MESSAGE-INTEGRITY (before FINGERPRINT)
    let mut bad_fingerprint = good.clone();
    *bad_fingerprint.last_mut().unwrap() ^= 1;
    let mut indication = good.clone();
    indication[1] = 0x11; // Binding Indication
    let no_username = {
        let mut b = [0u8; 64];
        let mut w = StunWriter::new(&mut b, 1, StunClass::Request, &[0; 12]).unwrap();
        w.fingerprint().unwrap();
        let n = w.finish();
        b[..n].to_vec()
    };
    let with_username = request_with_username;
    let forged = request_under_key(HintKey::new(1, &[0x24; 32]).unwrap());
    let unknown_key = request_under_key(HintKey::new(7, SECRET).unwrap());

    let cases: Vec<(&str, Vec<u8>, DropReason)> = vec![
        ("empty datagram", vec![], DropReason::Unclassified),
        (
            "unassigned first byte",
            vec![0xff; 40],
            DropReason::Unclassified,
        ),
        (
            "truncated STUN",
            good[..12].to_vec(),
            DropReason::StunTooShort,
        ),
        (
            "STUN with a bad cookie",
            bad_cookie,
            DropReason::StunBadMagicCookie,
        ),
        (
            "STUN cut mid-attribute",
            good[..good.len() - 4].to_vec(),
            DropReason::StunLengthMismatch,
        ),
        (
            "Binding Indication",
            indication,
            DropReason::NotBindingRequest,
        ),
        ("no USERNAME", no_username, DropReason::StunMissingUsername),
        (
            "USERNAME without colon",
            with_username(b"justone"),
            DropReason::StunBadUsername,
        ),
        (
            "ufrag that is not a hint",
            with_username(b"evtj:h6vY"),
            DropReason::HintBadLength,
        ),
        (
            "hint MAC forged with another secret",
            forged,
            DropReason::HintBadMac,
        ),
        (
            "hint of an unknown key",
            unknown_key,
            DropReason::HintUnknownKey,
        ),
        (
            "MESSAGE-INTEGRITY wrong",
            bad_integrity,
            DropReason::StunBadIntegrity,
        ),
        (
            "FINGERPRINT wrong",
            bad_fingerprint,
            DropReason::StunBadFingerprint,
        ),
        (
            "destination outside the networks",
            binding_request("192.168.0.9:40000", CLUSTER, 2),
            DropReason::HintDestinationNotAllowed,
        ),
        (
            "cluster with no relay",
            binding_request(TRANSCEIVER, 9, 3),
            DropReason::UnknownCluster,
        ),
    ];
    for (what, datagram, reason) in cases {
        let mut fwd = forwarder(t0);
        let v = fwd.from_client(&datagram, a(CLIENT), a(VIP), t0);
        assert_eq!(v, Verdict::Drop(reason), "{what}");
        assert_eq!(fwd.counters().drops_of(reason), 1, "{what}");
        assert!(fwd.table().is_empty(), "{what}: no flow created");
        // And the client still gets nothing through afterwards.
        assert!(
            matches!(
                fwd.from_client(&RTP, a(CLIENT), a(VIP), t0),
                Verdict::Drop(DropReason::NoFlow)
            ),
            "{what}"
        );
    }
}

#[test]
fn bad_input_on_an_established_flow_does_not_break_it() {
    let t0 = Instant::now();
    let mut fwd = forwarder(t0);
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    expect_drop(
        fwd.from_client(&[0xff, 1, 2], a(CLIENT), a(VIP), t0),
        DropReason::Unclassified,
        &mut fwd,
    );
    // A forged Binding Request pointing elsewhere is forwarded on the existing flow (the
    // transceiver rejects it) and does not move the flow.
    let mut forged = binding_request("10.0.0.3:40000", CLUSTER, 5);
    let n = forged.len();
    forged[n - 20] ^= 1;
    let v = fwd.from_client(&forged, a(CLIENT), a(VIP), t0);
    assert!(
        matches!(v, Verdict::Forward { to, .. } if to == a(TRANSCEIVER)),
        "{v:?}"
    );
    assert!(
        matches!(fwd.from_client(&RTP, a(CLIENT), a(VIP), t0), Verdict::Forward { to, .. } if to == a(TRANSCEIVER))
    );
}

#[test]
fn a_new_authentic_session_on_the_same_client_address_moves_only_an_idle_flow() {
    let t0 = Instant::now();
    let mut fwd = forwarder(t0);
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    let elsewhere = binding_request("10.0.0.3:40000", CLUSTER, 2);
    // The flow carries media: an authentic request for another session (replayed, or
    // sent with a spoofed source by someone holding that session's credentials) does
    // not take it.
    let busy = t0 + REROUTE_MIN_IDLE;
    fwd.from_client(&RTP, a(CLIENT), a(VIP), busy - Duration::from_millis(20));
    let v = fwd.from_client(&elsewhere, a(CLIENT), a(VIP), busy);
    assert!(
        matches!(v, Verdict::Forward { to, .. } if to == a(TRANSCEIVER)),
        "a live flow moved: {v:?}"
    );
    // Idle for a consent interval (the old session is gone): the flow follows.
    let idle = busy + REROUTE_MIN_IDLE;
    let v = fwd.from_client(&elsewhere, a(CLIENT), a(VIP), idle);
    assert!(
        matches!(v, Verdict::Forward { to, .. } if to == a("10.0.0.3:40000")),
        "{v:?}"
    );
    assert!(
        matches!(fwd.from_client(&RTP, a(CLIENT), a(VIP), idle), Verdict::Forward { to, .. } if to == a("10.0.0.3:40000"))
    );
    assert_eq!(fwd.table().len(), 1);
}

#[test]
fn one_sessions_request_replayed_from_many_sources_creates_one_flow_and_new_requests_at_most_the_cap()
 {
    let t0 = Instant::now();
    let mut fwd = forwarder_with(policy(), 4096, t0);
    let cap = usize::from(fwd.policy().admission.max_flows_per_session);
    let request = binding_request(TRANSCEIVER, CLUSTER, 1);
    let mut forwarded = 0;
    for i in 0..1000u32 {
        let source = SocketAddr::from(([198, 18, (i >> 8) as u8, i as u8], 40_000));
        if let Verdict::Forward { .. } = fwd.from_client(&request, source, a(VIP), t0) {
            forwarded += 1;
        }
    }
    assert_eq!(
        forwarded, 1,
        "only the first copy of one request creates a flow"
    );
    assert_eq!(
        fwd.counters().drops_of(DropReason::ReplayedRequest),
        999,
        "every replay is counted"
    );
    // A credential holder can sign new requests (new transaction ids) for the same
    // session: each creates a flow until the session's cap.
    let mut created = 1;
    for i in 0..100u16 {
        let fresh = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 1, i);
        let source = SocketAddr::from(([198, 19, (i >> 8) as u8, i as u8], 40_000));
        if let Verdict::Forward { .. } = fwd.from_client(&fresh, source, a(VIP), t0) {
            created += 1;
        }
    }
    assert_eq!(created, cap);
    assert_eq!(fwd.table().len(), cap);
    assert_eq!(
        fwd.counters().drops_of(DropReason::SessionFlowLimit),
        100 - (cap as u64 - 1)
    );
    // Another session still gets its flow.
    assert!(matches!(
        fwd.from_client(
            &binding_request(TRANSCEIVER, CLUSTER, 2),
            a(CLIENT),
            a(VIP),
            t0
        ),
        Verdict::Forward { .. }
    ));
}

#[test]
fn a_full_table_sheds_a_flow_that_carried_only_stun_before_refusing_a_new_one() {
    let t0 = Instant::now();
    let mut fwd = forwarder_with(policy(), 2, t0);
    let proven = a("198.51.100.1:1");
    let stun_only = a("198.51.100.2:2");
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        proven,
        a(VIP),
        t0,
    );
    fwd.from_client(&RTP, proven, a(VIP), t0);
    fwd.from_internal(&frame("198.51.100.1:1", VIP, &RTP), a(TRANSCEIVER), t0);
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 2),
        stun_only,
        a(VIP),
        t0,
    );
    let later = t0 + SHED_MIN_IDLE;
    fwd.from_client(&RTP, proven, a(VIP), later);
    // Full: the STUN-only flow, idle for SHED_MIN_IDLE, makes room.
    let newcomer = a("198.51.100.3:3");
    let v = fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 3),
        newcomer,
        a(VIP),
        later,
    );
    assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
    assert!(fwd.table().peek(&FlowKey::new(stun_only, a(VIP))).is_none());
    assert!(fwd.table().peek(&FlowKey::new(proven, a(VIP))).is_some());
    assert_eq!(fwd.table().counters().shed, 1);
    // The newcomer proves itself; both flows are proven: nothing to shed.
    prove(&mut fwd, newcomer, later);
    let v = fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 4),
        a("198.51.100.4:4"),
        a(VIP),
        later,
    );
    assert_eq!(v, Verdict::Drop(DropReason::TableFull));
    assert!(fwd.table().peek(&FlowKey::new(proven, a(VIP))).is_some());
}

/// Squatting: spoofed sources with a
/// session's credentials make flows and keep them busy with blind "media". Before, any
/// non-STUN byte proved a flow, proven flows were never shed, and the table stayed full.
/// Now the oldest unproven flow, however busy, gives way to each admitted newcomer, and
/// only to an admitted one; a proven flow never does.
#[test]
fn blind_media_never_proves_a_flow_and_the_oldest_squatter_gives_way_to_each_admitted_newcomer() {
    let t0 = Instant::now();
    let cached = ForwardPolicy {
        route_cache: true,
        ..policy()
    };
    let mut fwd = forwarder_with(cached, 4, t0);
    // Four squatters from four /24s, each with its own signed request, kept busy.
    let squatters: Vec<SocketAddr> = (1..=4).map(|i| a(&format!("192.0.{i}.9:{i}"))).collect();
    let keep_busy = |fwd: &mut TestRelay, at: Instant| {
        for squatter in &squatters {
            if fwd.table().peek(&FlowKey::new(*squatter, a(VIP))).is_none() {
                continue;
            }
            let v = fwd.from_client(&DTLS, *squatter, a(VIP), at);
            assert!(
                matches!(v, Verdict::Forward { record: None, .. }),
                "forwarded, never cached: {v:?}"
            );
        }
    };
    for (i, squatter) in squatters.iter().enumerate() {
        let request = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 9, i as u16);
        let v = fwd.from_client(&request, *squatter, a(VIP), t0);
        assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
    }
    let held =
        |fwd: &TestRelay, who: SocketAddr| fwd.table().peek(&FlowKey::new(who, a(VIP))).is_some();
    // A legitimate session arrives while the squatters are young and busy: the oldest
    // squatter gives way at once.
    let newcomer = a("198.51.100.50:5000");
    let early = t0 + Duration::from_millis(100);
    keep_busy(&mut fwd, early);
    let request = binding_request(TRANSCEIVER, CLUSTER, 1);
    let v = fwd.from_client(&request, newcomer, a(VIP), early);
    assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
    assert!(!held(&fwd, squatters[0]), "the oldest squatter went");
    assert!(squatters[1..].iter().all(|s| held(&fwd, *s)));
    assert_eq!(fwd.table().counters().shed, 1);
    // A request admission refuses (here a replay from another source) costs no flow.
    let v = fwd.from_client(&request, a("198.51.100.51:5000"), a(VIP), early);
    assert_eq!(v, Verdict::Drop(DropReason::ReplayedRequest));
    assert_eq!(
        fwd.table().counters().shed,
        1,
        "nothing shed for a refused request"
    );
    // The newcomer's transceiver answers: its flow is proven and can no longer be shed.
    fwd.from_client(&DTLS, newcomer, a(VIP), early);
    fwd.from_internal(
        &frame("198.51.100.50:5000", VIP, &DTLS),
        a(TRANSCEIVER),
        early,
    );
    let recorded = |request: &RouteCacheRequest| matches!(request, RouteCacheRequest::Record { key, .. } if key.client == newcomer);
    assert!(
        fwd.egress.cache_requests.iter().any(recorded),
        "proven, hence recorded: {:?}",
        fwd.egress.cache_requests
    );
    // Four more newcomers: the three squatters go, oldest first, then the first of the
    // newcomers still unproven; never the proven one.
    let later = early + Duration::from_millis(100);
    let others: Vec<SocketAddr> = (0..4).map(|i| a(&format!("203.0.113.{i}:7"))).collect();
    for (i, other) in others.iter().enumerate() {
        keep_busy(&mut fwd, later);
        let request = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 2, 100 + i as u16);
        let v = fwd.from_client(&request, *other, a(VIP), later);
        assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
        if let Some(squatter) = squatters.get(i + 1) {
            assert!(!held(&fwd, *squatter), "squatter {} went", i + 1);
        }
    }
    assert!(!held(&fwd, others[0]), "then the oldest unproven newcomer");
    assert!(held(&fwd, newcomer), "never the proven flow");
    assert_eq!(fwd.table().counters().shed, 5);
}

/// One client prefix holds at most a sixteenth of
/// the table (at least 64) in proven flows. Before, addresses that really receive could
/// prove flows without limit, and proven flows are never shed for a newcomer. A flow over
/// the cap keeps forwarding, unproven: not cached, and sheddable; a proven flow of the
/// prefix that leaves makes room for the next proof.
#[test]
fn one_prefix_proves_at_most_its_share_of_the_table_and_the_rest_stay_sheddable() {
    let t0 = Instant::now();
    let cached = ForwardPolicy {
        route_cache: true,
        ..policy()
    };
    let mut fwd = forwarder_with(cached, 256, t0);
    let cap = ufrag_common::proven_prefixes::MIN_PROVEN_PER_PREFIX as usize;
    let one_prefix = |i: usize| a(&format!("198.51.100.{}:{}", i % 250 + 1, 6000 + i));
    let make = |fwd: &mut TestRelay, client: SocketAddr, session: u8, transaction: u16| {
        let request = binding_request_with_transaction(TRANSCEIVER, CLUSTER, session, transaction);
        let v = fwd.from_client(&request, client, a(VIP), t0);
        assert!(matches!(v, Verdict::Forward { .. }), "{client}: {v:?}");
        prove(fwd, client, t0);
    };
    // Eight flows per session: its cap in one worker.
    for i in 0..cap + 2 {
        make(&mut fwd, one_prefix(i), 10 + (i / 8) as u8, 200 + i as u16);
    }
    let proven = |fwd: &TestRelay, client: SocketAddr| {
        (fwd.table().peek(&FlowKey::new(client, a(VIP)))).is_some_and(|f| f.value.proven())
    };
    let held = (0..cap + 2)
        .filter(|i| proven(&fwd, one_prefix(*i)))
        .count();
    assert_eq!(held, cap, "the /24 holds its cap in proven flows");
    assert!(!proven(&fwd, one_prefix(cap)) && !proven(&fwd, one_prefix(cap + 1)));
    assert_eq!(fwd.counters().flows_over_prefix_cap, 2);
    let v = fwd.from_client(&DTLS, one_prefix(cap), a(VIP), t0);
    assert!(
        matches!(v, Verdict::Forward { record: None, .. }),
        "over the cap it still forwards, never cached: {v:?}"
    );
    // Another prefix has its own cap.
    let other = a("203.0.113.9:7000");
    make(&mut fwd, other, 40, 999);
    assert!(proven(&fwd, other));
    // A proven flow of the prefix leaves: the next one to prove itself is counted.
    assert!(fwd.end_flow(&FlowKey::new(one_prefix(0), a(VIP))));
    let next = one_prefix(cap + 2);
    make(&mut fwd, next, 41, 1000);
    assert!(proven(&fwd, next), "room again after one left");
}

/// Blind proof: the transceiver's DTLS on a
/// flow used to count as its half of the proof whatever path it went to, so a client that
/// nominated spoofed sources made flows the relay never sheds, with nobody receiving at
/// them. Now only frames the transceiver marks as sent on a verified path (one that
/// answered its probe) prove a flow; the rest still reach the client.
#[test]
fn the_transceivers_dtls_proves_a_flow_only_when_marked_as_sent_on_a_verified_path() {
    let t0 = Instant::now();
    let cached = ForwardPolicy {
        route_cache: true,
        ..policy()
    };
    let mut fwd = forwarder_with(cached, 4, t0);
    let spoofed = a("192.0.2.9:9");
    let request = binding_request(TRANSCEIVER, CLUSTER, 1);
    assert!(matches!(
        fwd.from_client(&request, spoofed, a(VIP), t0),
        Verdict::Forward { .. }
    ));
    fwd.from_client(&DTLS, spoofed, a(VIP), t0);
    // The transceiver's flight, unmarked: delivered, proving nothing.
    let unmarked = frame_marked("192.0.2.9:9", VIP, &DTLS, false);
    let v = fwd.from_internal(&unmarked, a(TRANSCEIVER), t0);
    assert!(matches!(v, Verdict::Return { .. }), "{v:?}");
    let v = fwd.from_client(&DTLS, spoofed, a(VIP), t0);
    assert!(
        matches!(v, Verdict::Forward { record: None, .. }),
        "unproven, never cached: {v:?}"
    );
    let flow = fwd.table().peek(&FlowKey::new(spoofed, a(VIP))).unwrap();
    assert!(!flow.value.proven());
    // Marked: the path answered the transceiver's probe, so someone receives there.
    let marked = frame_marked("192.0.2.9:9", VIP, &DTLS, true);
    let v = fwd.from_internal(&marked, a(TRANSCEIVER), t0);
    assert!(matches!(v, Verdict::Return { .. }), "{v:?}");
    let flow = fwd.table().peek(&FlowKey::new(spoofed, a(VIP))).unwrap();
    assert!(flow.value.proven());
    // A marked STUN answer alone proves nothing either (checked on a fresh flow).
    let other = a("192.0.2.10:9");
    let request = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 1, 7);
    fwd.from_client(&request, other, a(VIP), t0);
    fwd.from_client(&DTLS, other, a(VIP), t0);
    let stun_answer = [
        0x01, 0x01, 0, 0, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
    ];
    fwd.from_internal(
        &frame_marked("192.0.2.10:9", VIP, &stun_answer, true),
        a(TRANSCEIVER),
        t0,
    );
    assert!(
        !fwd.table()
            .peek(&FlowKey::new(other, a(VIP)))
            .unwrap()
            .value
            .proven()
    );
}

/// A proven flow used to be kept for as long as anything arrived on it, so a client could
/// hold its slot for ever after its session ended by sending a datagram now and then.
/// Now a proven flow on which the transceiver has sent nothing marked as on a verified
/// path for SERVER_SILENT_SHED gives way when the table is full; one its transceiver
/// still serves does not.
#[test]
fn a_proven_flow_whose_transceiver_fell_silent_gives_way_when_the_table_is_full() {
    let t0 = Instant::now();
    let mut fwd = forwarder_with(policy(), 2, t0);
    let (ended, live) = (a("198.51.100.1:1"), a("198.51.100.2:2"));
    for (i, client) in [ended, live].into_iter().enumerate() {
        let request = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 1, 900 + i as u16);
        assert!(matches!(
            fwd.from_client(&request, client, a(VIP), t0),
            Verdict::Forward { .. }
        ));
        prove(&mut fwd, client, t0);
    }
    // Both clients keep sending; only `live`'s transceiver answers.
    let mut at = t0;
    while at < t0 + SERVER_SILENT_SHED {
        at += Duration::from_secs(5);
        for client in [ended, live] {
            fwd.from_client(&RTP, client, a(VIP), at);
        }
        fwd.from_internal(&frame("198.51.100.2:2", VIP, &RTP), a(TRANSCEIVER), at);
    }
    // `ended`'s transceiver also sent unmarked frames (to a path that never answered):
    // they do not count as serving it.
    let unmarked = frame_marked("198.51.100.1:1", VIP, &RTP, false);
    fwd.from_internal(&unmarked, a(TRANSCEIVER), at);
    let newcomer = a("203.0.113.9:9");
    let request = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 2, 999);
    let v = fwd.from_client(&request, newcomer, a(VIP), at);
    assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
    let held =
        |fwd: &TestRelay, who: SocketAddr| fwd.table().peek(&FlowKey::new(who, a(VIP))).is_some();
    assert!(!held(&fwd, ended), "the silent proven flow gave way");
    assert!(held(&fwd, live), "the served one stays");
    assert!(held(&fwd, newcomer));
    assert_eq!(fwd.table().counters().shed, 1);
}

/// Forged first packets cost a token-bucket look-up, not three HMACs, beyond
/// ATTEMPTS_PER_NEW_FLOW times the new-flow rates; another prefix is not affected.
#[test]
fn forged_first_packets_beyond_the_attempt_rate_are_refused_before_any_hmac() {
    use ufrag_common::admission::ATTEMPTS_PER_NEW_FLOW;
    let t0 = Instant::now();
    let two_per_second = ForwardPolicy {
        admission: AdmissionPolicy {
            new_flows_per_prefix: 2,
            ..AdmissionPolicy::default()
        },
        ..policy()
    };
    let mut fwd = forwarder_with(two_per_second, 16, t0);
    let mut forged = binding_request(TRANSCEIVER, CLUSTER, 1);
    let last = forged.len() - 1;
    forged[last] ^= 1; // the FINGERPRINT no longer matches
    let attempts = 2 * ATTEMPTS_PER_NEW_FLOW as usize;
    let verdicts: Vec<Verdict> = (0..attempts + 3)
        .map(|i| fwd.from_client(&forged, a(&format!("192.0.2.{}:9", i + 1)), a(VIP), t0))
        .collect();
    assert!(
        verdicts[..attempts]
            .iter()
            .all(|v| *v == Verdict::Drop(DropReason::StunBadFingerprint)),
        "{verdicts:?}"
    );
    assert!(
        verdicts[attempts..]
            .iter()
            .all(|v| *v == Verdict::Drop(DropReason::AuthRateLimit)),
        "{verdicts:?}"
    );
    let v = fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    assert!(
        matches!(v, Verdict::Forward { .. }),
        "another prefix: {v:?}"
    );
}

/// Junk spends no authentication attempt (a
/// one-byte datagram classifies as STUN, and the attempt used to be spent before any
/// parsing): a thousand of each kind below from one prefix, each dropped under its own
/// reason, and the prefix's next real request is still admitted.
#[test]
fn junk_spends_no_authentication_attempt() {
    let t0 = Instant::now();
    let two_per_second = ForwardPolicy {
        admission: AdmissionPolicy {
            new_flows_per_prefix: 2,
            ..AdmissionPolicy::default()
        },
        ..policy()
    };
    let mut fwd = forwarder_with(two_per_second, 16, t0);
    let good = binding_request(TRANSCEIVER, CLUSTER, 1);
    let mut bad_cookie = good.clone();
    bad_cookie[5] ^= 1;
    let mut indication = good.clone();
    indication[1] = 0x11;
    let junk: Vec<(&str, Vec<u8>, DropReason)> = vec![
        ("one byte", vec![0], DropReason::StunTooShort),
        (
            "a STUN header alone",
            good[..20].to_vec(),
            DropReason::StunLengthMismatch,
        ),
        ("a bad cookie", bad_cookie, DropReason::StunBadMagicCookie),
        (
            "a Binding Indication",
            indication,
            DropReason::NotBindingRequest,
        ),
        (
            "a ufrag that is no hint",
            request_with_username(b"evtj:h6vY"),
            DropReason::HintBadLength,
        ),
        (
            "a hint under a key id we do not hold",
            request_under_key(HintKey::new(7, SECRET).unwrap()),
            DropReason::HintUnknownKey,
        ),
    ];
    for (what, datagram, reason) in &junk {
        for n in 0..1000u32 {
            let source = a(&format!("192.0.2.1:{}", 1000 + n));
            let v = fwd.from_client(datagram, source, a(VIP), t0);
            assert_eq!(v, Verdict::Drop(*reason), "{what}");
        }
    }
    assert_eq!(fwd.counters().drops_of(DropReason::AuthRateLimit), 0);
    let v = fwd.from_client(&good, a("192.0.2.200:9"), a(VIP), t0);
    assert!(
        matches!(v, Verdict::Forward { .. }),
        "after the junk: {v:?}"
    );
}

/// An ICE restart mints a new ufrag but no new admission identity (one session's 72 signed first requests, each after a restart, made 72
/// flows against a cap of 8): every hint of a session carries its session bytes, and the
/// relay counts the flows of all its ufrags against the one cap. Another session is not
/// affected.
#[test]
fn the_ice_restarts_of_one_session_share_its_flow_cap() {
    let t0 = Instant::now();
    let cap_of_two = ForwardPolicy {
        admission: AdmissionPolicy {
            max_flows_per_session: 2,
            ..AdmissionPolicy::default()
        },
        ..policy()
    };
    let mut fwd = forwarder_with(cap_of_two, 64, t0);
    let verdicts: Vec<Verdict> = (0..6u8)
        .map(|restart| {
            // Each restart's hint: the same session bytes (5), minted a second later.
            let request = minted_binding_request(
                TRANSCEIVER,
                CLUSTER,
                5,
                minted() + u32::from(restart),
                &[40 + restart; 12],
            );
            let source = a(&format!("198.51.100.{}:7", restart + 1));
            fwd.from_client(&request, source, a(VIP), t0)
        })
        .collect();
    assert!(
        verdicts[..2]
            .iter()
            .all(|v| matches!(v, Verdict::Forward { .. })),
        "{verdicts:?}"
    );
    assert!(
        verdicts[2..]
            .iter()
            .all(|v| *v == Verdict::Drop(DropReason::SessionFlowLimit)),
        "{verdicts:?}"
    );
    let other_session = minted_binding_request(TRANSCEIVER, CLUSTER, 6, minted(), &[60; 12]);
    let v = fwd.from_client(&other_session, a("198.51.100.99:7"), a(VIP), t0);
    assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
}

/// A table full of proven flows refuses a newcomer before the newcomer's prefix spends a
/// rate token: a flood against a full table cannot also starve the prefixes
/// it spoofs.
#[test]
fn a_full_table_refuses_before_any_rate_token_is_spent() {
    let t0 = Instant::now();
    let one_per_second = ForwardPolicy {
        admission: AdmissionPolicy {
            new_flows_per_prefix: 1,
            ..AdmissionPolicy::default()
        },
        ..policy()
    };
    let mut fwd = forwarder_with(one_per_second, 1, t0);
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    prove(&mut fwd, a(CLIENT), t0);
    for i in 0..3u16 {
        let request = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 2, i);
        let v = fwd.from_client(&request, a("192.0.2.1:1"), a(VIP), t0);
        assert_eq!(v, Verdict::Drop(DropReason::TableFull));
    }
    assert!(fwd.end_flow(&FlowKey::new(a(CLIENT), a(VIP))));
    let request = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 2, 9);
    let v = fwd.from_client(&request, a("192.0.2.1:1"), a(VIP), t0);
    assert!(
        matches!(v, Verdict::Forward { .. }),
        "the prefix's one token is intact: {v:?}"
    );
}

/// Hints expire for new flows: a ufrag collected from a past session makes
/// nothing, while the flows a session already has live on.
#[test]
fn an_expired_hint_makes_no_new_flow_and_the_session_keeps_the_flows_it_has() {
    let t0 = Instant::now();
    let mut fwd = forwarder(t0);
    let max_age = AdmissionPolicy::default().hint_max_age;
    let stale_minted = minted() - max_age.as_secs() as u32 - 60;
    let stale = minted_binding_request(TRANSCEIVER, CLUSTER, 3, stale_minted, &[3; 12]);
    assert_eq!(
        fwd.from_client(&stale, a(CLIENT), a(VIP), t0),
        Verdict::Drop(DropReason::HintExpired)
    );
    let ahead = minted_binding_request(TRANSCEIVER, CLUSTER, 3, minted() + 3600, &[4; 12]);
    assert_eq!(
        fwd.from_client(&ahead, a(CLIENT), a(VIP), t0),
        Verdict::Drop(DropReason::HintExpired),
        "minted an hour ahead of the relay's clock"
    );
    // A fresh session's flow, kept alive by its consent checks past the hint's age.
    let consent = binding_request(TRANSCEIVER, CLUSTER, 5);
    assert!(matches!(
        fwd.from_client(&consent, a(CLIENT), a(VIP), t0),
        Verdict::Forward { .. }
    ));
    let mut at = t0;
    while at < t0 + max_age + Duration::from_secs(60) {
        at += Duration::from_secs(5);
        assert!(matches!(
            fwd.from_client(&consent, a(CLIENT), a(VIP), at),
            Verdict::Forward { .. }
        ));
    }
    // The same hint from a new address (a NAT rebinding) makes no new flow: the client
    // restarts ICE and gets a new hint.
    let rebound = binding_request_with_transaction(TRANSCEIVER, CLUSTER, 5, 77);
    assert_eq!(
        fwd.from_client(&rebound, a("198.51.100.99:1"), a(VIP), at),
        Verdict::Drop(DropReason::HintExpired)
    );
}

#[test]
fn return_path_goes_to_the_client_from_the_named_vip() {
    let t0 = Instant::now();
    let mut fwd = forwarder(t0);
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    let f = frame(CLIENT, VIP, &RTP);
    let v = fwd.from_internal(&f, a(TRANSCEIVER), t0);
    assert_eq!(
        v,
        Verdict::Return {
            client: a(CLIENT),
            vip: a(VIP),
            payload_at: 16
        }
    );
    assert_eq!(&f[16..], &RTP);
    assert_eq!(
        fwd.counters().forwarded_datagrams[Direction::Out as usize],
        1
    );
    assert_eq!(
        fwd.table()
            .peek(&FlowKey::new(a(CLIENT), a(VIP)))
            .unwrap()
            .stats
            .packets_out,
        1
    );
}

#[test]
fn each_bad_return_frame_is_dropped_under_its_reason() {
    let t0 = Instant::now();
    let setup = || {
        let mut fwd = forwarder(t0);
        fwd.from_client(
            &binding_request(TRANSCEIVER, CLUSTER, 1),
            a(CLIENT),
            a(VIP),
            t0,
        );
        fwd
    };
    let cases: Vec<(&str, Vec<u8>, &str, DropReason)> = vec![
        (
            "source outside all networks",
            frame(CLIENT, VIP, &RTP),
            "192.0.2.1:40000",
            DropReason::FrameSourceNotAllowed,
        ),
        (
            "client without a flow",
            frame("198.51.100.8:1", VIP, &RTP),
            TRANSCEIVER,
            DropReason::ReturnNoFlow,
        ),
        (
            "another transceiver answering",
            frame(CLIENT, VIP, &RTP),
            "10.0.0.3:40000",
            DropReason::ReturnWrongSource,
        ),
        (
            "VIP that is not ours",
            frame(CLIENT, "203.0.113.99:3478", &RTP),
            TRANSCEIVER,
            DropReason::ReturnNoFlow,
        ),
        (
            "raw datagram, no frame",
            RTP.to_vec(),
            TRANSCEIVER,
            DropReason::FrameNotAFrame,
        ),
        (
            "header only",
            frame(CLIENT, VIP, &[])[..16].to_vec(),
            TRANSCEIVER,
            DropReason::FrameEmptyPayload,
        ),
        (
            "truncated header",
            frame(CLIENT, VIP, &RTP)[..10].to_vec(),
            TRANSCEIVER,
            DropReason::FrameTooShort,
        ),
    ];
    for (what, f, source, reason) in cases {
        let mut fwd = setup();
        assert_eq!(
            fwd.from_internal(&f, a(source), t0),
            Verdict::Drop(reason),
            "{what}"
        );
        assert_eq!(fwd.counters().drops_of(reason), 1, "{what}");
        assert_eq!(
            fwd.counters().forwarded_datagrams[Direction::Out as usize],
            0,
            "{what}: nothing sent"
        );
    }
}

#[test]
fn a_flow_on_a_vip_we_no_longer_serve_is_not_answered() {
    let t0 = Instant::now();
    let mut fwd = forwarder(t0);
    // A flow restored from the cache for a VIP this relay does not serve.
    let key = FlowKey::new(a(CLIENT), a("203.0.113.99:3478"));
    assert!(fwd.restore(
        &key,
        Route {
            next_hop: a(TRANSCEIVER),
            return_via: None
        },
        t0
    ));
    let v = fwd.from_internal(
        &frame(CLIENT, "203.0.113.99:3478", &RTP),
        a(TRANSCEIVER),
        t0,
    );
    expect_drop(v, DropReason::ReturnUnknownVip, &mut fwd);
    assert_eq!(
        fwd.counters().forwarded_datagrams[Direction::Out as usize],
        0
    );
}

#[test]
fn a_full_table_refuses_new_flows_while_old_ones_keep_forwarding() {
    let t0 = Instant::now();
    let mut fwd = forwarder_with(policy(), 2, t0);
    for port in [1, 2] {
        let client = SocketAddr::from(([198, 51, 100, 7], port));
        assert!(matches!(
            fwd.from_client(
                &binding_request(TRANSCEIVER, CLUSTER, port as u8),
                client,
                a(VIP),
                t0
            ),
            Verdict::Forward { .. }
        ));
        prove(&mut fwd, client, t0);
    }
    let third = SocketAddr::from(([198, 51, 100, 7], 3));
    let v = fwd.from_client(&binding_request(TRANSCEIVER, CLUSTER, 3), third, a(VIP), t0);
    expect_drop(v, DropReason::TableFull, &mut fwd);
    assert_eq!(fwd.counters().flows_refused, 1);
    for port in [1, 2] {
        let client = SocketAddr::from(([198, 51, 100, 7], port));
        assert!(matches!(
            fwd.from_client(&RTP, client, a(VIP), t0),
            Verdict::Forward { .. }
        ));
    }
}

#[test]
fn idle_flows_expire_and_then_need_stun_again() {
    let t0 = Instant::now();
    let mut fwd = forwarder(t0);
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    assert_eq!(fwd.expire(t0 + Duration::from_secs(29), 10), 0);
    assert_eq!(fwd.expire(t0 + Duration::from_secs(30), 10), 1);
    assert_eq!(fwd.counters().flows_expired, 1);
    assert_eq!(fwd.counters().flows_active, 0);
    let later = t0 + Duration::from_secs(31);
    assert_eq!(
        fwd.from_client(&RTP, a(CLIENT), a(VIP), later),
        Verdict::Drop(DropReason::NoFlow)
    );
    // The client's next check: the same session, a new transaction (a copy of the first
    // would be a replay).
    assert!(matches!(
        fwd.from_client(
            &binding_request_with_transaction(TRANSCEIVER, CLUSTER, 1, 2),
            a(CLIENT),
            a(VIP),
            later
        ),
        Verdict::Forward { .. }
    ));
    assert_eq!(fwd.counters().flows_created, 2);
}

#[test]
fn restore_from_the_route_cache() {
    let t0 = Instant::now();
    let mut fwd = forwarder_with(
        ForwardPolicy {
            route_cache: true,
            ..policy()
        },
        4,
        t0,
    );
    let key = FlowKey::new(a(CLIENT), a(VIP));
    assert_eq!(
        fwd.from_client(&RTP, a(CLIENT), a(VIP), t0),
        Verdict::LookupRoute {
            key,
            question_out: false
        }
    );
    assert!(fwd.restore(
        &key,
        Route {
            next_hop: a(TRANSCEIVER),
            return_via: None
        },
        t0
    ));
    assert!(
        matches!(fwd.from_client(&RTP, a(CLIENT), a(VIP), t0), Verdict::Forward { to, record: None, .. } if to == a(TRANSCEIVER))
    );
    assert_eq!(fwd.counters().cache_hits, 1);
    // A cached route to a destination outside the allowed networks is refused.
    let other = FlowKey::new(a("198.51.100.8:1"), a(VIP));
    assert!(!fwd.restore(
        &other,
        Route {
            next_hop: a("192.0.2.5:1"),
            return_via: None
        },
        t0
    ));
    assert!(fwd.table().peek(&other).is_none());
    // So is one whose return path is not a global relay's: the cache must not aim the VIP's traffic anywhere else.
    assert!(!fwd.restore(
        &other,
        Route {
            next_hop: a(TRANSCEIVER),
            return_via: Some(a("198.51.100.66:9"))
        },
        t0
    ));
    assert!(fwd.table().peek(&other).is_none());
}

#[test]
fn global_mode_global_relay_to_cluster_relay_to_transceiver_and_back() {
    let t0 = Instant::now();
    let global_internal = a("192.0.2.1:41000");
    let cluster_relay = a("10.1.0.1:42000");
    // The global relay (cluster 0) knows cluster 1's relay.
    let mut global = forwarder_with(
        ForwardPolicy {
            cluster_id: 0,
            clusters: BTreeMap::from([(1, cluster_relay)]),
            ..policy()
        },
        8,
        t0,
    );
    // Cluster 1's relay accepts frames from the global relays' network.
    let mut cluster = forwarder_with(
        ForwardPolicy {
            global_relay_networks: vec!["192.0.2.0/24".parse().unwrap()],
            ..policy()
        },
        8,
        t0,
    );

    let stun = binding_request(TRANSCEIVER, 1, 1);
    let Verdict::Forward { to, header, .. } = global.from_client(&stun, a(CLIENT), a(VIP), t0)
    else {
        panic!("global relay forwards");
    };
    assert_eq!(to, cluster_relay);
    assert_eq!(
        global
            .table()
            .peek(&FlowKey::new(a(CLIENT), a(VIP)))
            .unwrap()
            .value
            .route,
        Route {
            next_hop: cluster_relay,
            return_via: None
        }
    );

    // The frame as it arrives at the cluster relay, from the global relay's internal port.
    let mut f = vec![0u8; header.encoded_len()];
    header.emit(&mut f).unwrap();
    f.extend_from_slice(&stun);
    let v = cluster.from_internal(&f, global_internal, t0);
    assert_eq!(
        v,
        Verdict::Forward {
            to: a(TRANSCEIVER),
            header: FrameHeader::new(a(CLIENT), a(VIP)),
            payload_at: header.encoded_len(),
            record: None,
        }
    );
    let state = cluster
        .table()
        .peek(&FlowKey::new(a(CLIENT), a(VIP)))
        .unwrap()
        .value;
    assert_eq!(
        state.route,
        Route {
            next_hop: a(TRANSCEIVER),
            return_via: Some(global_internal)
        }
    );

    // The transceiver answers the cluster relay; it passes the frame back to the global relay…
    let reply = frame(CLIENT, VIP, &RTP);
    assert_eq!(
        cluster.from_internal(&reply, a(TRANSCEIVER), t0),
        Verdict::Relay {
            to: global_internal
        }
    );
    // …which sends it to the client from its VIP.
    assert_eq!(
        global.from_internal(&reply, cluster_relay, t0),
        Verdict::Return {
            client: a(CLIENT),
            vip: a(VIP),
            payload_at: 16
        }
    );

    // Frames from outside the global relays' network are refused by the cluster relay,
    // and a global relay's frame for yet another cluster is not passed on.
    assert_eq!(
        cluster.from_internal(&f, a("198.18.0.1:1"), t0),
        Verdict::Drop(DropReason::FrameSourceNotAllowed)
    );
    let mut other = vec![0u8; header.encoded_len()];
    FrameHeader::new(a("198.51.100.9:9"), a(VIP))
        .emit(&mut other)
        .unwrap();
    other.extend_from_slice(&binding_request(TRANSCEIVER, 2, 4));
    assert_eq!(
        cluster.from_internal(&other, global_internal, t0),
        Verdict::Drop(DropReason::UnknownCluster)
    );

    // The session ends: the transceiver's notice frees the cluster relay's flow and goes
    // on to the global relay, which frees its own. A global relay never sends one.
    let key = FlowKey::new(a(CLIENT), a(VIP));
    let notice = session_ended_frame(CLIENT, VIP);
    assert_eq!(
        cluster.from_internal(&notice, global_internal, t0),
        Verdict::Drop(DropReason::FrameSourceNotAllowed)
    );
    assert_eq!(
        cluster.from_internal(&notice, a(TRANSCEIVER), t0),
        Verdict::Relay {
            to: global_internal
        }
    );
    assert!(cluster.table().peek(&key).is_none());
    assert_eq!(
        global.from_internal(&notice, cluster_relay, t0),
        Verdict::Drop(DropReason::SessionEnded)
    );
    assert!(global.table().peek(&key).is_none());
}

/// The frame a transceiver sends when `client`'s session on `vip` ends: the header alone.
fn session_ended_frame(client: &str, vip: &str) -> Vec<u8> {
    let header = FrameHeader::new(a(client), a(vip))
        .on_verified_path(true)
        .ending_session();
    let mut f = vec![0u8; header.encoded_len()];
    header.emit(&mut f).unwrap();
    f
}

/// A proven flow used to outlive its session until
/// it went idle, or until its transceiver had been silent for SERVER_SILENT_SHED and the
/// table was full. Now the transceiver's notice frees it (and its session's count) at
/// once; the same notice from another source, or for a flow not held, changes nothing.
#[test]
fn a_session_ended_notice_from_the_flows_transceiver_frees_the_flow_at_once() {
    let t0 = Instant::now();
    let mut fwd = forwarder_with(policy(), 4, t0);
    let request = binding_request(TRANSCEIVER, CLUSTER, 1);
    assert!(matches!(
        fwd.from_client(&request, a(CLIENT), a(VIP), t0),
        Verdict::Forward { .. }
    ));
    fwd.from_client(&DTLS, a(CLIENT), a(VIP), t0);
    let dtls = frame_marked(CLIENT, VIP, &DTLS, true);
    assert!(matches!(
        fwd.from_internal(&dtls, a(TRANSCEIVER), t0),
        Verdict::Return { .. }
    ));
    let key = FlowKey::new(a(CLIENT), a(VIP));
    assert!(fwd.table().peek(&key).unwrap().value.proven());
    let notice = session_ended_frame(CLIENT, VIP);
    assert_eq!(
        fwd.from_internal(&notice, a("10.0.0.3:40000"), t0),
        Verdict::Drop(DropReason::ReturnWrongSource),
        "another transceiver cannot end it"
    );
    assert!(fwd.table().peek(&key).is_some());
    assert_eq!(
        fwd.from_internal(&notice, a(TRANSCEIVER), t0),
        Verdict::Drop(DropReason::SessionEnded)
    );
    assert!(fwd.table().peek(&key).is_none(), "freed at once");
    assert_eq!(
        fwd.from_internal(&notice, a(TRANSCEIVER), t0),
        Verdict::Drop(DropReason::SessionEndNoFlow)
    );
    // The client's media finds no flow now: a late datagram is not carried.
    assert_eq!(
        fwd.from_client(&DTLS, a(CLIENT), a(VIP), t0),
        Verdict::Drop(DropReason::NoFlow)
    );
}

#[test]
fn with_a_route_cache_new_flows_are_recorded_and_refreshed_while_they_live() {
    let t0 = Instant::now();
    let mut fwd = forwarder_with(
        ForwardPolicy {
            route_cache: true,
            ..policy()
        },
        4,
        t0,
    );
    let route = Route {
        next_hop: a(TRANSCEIVER),
        return_via: None,
    };
    let record_of = |v: Verdict| match v {
        Verdict::Forward { record, .. } => record,
        other => panic!("{other:?}"),
    };
    // Only a flow that carried DTLS or media is cached: not at its first request.
    assert_eq!(
        record_of(fwd.from_client(
            &binding_request(TRANSCEIVER, CLUSTER, 1),
            a(CLIENT),
            a(VIP),
            t0
        )),
        None
    );
    // Nor at the client's first media: a spoofer can send that blind.
    assert_eq!(
        record_of(fwd.from_client(&RTP, a(CLIENT), a(VIP), t0)),
        None
    );
    // The transceiver answers with media: the path is its session's, recorded at once
    // (a fast path may carry the client's next datagrams past the forwarder).
    fwd.from_internal(&frame(CLIENT, VIP, &RTP), a(TRANSCEIVER), t0);
    let key = FlowKey::new(a(CLIENT), a(VIP));
    assert_eq!(
        fwd.egress.cache_requests,
        [RouteCacheRequest::Record { key, route }]
    );
    assert_eq!(
        record_of(fwd.from_client(&RTP, a(CLIENT), a(VIP), t0)),
        None
    );
    assert_eq!(
        record_of(fwd.from_client(&RTP, a(CLIENT), a(VIP), t0 + Duration::from_secs(9))),
        None
    );
    // Idle timeout 30 s: refreshed once 10 s have passed since the last record, then not again.
    assert_eq!(
        record_of(fwd.from_client(&RTP, a(CLIENT), a(VIP), t0 + Duration::from_secs(10))),
        Some(route)
    );
    assert_eq!(
        record_of(fwd.from_client(&RTP, a(CLIENT), a(VIP), t0 + Duration::from_secs(11))),
        None
    );
    // The session ends: the flow's route leaves the cache with it, so the client's late
    // media cannot restore it.
    let at = t0 + Duration::from_secs(12);
    assert_eq!(
        fwd.from_internal(&session_ended_frame(CLIENT, VIP), a(TRANSCEIVER), at),
        Verdict::Drop(DropReason::SessionEnded)
    );
    assert_eq!(
        fwd.egress.cache_requests.last(),
        Some(&RouteCacheRequest::Forget { key })
    );
}

/// Two workers' forwarders sharing one set of return paths, as relay-afxdp builds them.
fn two_workers_sharing_returns(t0: Instant) -> (TestRelay, TestRelay, Arc<SharedReturns>) {
    let returns = Arc::new(SharedReturns::new(32, t0));
    let worker = |capacity| {
        let forwarder = support::started_forwarder(
            policy(),
            FlowTable::new(capacity, Duration::from_secs(30), t0).unwrap(),
            t0,
        )
        .with_shared_returns(returns.clone());
        TestRelay::new(forwarder, PlannedEgress::logging())
    };
    (worker(16), worker(16), returns)
}

/// A flow whose returns another worker carries
/// is live, however long its owner has seen nothing from the client: another session's
/// request cannot move it. Before, only the owner's own table and the mirror were read.
#[test]
fn a_flow_whose_returns_another_worker_takes_cannot_be_moved() {
    let t0 = Instant::now();
    let (mut owner, mut other, _returns) = two_workers_sharing_returns(t0);
    owner.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    // The model talks: its audio lands on the other worker, the client is silent.
    let talking = t0 + REROUTE_MIN_IDLE + Duration::from_secs(1);
    let back = frame(CLIENT, VIP, &RTP);
    assert!(matches!(
        other.from_internal(&back, a(TRANSCEIVER), talking),
        Verdict::Return { .. }
    ));
    let second = "10.0.0.3:40000";
    let v = owner.from_client(
        &binding_request(second, CLUSTER, 2),
        a(CLIENT),
        a(VIP),
        talking,
    );
    assert!(
        matches!(v, Verdict::Forward { to, .. } if to == a(TRANSCEIVER)),
        "the live flow stays: {v:?}"
    );
}

#[test]
fn any_worker_sends_a_return_for_a_flow_another_worker_owns() {
    let t0 = Instant::now();
    let (mut owner, mut other, returns) = two_workers_sharing_returns(t0);
    owner.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    assert_eq!(returns.published(), 1);
    let f = frame(CLIENT, VIP, &RTP);
    assert_eq!(
        other.from_internal(&f, a(TRANSCEIVER), t0),
        Verdict::Return {
            client: a(CLIENT),
            vip: a(VIP),
            payload_at: 16
        }
    );
    assert_eq!(other.counters().shared_returns, 1);
    assert_eq!(
        other.counters().forwarded_datagrams[Direction::Out as usize],
        1
    );
    assert!(other.table().is_empty(), "the other worker makes no flow");
    // The same rule as the owner's: only the flow's own transceiver may answer, only a
    // flow's client is sent to, only from our VIP.
    let cases = [
        (
            frame(CLIENT, VIP, &RTP),
            a("10.0.0.9:40000"),
            DropReason::ReturnNoFlow,
        ),
        (
            frame("198.51.100.99:1", VIP, &RTP),
            a(TRANSCEIVER),
            DropReason::ReturnNoFlow,
        ),
    ];
    for (f, source, reason) in cases {
        assert_eq!(
            other.from_internal(&f, source, t0),
            Verdict::Drop(reason),
            "{source}"
        );
    }
    assert_eq!(other.counters().shared_returns, 1);
    // The owner's own return is decided from its table, not the set.
    assert!(matches!(
        owner.from_internal(&f, a(TRANSCEIVER), t0),
        Verdict::Return { .. }
    ));
    assert_eq!(owner.counters().shared_returns, 0);
}

#[test]
fn returns_taken_by_another_worker_keep_the_owners_flow_alive_until_they_stop() {
    let t0 = Instant::now();
    let (mut owner, mut other, returns) = two_workers_sharing_returns(t0);
    owner.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    let f = frame(CLIENT, VIP, &RTP);
    // The client goes quiet; the model keeps talking, through the other worker.
    for s in (1..=40).step_by(3) {
        let now = t0 + Duration::from_secs(s);
        assert!(matches!(
            other.from_internal(&f, a(TRANSCEIVER), now),
            Verdict::Return { .. }
        ));
        owner.expire(now, 16);
    }
    assert_eq!(
        owner.counters().flows_active,
        1,
        "kept alive by its returns"
    );
    assert_eq!(owner.counters().flows_expired, 0);
    // The returns stop at 40 s: the flow goes one idle timeout later, and its return
    // path with it.
    let last = t0 + Duration::from_secs(40);
    assert_eq!(owner.expire(last + Duration::from_secs(29), 16), 0);
    assert_eq!(owner.expire(last + Duration::from_secs(31), 16), 1);
    assert_eq!(returns.published(), 0);
    assert_eq!(
        other.from_internal(&f, a(TRANSCEIVER), last + Duration::from_secs(31)),
        Verdict::Drop(DropReason::ReturnNoFlow)
    );
}

#[test]
fn a_flow_that_moves_to_another_session_moves_its_shared_return_path() {
    let t0 = Instant::now();
    let (mut owner, mut other, returns) = two_workers_sharing_returns(t0);
    owner.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    let second = "10.0.0.3:40000";
    let later = t0 + REROUTE_MIN_IDLE + Duration::from_secs(1);
    let v = owner.from_client(
        &binding_request(second, CLUSTER, 2),
        a(CLIENT),
        a(VIP),
        later,
    );
    assert!(
        matches!(v, Verdict::Forward { to, .. } if to == a(second)),
        "{v:?}"
    );
    assert_eq!(returns.published(), 1);
    let f = frame(CLIENT, VIP, &RTP);
    assert_eq!(
        other.from_internal(&f, a(TRANSCEIVER), later),
        Verdict::Drop(DropReason::ReturnNoFlow),
        "the old transceiver may no longer answer"
    );
    assert!(matches!(
        other.from_internal(&f, a(second), later),
        Verdict::Return { .. }
    ));
}

#[test]
fn restored_flows_are_shared_and_a_full_table_never_reclaims_a_shared_flow_unseen() {
    let t0 = Instant::now();
    let returns = Arc::new(SharedReturns::new(32, t0));
    let mut owner = TestRelay::new(
        support::started_forwarder(
            ForwardPolicy {
                route_cache: true,
                ..policy()
            },
            FlowTable::new(1, Duration::from_secs(30), t0).unwrap(),
            t0,
        )
        .with_shared_returns(returns.clone()),
        PlannedEgress::logging(),
    );
    let key = FlowKey::new(a(CLIENT), a(VIP));
    let route = Route {
        next_hop: a(TRANSCEIVER),
        return_via: None,
    };
    assert!(owner.restore(&key, route, t0));
    assert!(
        returns
            .take_return(&key, a(TRANSCEIVER), false, t0)
            .is_some()
    );
    // Idle on its owner for the timeout, but its returns went on elsewhere: a new client
    // finds the one-slot table full, and the shared flow stays.
    let now = t0 + Duration::from_secs(31);
    assert!(
        returns
            .take_return(&key, a(TRANSCEIVER), false, now - Duration::from_secs(1))
            .is_some()
    );
    let v = owner.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 3),
        a("198.51.100.8:1"),
        a(VIP),
        now,
    );
    assert_eq!(v, Verdict::Drop(DropReason::TableFull));
    assert_eq!(owner.counters().flows_refused, 1);
    assert!(owner.table().peek(&key).is_some());
    assert!(
        returns
            .take_return(&key, a(TRANSCEIVER), false, now)
            .is_some()
    );
}

/// A mirror that records what it is told and answers `last_seen` from `carried_at`.
#[derive(Debug, Default)]
struct MirrorLog {
    proven: Vec<(FlowKey, Route)>,
    gone: Vec<(FlowKey, Route)>,
    carried_at: Option<Instant>,
}

#[derive(Debug)]
struct RecordingMirror(Arc<std::sync::Mutex<MirrorLog>>);

impl FlowMirror for RecordingMirror {
    fn proven(&mut self, key: &FlowKey, route: Route, _now: Instant) {
        self.0.lock().unwrap().proven.push((*key, route));
    }
    fn gone(&mut self, key: &FlowKey, route: Route) {
        self.0.lock().unwrap().gone.push((*key, route));
    }
    fn last_seen(&mut self, _key: &FlowKey, _route: Route, _now: Instant) -> Option<Instant> {
        self.0.lock().unwrap().carried_at
    }
}

fn mirrored(t0: Instant) -> (TestRelay, Arc<std::sync::Mutex<MirrorLog>>) {
    let log = Arc::new(std::sync::Mutex::new(MirrorLog::default()));
    let forwarder = support::started_forwarder(
        ForwardPolicy {
            route_cache: true,
            ..policy()
        },
        FlowTable::new(16, Duration::from_secs(30), t0).unwrap(),
        t0,
    )
    .with_mirror(Box::new(RecordingMirror(log.clone())));
    (TestRelay::new(forwarder, PlannedEgress::logging()), log)
}

#[test]
fn the_mirror_gets_a_flow_when_it_proves_itself_and_loses_it_when_it_expires() {
    let t0 = Instant::now();
    let (mut fwd, log) = mirrored(t0);
    let key = FlowKey::new(a(CLIENT), a(VIP));
    let route = Route {
        next_hop: a(TRANSCEIVER),
        return_via: None,
    };
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    assert!(
        log.lock().unwrap().proven.is_empty(),
        "STUN alone proves nothing"
    );
    fwd.from_client(&DTLS, a(CLIENT), a(VIP), t0);
    assert!(
        log.lock().unwrap().proven.is_empty(),
        "the client's DTLS alone proves nothing"
    );
    fwd.from_internal(&frame(CLIENT, VIP, &DTLS), a(TRANSCEIVER), t0);
    fwd.from_client(&RTP, a(CLIENT), a(VIP), t0);
    fwd.from_internal(&frame(CLIENT, VIP, &RTP), a(TRANSCEIVER), t0);
    assert_eq!(
        log.lock().unwrap().proven,
        vec![(key, route)],
        "once, at the transceiver's first DTLS after the client's"
    );
    // The mirror carried it until 40 s: it outlives its idle timeout on the worker.
    log.lock().unwrap().carried_at = Some(t0 + Duration::from_secs(40));
    assert_eq!(fwd.expire(t0 + Duration::from_secs(45), 16), 0);
    assert!(log.lock().unwrap().gone.is_empty());
    assert_eq!(fwd.expire(t0 + Duration::from_secs(71), 16), 1);
    assert_eq!(log.lock().unwrap().gone, vec![(key, route)]);
    // A flow that never proved itself was never mirrored, and leaves without a word.
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 2),
        a("198.51.100.8:1"),
        a(VIP),
        t0 + Duration::from_secs(71),
    );
    log.lock().unwrap().carried_at = None;
    assert_eq!(fwd.expire(t0 + Duration::from_secs(102), 16), 1);
    assert_eq!(log.lock().unwrap().gone.len(), 1);
}

#[test]
fn a_flow_the_mirror_carries_is_not_idle_and_cannot_be_moved() {
    let t0 = Instant::now();
    let (mut fwd, log) = mirrored(t0);
    fwd.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    fwd.from_client(&DTLS, a(CLIENT), a(VIP), t0);
    fwd.from_internal(&frame(CLIENT, VIP, &DTLS), a(TRANSCEIVER), t0);
    // The worker has seen nothing for a consent interval, but the mirror carried media
    // a second ago: another session's request from this address does not move it.
    let later = t0 + REROUTE_MIN_IDLE + Duration::from_secs(1);
    log.lock().unwrap().carried_at = Some(later - Duration::from_secs(1));
    let second = "10.0.0.3:40000";
    let v = fwd.from_client(
        &binding_request(second, CLUSTER, 2),
        a(CLIENT),
        a(VIP),
        later,
    );
    assert!(
        matches!(v, Verdict::Forward { to, .. } if to == a(TRANSCEIVER)),
        "{v:?}"
    );
    // Idle everywhere: it moves, and the mirror loses the old route.
    let much_later = later + REROUTE_MIN_IDLE + Duration::from_secs(1);
    let v = fwd.from_client(
        &binding_request(second, CLUSTER, 3),
        a(CLIENT),
        a(VIP),
        much_later,
    );
    assert!(
        matches!(v, Verdict::Forward { to, .. } if to == a(second)),
        "{v:?}"
    );
    let gone = &log.lock().unwrap().gone;
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].1.next_hop, a(TRANSCEIVER));
}

#[test]
fn a_restored_flow_is_mirrored_at_once() {
    let t0 = Instant::now();
    let (mut fwd, log) = mirrored(t0);
    let key = FlowKey::new(a(CLIENT), a(VIP));
    let route = Route {
        next_hop: a(TRANSCEIVER),
        return_via: None,
    };
    assert!(fwd.restore(&key, route, t0));
    assert_eq!(log.lock().unwrap().proven, vec![(key, route)]);
}

#[test]
fn a_tcp_forwarder_frames_with_the_tcp_bit_refuses_udp_returns_and_ends_flows_with_their_connections()
 {
    use ufrag_common::frame::Transport;
    let t0 = Instant::now();
    let tcp_policy = policy();
    let mut fwd = TestRelay::new(
        support::started_forwarder(
            tcp_policy,
            FlowTable::new(16, Duration::from_secs(30), t0).unwrap(),
            t0,
        )
        .serving(Transport::Tcp),
        PlannedEgress::logging(),
    );
    let request = binding_request(TRANSCEIVER, CLUSTER, 1);
    let v = fwd.from_client(&request, a(CLIENT), a(VIP), t0);
    assert!(
        matches!(v, Verdict::Forward { header, .. }
            if header == FrameHeader::over(Transport::Tcp, a(CLIENT), a(VIP))),
        "{v:?}"
    );
    // A return frame without the TCP bit is not for this forwarder's clients.
    let udp_return = frame(CLIENT, VIP, &RTP);
    let v = fwd.from_internal(&udp_return, a(TRANSCEIVER), t0);
    expect_drop(v, DropReason::FrameWrongTransport, &mut fwd);
    let tcp_return = {
        let h = FrameHeader::over(Transport::Tcp, a(CLIENT), a(VIP));
        let mut f = vec![0u8; h.encoded_len()];
        h.emit(&mut f).unwrap();
        f.extend_from_slice(&RTP);
        f
    };
    let v = fwd.from_internal(&tcp_return, a(TRANSCEIVER), t0);
    assert!(matches!(v, Verdict::Return { .. }), "{v:?}");
    // The connection closes: its flow ends at once, and its session's slot is free.
    let key = FlowKey::new(a(CLIENT), a(VIP));
    assert!(fwd.executor.end_flow(&key));
    assert!(!fwd.executor.end_flow(&key), "ended once");
    assert!(fwd.table().peek(&key).is_none());
    let server = ufrag_common::stun::StunView::parse(&request)
        .unwrap()
        .ufrags()
        .unwrap()
        .server;
    let hint = keys().authenticate(server).unwrap();
    let session = fwd.executor.forwarder().admission().session_tag(&hint);
    assert_eq!(fwd.executor.forwarder().admission().flows_of(session), 0);
    // And a UDP forwarder (the default) refuses a TCP frame the same way.
    let mut udp = forwarder(t0);
    udp.from_client(&request, a(CLIENT), a(VIP), t0);
    let v = udp.from_internal(&tcp_return, a(TRANSCEIVER), t0);
    expect_drop(v, DropReason::FrameWrongTransport, &mut udp);
}
