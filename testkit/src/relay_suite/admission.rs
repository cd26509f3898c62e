//! What one session and one source may cost a running relay: a session's valid Binding
//! Request replayed from many source addresses creates one flow (every copy counted as
//! `replayed_request`, none forwarded, so nothing is reflected), newly signed requests
//! for one session stop at its flow cap (`session_flow_limit`), and other sessions are
//! unaffected. With two workers, one request replayed from 64 sources still makes one
//! flow in the whole relay; flows squatted with blind "media" from spoofed sources give
//! way to a new session at once, oldest first, and never take a proven one's place.

use super::harness::*;
use super::{Backend, XdpMode};

/// Sources the one request is replayed from (each a new address or port, as spoofing
/// would give).
const REPLAYS: usize = 10_000;
/// Replays sent before the relay's counters are checked.
const REPLAY_ROUND: usize = 100;
/// Newly signed requests for the same session, each from its own source.
const FRESH_REQUESTS: usize = 20;

/// An authentic Binding Request that made its flow, the one every replay copies.
struct Original {
    net: Net,
    transceiver: Endpoint,
    request: Vec<u8>,
    /// The original sender stays open: a replay source must not reuse its port.
    sender: Endpoint,
}

/// Sends a session's first Binding Request to `relay` and waits until it made its flow.
fn original_request(relay: &RelayProcess) -> Original {
    let net = relay.net().clone();
    let transceiver = net.transceiver();
    let request = binding_request_for(transceiver.addr(), 0, 1);
    let sender = net.client();
    sender.send(relay.vip(), &request);
    assert!(
        transceiver.recv_frame().is_some(),
        "the original creates a flow"
    );
    Original {
        net,
        transceiver,
        request,
        sender,
    }
}

pub fn one_sessions_request_replayed_from_many_sources_creates_one_flow(b: &Backend) {
    // The sources share a few prefixes: lift the prefix rates (and with them the rate of
    // authentication attempts, 4x) so that what is counted is the replay filter alone.
    let relay = RelayProcess::start(&RelaySetup {
        extra: vec!["--new-flows-per-prefix".into(), "100000".into()],
        ..b.setup()
    });
    let Original {
        net,
        transceiver,
        request,
        sender: _original,
    } = original_request(&relay);

    // In rounds, each counted before the next is sent, so that what is measured is the
    // relay and not a receive ring overflowing under a burst on a busy machine.
    for round in 1..=REPLAYS / REPLAY_ROUND {
        for _ in 0..REPLAY_ROUND {
            net.client().send(relay.vip(), &request);
        }
        relay.wait_for("every replay counted", |r| {
            r.drops("replayed_request") == (round * REPLAY_ROUND) as f64
        });
    }
    assert_eq!(
        transceiver.count_arrivals(),
        0,
        "no replay reached the transceiver"
    );

    // Someone holding the session's credentials signs new requests: each creates a flow
    // until the session's cap (8 by default), and the rest are refused.
    let cap = 8;
    // Each sender stays open, so that no two of them share a source port.
    let senders: Vec<Endpoint> = (0..FRESH_REQUESTS).map(|_| net.client()).collect();
    for (i, sender) in senders.iter().enumerate() {
        let mut id = [0x5a; 12];
        id[0] = i as u8;
        let fresh = binding_request_with_transaction(transceiver.addr(), 0, 1, id);
        sender.send(relay.vip(), &fresh);
    }
    relay.wait_for("the session stopped at its cap", |r| {
        r.drops("session_flow_limit") == (FRESH_REQUESTS - (cap - 1)) as f64
    });
    assert_eq!(transceiver.count_arrivals(), cap - 1);
    assert_eq!(relay.total("ufrag_relay_flows_active", ""), cap as f64);

    // Another session still connects.
    let other = net.client();
    other.send(relay.vip(), &binding_request_for(transceiver.addr(), 0, 2));
    let (header, _, _) = transceiver
        .recv_frame()
        .expect("a new session gets its flow");
    assert_eq!(header.client, other.addr());
}

