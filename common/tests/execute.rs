//! The executor: what it hands the egress for each verdict, and the counting contract —
//! every datagram received ends in exactly one counter (forwarded in, forwarded out, or
//! one drop reason), in packets and bytes alike — under random traffic and random
//! egress failures.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use support::{
    CLIENT, CLUSTER, Fate, ParkingEgress, PlannedEgress, RTP, TRANSCEIVER, TestRelay, VIP, a,
    binding_request, frame, frame_marked, policy,
};
use ufrag_common::execute::{Executor, PARK_WAIT, RouteCacheRequest, Source};
use ufrag_common::flow::{FlowKey, FlowTable};
use ufrag_common::forward::{ForwardPolicy, Route};
use ufrag_common::frame::FrameHeader;
use ufrag_common::metrics::SharedCounters;
use ufrag_common::reasons::{CacheError, Direction, DropReason, Port};

fn relay(policy: ForwardPolicy, capacity: usize, egress: PlannedEgress, t0: Instant) -> TestRelay {
    let table = FlowTable::new(capacity, Duration::from_secs(30), t0).unwrap();
    TestRelay::new(support::started_forwarder(policy, table, t0), egress)
}

#[test]
fn a_client_datagram_goes_out_framed_and_a_return_frame_goes_out_bare() {
    let t0 = Instant::now();
    let mut r = relay(policy(), 8, PlannedEgress::logging(), t0);
    let stun = binding_request(TRANSCEIVER, CLUSTER, 1);
    r.from_client(&stun, a(CLIENT), a(VIP), t0);
    r.from_internal(&frame(CLIENT, VIP, &RTP), a(TRANSCEIVER), t0);
    let sent = &r.egress.sent;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].to, a(TRANSCEIVER));
    assert_eq!(sent[0].from, Source::Internal);
    // The relay never marks what it sends to a transceiver.
    assert_eq!(sent[0].bytes, frame_marked(CLIENT, VIP, &stun, false));
    assert_eq!(sent[1].to, a(CLIENT));
    assert_eq!(sent[1].from, Source::Vip(a(VIP)));
    assert_eq!(sent[1].bytes, RTP);
    let c = r.counters().clone();
    assert_eq!(
        c.received_bytes,
        [stun.len() as u64, frame(CLIENT, VIP, &RTP).len() as u64]
    );
    assert_eq!(c.forwarded_bytes[Direction::In as usize], stun.len() as u64);
    assert_eq!(
        c.forwarded_bytes[Direction::Out as usize],
        c.received_bytes[Port::Internal as usize]
    );
}

#[test]
fn a_send_counts_as_forwarded_only_once_the_egress_accepted_it() {
    let t0 = Instant::now();
    let plan = vec![Fate::QueueThenFail, Fate::QueueThenSend, Fate::FailNow];
    let mut r = relay(policy(), 8, PlannedEgress::planned(plan), t0);
    let stun = binding_request(TRANSCEIVER, CLUSTER, 1);
    r.from_client(&stun, a(CLIENT), a(VIP), t0);
    r.from_client(&RTP, a(CLIENT), a(VIP), t0);
    assert_eq!(
        r.counters().forwarded_datagrams,
        [0, 0],
        "queued is not yet forwarded"
    );
    assert_eq!(
        r.counters().in_flight(),
        Some((2, (stun.len() + RTP.len()) as u64))
    );
    r.flush();
    assert_eq!(r.counters().forwarded_datagrams, [1, 0]);
    assert_eq!(r.counters().forwarded_bytes, [RTP.len() as u64, 0]);
    assert_eq!(r.counters().drops_of(DropReason::SendFailed), 1);
    assert_eq!(
        r.counters().dropped_bytes[DropReason::SendFailed.index()],
        stun.len() as u64
    );
    r.from_client(&RTP, a(CLIENT), a(VIP), t0);
    assert_eq!(r.counters().drops_of(DropReason::SendFailed), 2);
    assert_eq!(r.counters().in_flight(), Some((0, 0)));
}

