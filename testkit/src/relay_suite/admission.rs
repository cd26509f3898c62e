//! What one session and one source may cost a running relay: a session's valid Binding
//! Request replayed from many source addresses creates one flow (every copy counted as
//! `replayed_request`, none forwarded, so nothing is reflected), newly signed requests
//! for one session stop at its flow cap (`session_flow_limit`), and other sessions are
//! unaffected.

use super::Backend;
use super::harness::*;

/// Sources the one request is replayed from (each a new address or port, as spoofing
/// would give).
const REPLAYS: usize = 10_000;
/// Replays sent before the relay's counters are checked.
const REPLAY_ROUND: usize = 100;
/// Newly signed requests for the same session, each from its own source.
const FRESH_REQUESTS: usize = 20;

pub fn one_sessions_request_replayed_from_many_sources_creates_one_flow(b: &Backend) {
    let relay = RelayProcess::start(&b.setup());
    let net = relay.net().clone();
    let transceiver = net.transceiver();
    let request = binding_request_for(transceiver.addr(), 0, 1);
    // The original sender stays open: a replay source must not reuse its port.
    let original = net.client();
    original.send(relay.vip(), &request);
    assert!(
        transceiver.recv_frame().is_some(),
        "the original creates a flow"
    );

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