/// The replay filter is the relay's, not a
/// worker's. Before, SO_REUSEPORT (or the NIC's RSS) put copies from other source ports
/// on the other worker, which admitted one: two flows from one request.
pub fn a_request_replayed_from_64_sources_makes_one_flow_whichever_worker_sees_it(b: &Backend) {
    const SOURCES: usize = 64;
    let relay = RelayProcess::start(&RelaySetup {
        workers: 2,
        ..RelaySetup::on(b.net_with_queues(2))
    });
    let Original {
        net,
        transceiver,
        request,
        sender: _original,
    } = original_request(&relay);
    // Each replay source stays open, so no two share a port.
    let replayers: Vec<Endpoint> = (0..SOURCES).map(|_| net.client()).collect();
    for replayer in &replayers {
        replayer.send(relay.vip(), &request);
    }
    relay.wait_for("every replay counted", |r| {
        r.drops("replayed_request") == SOURCES as f64
    });
    assert_eq!(transceiver.count_arrivals(), 0, "no replay was forwarded");
    assert_eq!(relay.total("ufrag_relay_flows_active", ""), 1.0);
    // Where the backend spreads sources over both workers, both refused copies: the
    // filter is shared, not merely one worker's.
    if b.xdp != Some(XdpMode::Skb) {
        let metrics = relay.metrics();
        for worker in 0..2 {
            let series = format!(
                "ufrag_relay_dropped_datagrams_total{{worker=\"{worker}\",reason=\"replayed_request\"}}"
            );
            let refused = metrics.get(&series).copied().unwrap_or(0.0);
            assert!(refused > 0.0, "worker {worker} saw no replay: {metrics:?}");
        }
    }
}

/// A full table of flows that spoofed sources
/// keep busy with blind DTLS, which their transceiver never answers, makes room for a
/// new session at once (the oldest squatter goes), and the session's proven flow
/// outlives a second wave of squatters. Before, the first non-STUN byte proved a flow and
/// proven flows were never shed: the newcomer was refused for as long as the squatters
/// kept sending; and while young squatters were protected, an attacker refilling the
/// table kept every newcomer out (`perf resilience`: 0 of 10 sessions connected).
pub fn squatted_flows_that_never_prove_themselves_give_way_to_a_new_session(b: &Backend) {
    const TABLE: usize = 8;
    let relay = RelayProcess::start(&RelaySetup {
        extra: vec!["--flows-per-worker".into(), TABLE.to_string()],
        ..b.setup()
    });
    let net = relay.net().clone();
    let transceiver = net.transceiver();
    let squat = |wave: u8| -> Vec<Endpoint> {
        let squatters: Vec<Endpoint> = (0..TABLE).map(|_| net.client()).collect();
        for (i, squatter) in squatters.iter().enumerate() {
            let mut id = [0x5b; 12];
            id[..2].copy_from_slice(&[wave, i as u8]);
            squatter.send(
                relay.vip(),
                &binding_request_with_transaction(transceiver.addr(), 0, 9 + wave, id),
            );
            squatter.send(relay.vip(), &dtls());
        }
        squatters
    };
    let _first_wave = squat(0);
    relay.wait_for("the table full of squatters", |r| {
        r.total("ufrag_relay_flows_active", "") == TABLE as f64
    });
    transceiver.count_arrivals();
    let newcomer = net.client();
    let request = binding_request_for(transceiver.addr(), 0, 1);
    newcomer.send(relay.vip(), &request);
    relay.wait_for("the oldest squatter shed for the newcomer", |r| {
        r.total("ufrag_relay_flows_shed_total", "") == 1.0
    });
    let (header, payload, _) = transceiver
        .recv_frame()
        .expect("the newcomer's request forwarded");
    assert_eq!((header.client, payload), (newcomer.addr(), request));
    prove_flow(&relay, &transceiver, &newcomer);
    // A second wave as large as the table: the first wave's seven go, then the second
    // wave's first; never the proven flow.
    let _second_wave = squat(1);
    relay.wait_for("the second wave in, shedding unproven flows only", |r| {
        r.total("ufrag_relay_flows_shed_total", "") == TABLE as f64 + 1.0
    });
    assert_eq!(relay.drops("table_full"), 0.0);
    transceiver.count_arrivals();
    prove_flow(&relay, &transceiver, &newcomer);
}
