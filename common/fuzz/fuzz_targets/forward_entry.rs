//! Fuzz target: the relay's per-datagram entry points ([`Forwarder::from_client`] and
//! [`Forwarder::from_internal`]) on any sequence of datagrams from a few clients, the
//! transceiver and a stranger, with authentic Binding Requests mixed in so that flows
//! exist: two fixed ones, and ones signed from fuzz bytes (the hint's random bits and
//! minted time, the transaction id, the client ufrag), so that the code after the MAC
//! checks (hint age, replay filter, session cap, rates, shedding) is reached. Never panics, and every verdict keeps the relay's promises: nothing but an
//! authentic STUN request is forwarded without a flow, a return needs the flow and comes
//! from its next hop, and offsets stay inside the datagram.
#![no_main]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ufrag_common::demux::DatagramKind;
use ufrag_common::flow::{FlowKey, FlowTable};
use ufrag_common::forward::{ForwardPolicy, Forwarder, Verdict};
use ufrag_common::hint::{HintKey, HintKeys, RoutingHint};
use ufrag_common::replay::ReplayFilter;
use ufrag_common::stun;

const VIP: &str = "203.0.113.10:3478";
const TRANSCEIVER: &str = "10.0.0.2:40000";

fn binding_request(keys: &HintKeys, session: u8) -> Vec<u8> {
    signed_request(keys, [session; 5], 0, [session; 12], b"cli1")
}

/// An authentic Binding Request for the session named by `random`, its hint minted
/// `age_s` seconds ago (a hint older than the relay's maximum age makes no flow), under
/// `transaction_id`, from the client ufrag `client`.
fn signed_request(
    keys: &HintKeys,
    random: [u8; 5],
    age_s: u32,
    transaction_id: [u8; 12],
    client: &[u8],
) -> Vec<u8> {
    let now = ufrag_common::hint::unix_seconds(std::time::SystemTime::now());
    let ufrag = keys.encode(
        &RoutingHint {
            cluster: 0,
            transceiver: TRANSCEIVER.parse().unwrap(),
        },
        now.saturating_sub(age_s),
        random,
    );
    let password = keys.ice_password(1, ufrag.as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let n = stun::write_binding_request(
        &mut buf,
        &transaction_id,
        ufrag.as_bytes(),
        client,
        password.as_bytes(),
    )
    .unwrap();
    buf[..n].to_vec()
}

/// A request signed from fuzz bytes: 5 of the hint's random bits, 1 of age (in 5 s
/// steps, past the 10-minute maximum at the top), 12 of transaction id, the rest the
/// client ufrag. `None` when there are too few bytes.
fn request_from_fuzz(keys: &HintKeys, bytes: &[u8]) -> Option<Vec<u8>> {
    let (random, rest) = bytes.split_first_chunk::<5>()?;
    let (age, rest) = rest.split_first()?;
    let (transaction_id, client) = rest.split_first_chunk::<12>()?;
    let client = &client[..client.len().min(64)];
    Some(signed_request(
        keys,
        *random,
        u32::from(*age) * 5,
        *transaction_id,
        client,
    ))
}

fuzz_target!(|data: &[u8]| {
    let keys = HintKeys::new(HintKey::new(1, &[7; 32]).unwrap(), None).unwrap();
    let requests = [binding_request(&keys, 1), binding_request(&keys, 2)];
    let signing_keys = keys.clone();
    let vip: SocketAddr = VIP.parse().unwrap();
    let transceiver: SocketAddr = TRANSCEIVER.parse().unwrap();
    let policy = ForwardPolicy {
        vips: vec![vip],
        allowed_transceiver_networks: vec!["10.0.0.0/8".parse().unwrap()],
        global_relay_networks: vec![],
        cluster_id: 0,
        clusters: Default::default(),
        hint_keys: keys,
        route_cache: data.first().is_some_and(|b| b & 1 == 1),
        admission: Default::default(),
        // A small filter: one sized for the default rates is 32 MiB to zero per run.
        shared_replays: Some(std::sync::Arc::new(ReplayFilter::new(
            1,
            100,
            Duration::from_secs(60),
            Instant::now(),
        ))),
    };
    let t0 = Instant::now();
    let table = FlowTable::new(4, Duration::from_millis(200), t0).unwrap();
    let now_unix_s = ufrag_common::hint::unix_seconds(std::time::SystemTime::now());
    let mut fwd = Forwarder::new(policy, table, t0, now_unix_s);
    let mut now = t0;
    let mut rest = data;
    while let [op, who, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (payload, next) = tail.split_at(len);
        rest = next;
        let client = SocketAddr::from(([198, 51, 100, who % 4], 5000));
        let key = FlowKey::new(client, vip);
        let had_flow = fwd.table().peek(&key).is_some();
        let crafted;
        match op % 6 {
            0 | 1 | 5 => {
                let datagram = match op % 6 {
                    0 => &requests[usize::from(who & 1)][..],
                    5 => {
                        crafted = request_from_fuzz(&signing_keys, payload);
                        crafted.as_deref().unwrap_or(payload)
                    }
                    _ => payload,
                };
                match fwd.from_client(datagram, client, vip, now) {
                    Verdict::Forward { to, payload_at, .. } => {
                        assert_eq!(payload_at, 0);
                        assert_eq!(to, transceiver);
                        assert!(
                            had_flow || DatagramKind::classify(datagram) == DatagramKind::Stun,
                            "non-STUN forwarded without a flow"
                        );
                    }
                    Verdict::Return { .. } | Verdict::Relay { .. } => {
                        panic!("a client datagram is never returned or relayed")
                    }
                    Verdict::LookupRoute { key: asked, .. } => {
                        assert!(!had_flow);
                        assert_eq!(asked, key);
                    }
                    Verdict::Drop(_) => {}
                }
            }
            2 | 3 => {
                let source = if op % 6 == 2 {
                    transceiver
                } else {
                    SocketAddr::from(([192, 0, 2, 1], 9))
                };
                match fwd.from_internal(payload, source, now) {
                    Verdict::Return {
                        client, payload_at, ..
                    } => {
                        assert!(payload_at <= payload.len());
                        assert_eq!(source, transceiver, "a return from a stranger");
                        let flow = fwd.table().peek(&FlowKey::new(client, vip));
                        assert!(flow.is_some(), "a return without a flow");
                    }
                    Verdict::Forward { .. } | Verdict::Relay { .. } => {
                        panic!("no global relays are configured")
                    }
                    Verdict::LookupRoute { .. } => panic!("frames are never looked up"),
                    Verdict::Drop(_) => {}
                }
            }
            _ => {
                now += Duration::from_millis(u64::from(*who));
                fwd.expire(now, 8);
            }
        }
    }
});