#[test]
fn route_cache_requests_go_to_the_egress_and_refusals_are_cache_errors() {
    let t0 = Instant::now();
    let cached = ForwardPolicy {
        route_cache: true,
        ..policy()
    };
    let mut r = relay(cached, 8, PlannedEgress::logging(), t0);
    let key = FlowKey::new(a(CLIENT), a(VIP));
    r.from_client(&RTP, a(CLIENT), a(VIP), t0);
    r.from_client(
        &binding_request(TRANSCEIVER, CLUSTER, 1),
        a(CLIENT),
        a(VIP),
        t0,
    );
    assert_eq!(
        r.egress.cache_requests,
        [RouteCacheRequest::Lookup { key }],
        "a flow that carried only STUN is not cached"
    );
    r.from_client(&RTP, a(CLIENT), a(VIP), t0);
    assert_eq!(
        r.egress.cache_requests,
        [RouteCacheRequest::Lookup { key }],
        "media from the client alone (which a spoofer can send blind) is not cached"
    );
    r.from_internal(&frame(CLIENT, VIP, &RTP), a(TRANSCEIVER), t0);
    let route = Route {
        next_hop: a(TRANSCEIVER),
        return_via: None,
    };
    assert_eq!(
        r.egress.cache_requests,
        [
            RouteCacheRequest::Lookup { key },
            RouteCacheRequest::Record { key, route }
        ],
        "media both ways: cached when the transceiver's media proves it"
    );
    r.from_client(&RTP, a(CLIENT), a(VIP), t0);
    assert_eq!(r.egress.cache_requests.len(), 2, "recorded once");
    assert_eq!(r.egress.released, 1, "the looked-up datagram is released");
    r.egress.cache_closed = true;
    r.from_client(&RTP, a("198.51.100.8:1"), a(VIP), t0);
    assert_eq!(r.counters().cache_errors_total(), 1);
    assert_eq!(
        r.counters().cache_errors[CacheError::RequestQueueFull.index()],
        1,
        "a request the cache could not take"
    );
    assert_eq!(r.counters().drops_of(DropReason::NoFlowCacheLookup), 2);
}

/// One flow parks at most `PARKED_PER_FLOW` datagrams: a burst (or a spoofed flow kept
/// busy) cannot take the slots a restart needs for every other flow.
#[test]
fn one_flow_parks_a_few_datagrams_and_leaves_the_rest_of_the_slots() {
    use ufrag_common::execute::PARKED_PER_FLOW;
    let t0 = Instant::now();
    let cached = ForwardPolicy {
        route_cache: true,
        ..policy()
    };
    let table = FlowTable::new(8, Duration::from_secs(30), t0).unwrap();
    let mut executor = Executor::new(support::started_forwarder(cached, table, t0), t0);
    let mut egress = ParkingEgress(PlannedEgress::logging());
    for _ in 0..10 {
        let d = executor.decide_client(&RTP, a(CLIENT), a(VIP), t0);
        executor.carry_out(d, &RTP[..], &mut egress);
    }
    assert_eq!(egress.0.cache_requests.len(), 1, "one question");
    assert_eq!(
        executor.counters().in_flight(),
        Some((PARKED_PER_FLOW as u64, (PARKED_PER_FLOW * RTP.len()) as u64))
    );
    assert_eq!(
        executor.counters().drops_of(DropReason::NoFlowCacheLookup),
        10 - PARKED_PER_FLOW as u64
    );
    // Another flow still parks.
    let d = executor.decide_client(&RTP, a("198.51.100.8:1"), a(VIP), t0);
    executor.carry_out(d, &RTP[..], &mut egress);
    assert_eq!(egress.0.cache_requests.len(), 2);
    assert_eq!(
        executor.counters().in_flight().map(|(n, _)| n),
        Some(PARKED_PER_FLOW as u64 + 1)
    );
}

/// A backend that cannot keep a copy of a datagram (AF_XDP rewrites frames in place)
/// drops each datagram of a flow without a route, and still asks the cache once per flow
/// while a question is out: a burst of media from one source costs Redis one question.
#[test]
fn without_parking_a_flows_burst_asks_the_cache_once() {
    let t0 = Instant::now();
    let cached = ForwardPolicy {
        route_cache: true,
        ..policy()
    };
    let table = FlowTable::new(8, Duration::from_secs(30), t0).unwrap();
    let mut executor = Executor::new(support::started_forwarder(cached, table, t0), t0);
    let mut egress = PlannedEgress::logging();
    let key = FlowKey::new(a(CLIENT), a(VIP));
    for ms in 0..50 {
        let now = t0 + Duration::from_millis(ms);
        let d = executor.decide_client(&RTP, a(CLIENT), a(VIP), now);
        executor.carry_out(d, &RTP[..], &mut egress);
    }
    assert_eq!(egress.cache_requests, [RouteCacheRequest::Lookup { key }]);
    assert_eq!(
        executor.counters().drops_of(DropReason::NoFlowCacheLookup),
        50
    );
}

/// With a backend that can keep a copy (sockets), the datagram that triggers a lookup
/// waits for the answer instead of being dropped: a route sends it on, a miss or the
/// deadline drops it, and until then it is in flight.
#[test]
fn a_datagram_waiting_for_a_route_lookup_is_sent_when_the_route_comes() {
    let t0 = Instant::now();
    let cached = ForwardPolicy {
        route_cache: true,
        ..policy()
    };
    let table = FlowTable::new(8, Duration::from_secs(30), t0).unwrap();
    let mut executor = Executor::new(support::started_forwarder(cached, table, t0), t0);
    let mut egress = ParkingEgress(PlannedEgress::logging());
    let client = a(CLIENT);
    let key = FlowKey::new(client, a(VIP));
    let route = Route {
        next_hop: a(TRANSCEIVER),
        return_via: None,
    };
    let arrive = |executor: &mut Executor, egress: &mut ParkingEgress, from, now| {
        let d = executor.decide_client(&RTP, from, a(VIP), now);
        executor.carry_out(d, &RTP[..], egress);
    };

    arrive(&mut executor, &mut egress, client, t0);
    arrive(&mut executor, &mut egress, client, t0);
    assert_eq!(
        egress.0.cache_requests,
        [RouteCacheRequest::Lookup { key }],
        "one question per flow while one is on its way"
    );
    assert_eq!(
        executor.counters().drops_of(DropReason::NoFlowCacheLookup),
        0
    );
    assert_eq!(
        executor.counters().in_flight(),
        Some((2, 2 * RTP.len() as u64))
    );
    executor.cache_answer(&key, Some(route), t0, &mut egress);
    executor.flush(&mut egress);
    assert_eq!(egress.0.sent.len(), 2, "both parked datagrams went on");
    assert_eq!(egress.0.sent[0].to, a(TRANSCEIVER));
    assert!(egress.0.sent[0].bytes.ends_with(&RTP));
    assert_eq!(
        executor.counters().forwarded_datagrams[Direction::In as usize],
        2
    );
    assert_eq!(executor.counters().in_flight(), Some((0, 0)));

    // A miss drops what waited; so does the deadline.
    let other = a("198.51.100.8:1");
    arrive(&mut executor, &mut egress, other, t0);
    executor.cache_answer(&FlowKey::new(other, a(VIP)), None, t0, &mut egress);
    assert_eq!(
        executor.counters().drops_of(DropReason::NoFlowCacheLookup),
        1
    );
    let third = a("198.51.100.9:1");
    arrive(&mut executor, &mut egress, third, t0);
    let shared = SharedCounters::default();
    executor.tick(t0 + PARK_WAIT / 2, 8, &shared);
    assert_eq!(executor.counters().in_flight(), Some((1, RTP.len() as u64)));
    executor.tick(t0 + PARK_WAIT, 8, &shared);
    assert_eq!(
        executor.counters().drops_of(DropReason::NoFlowCacheLookup),
        2
    );
    assert_eq!(executor.counters().in_flight(), Some((0, 0)));
    assert_eq!(egress.0.sent.len(), 2, "nothing else was sent");
}

/// One step of a random run.
#[derive(Clone, Debug)]
enum Step {
    /// A Binding Request from client `c` (valid, or with a byte flipped).
    Stun { c: u8, valid: bool },
    /// RTP from client `c`.
    Rtp { c: u8, len: u8 },
    /// Garbage from client `c`.
    Junk { c: u8, first: u8 },
    /// A return frame for client `c` from the transceiver or a stranger.
    Return { c: u8, stranger: bool },
    /// A frame from a global relay carrying RTP for client `c`.
    Global { c: u8 },
    /// The route cache answers for client `c`.
    Restore { c: u8 },
    /// The egress sends what it queued.
    Flush,
    /// Time passes (flows may expire).
    Wait { s: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..16u8, any::<bool>()).prop_map(|(c, valid)| Step::Stun { c, valid }),
        (0..16u8, 1..200u8).prop_map(|(c, len)| Step::Rtp { c, len }),
        (0..16u8, any::<u8>()).prop_map(|(c, first)| Step::Junk { c, first }),
        (0..16u8, any::<bool>()).prop_map(|(c, stranger)| Step::Return { c, stranger }),
        (0..16u8).prop_map(|c| Step::Global { c }),
        (0..16u8).prop_map(|c| Step::Restore { c }),
        Just(Step::Flush),
        (0..40u8).prop_map(|s| Step::Wait { s }),
    ]
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        Just(Fate::Send),
        Just(Fate::FailNow),
        Just(Fate::QueueThenSend),
        Just(Fate::QueueThenFail),
    ]
}

fn client(c: u8) -> SocketAddr {
    SocketAddr::from(([198, 51, 100, 7], 1000 + u16::from(c)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_datagram_received_ends_in_exactly_one_counter(
        steps in proptest::collection::vec(step(), 1..120),
        plan in proptest::collection::vec(fate(), 1..8),
        capacity in 1..8usize,
        route_cache in any::<bool>(),
        cache_closed in any::<bool>(),
    ) {
        let t0 = Instant::now();
        let policy = ForwardPolicy {
            route_cache,
            global_relay_networks: vec!["192.0.2.0/24".parse().unwrap()],
            ..policy()
        };
        let mut egress = PlannedEgress::planned(plan);
        egress.cache_closed = cache_closed;
        let mut r = relay(policy, capacity, egress, t0);
        let mut now = t0;
        let mut received = [0u64; 2];
        for step in steps {
            match step {
                Step::Stun { c, valid } => {
                    let mut d = binding_request(TRANSCEIVER, CLUSTER, c);
                    if !valid {
                        let last = d.len() - 1;
                        d[last] ^= 1;
                    }
                    received[0] += d.len() as u64;
                    r.from_client(&d, client(c), a(VIP), now);
                }
                Step::Rtp { c, len } => {
                    let mut d = vec![0x80u8; usize::from(len)];
                    d[0] = 0x80;
                    received[0] += d.len() as u64;
                    r.from_client(&d, client(c), a(VIP), now);
                }
                Step::Junk { c, first } => {
                    let d = [first, 1, 2, 3];
                    received[0] += d.len() as u64;
                    r.from_client(&d, client(c), a(VIP), now);
                }
                Step::Return { c, stranger } => {
                    let from = if stranger { a("10.9.9.9:1") } else { a(TRANSCEIVER) };
                    let f = frame(&client(c).to_string(), VIP, &RTP);
                    received[1] += f.len() as u64;
                    r.from_internal(&f, from, now);
                }
                Step::Global { c } => {
                    let h = FrameHeader::new(client(c), a(VIP));
                    let mut f = vec![0u8; h.encoded_len()];
                    h.emit(&mut f).unwrap();
                    f.extend_from_slice(&RTP);
                    received[1] += f.len() as u64;
                    r.from_internal(&f, a("192.0.2.1:41000"), now);
                }
                Step::Restore { c } => {
                    let route = Route { next_hop: a(TRANSCEIVER), return_via: None };
                    r.restore(&FlowKey::new(client(c), a(VIP)), route, now);
                }
                Step::Flush => r.flush(),
                Step::Wait { s } => {
                    now += Duration::from_secs(u64::from(s));
                    r.expire(now, 64);
                }
            }
            // Mid-run, exactly what the egress still holds is in flight.
            let queued = r.egress.queued() as u64;
            let c = r.counters();
            prop_assert_eq!(c.in_flight().map(|(p, _)| p), Some(queued));
            prop_assert_eq!(c.received_bytes, received);
        }
        r.flush();
        let c = r.counters().clone();
        prop_assert_eq!(c.in_flight(), Some((0, 0)), "{:?}", c);
        let received_packets: u64 = c.received_datagrams.iter().sum();
        let ended: u64 = c.forwarded_datagrams.iter().sum::<u64>() + c.dropped_datagrams.iter().sum::<u64>();
        prop_assert_eq!(received_packets, ended);
    }
}
