//! Zero allocation on the per-packet path, asserted with a counting global allocator:
//! classify + STUN view + ufrag split + hint verify + password derivation + integrity
//! check + flow lookup (hit and miss) + flow insert and expiry + frame emit and parse +
//! bundle write and read, and the bundler that gathers a batch's frames by peer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod support;

use ipnet::IpNet;
use ufrag_common::bundle::{Bundle, BundleWriter, Bundler};
use ufrag_common::demux::DatagramKind;
use ufrag_common::flow::{FlowKey, FlowTable};
use ufrag_common::frame::{FrameHeader, MAX_HEADER_LEN};
use ufrag_common::hint::{HintKey, HintKeys, RoutingHint};
use ufrag_common::metrics::WorkerCounters;
use ufrag_common::reasons::Direction;
use ufrag_common::stun::{self, StunView};

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator; the counter is a
// const-initialised thread-local Cell, which never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn the_hot_path_does_not_allocate() {
    // Setup may allocate: keys, table, allowed networks, packets.
    let keys = HintKeys::new(HintKey::new(1, &[7; 32]).unwrap(), None).unwrap();
    let allowed: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let hint = RoutingHint {
        cluster: 1,
        transceiver: "10.0.0.2:40000".parse().unwrap(),
    };
    let ufrag = keys.encode(
        &hint,
        ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
        [1; 5],
    );
    let password = keys.ice_password(1, ufrag.as_bytes()).unwrap();
    let mut request = [0u8; 256];
    let request_len = stun::write_binding_request(
        &mut request,
        &[9; 12],
        ufrag.as_bytes(),
        b"cli0",
        password.as_bytes(),
    )
    .unwrap();
    let request = &request[..request_len];
    let t0 = Instant::now();
    let mut table = FlowTable::<SocketAddr>::new(1024, Duration::from_secs(1), t0).unwrap();
    let vip: SocketAddr = "203.0.113.10:3478".parse().unwrap();
    let mut counters = WorkerCounters::default();
    let mut out = [0u8; 1500];
    let mut bundle_buf = [0u8; 1472];
    let rtp = [0x80u8; 172];
    let mut bundler: Bundler<usize> = Bundler::new(1500, 2048);
    let transceiver_a: SocketAddr = "10.0.0.2:40000".parse().unwrap();
    let transceiver_b: SocketAddr = "10.0.0.3:40000".parse().unwrap();

    let before = allocations();
    let mut forwarded = 0u64;
    for i in 0..10_000u32 {
        let now = t0 + Duration::from_millis(5 * u64::from(i));
        let client = SocketAddr::from(([198, 51, 100, 1], 1024 + (i % 512) as u16));
        let key = FlowKey::new(client, vip);

        // First packet of a flow: STUN → hint → integrity → insert.
        assert_eq!(DatagramKind::classify(request), DatagramKind::Stun);
        let view = StunView::parse(request).unwrap();
        assert!(view.is_binding_request());
        let server = view.ufrags().unwrap().server;
        let verified = keys.verify(server, &allowed).unwrap();
        let derived = keys.ice_password(verified.key_id, server).unwrap();
        view.verify_integrity(derived.as_bytes()).unwrap();
        view.verify_fingerprint().unwrap();
        table.insert(&key, verified.hint.transceiver, now).unwrap();

        // Steady state: classify, hit, frame, count.
        assert_eq!(DatagramKind::classify(&rtp), DatagramKind::RtpRtcp);
        let flow = table.lookup(&key, now).unwrap();
        flow.record_in(rtp.len());
        let header = FrameHeader::new(client, vip);
        let n = header.emit(&mut out[..MAX_HEADER_LEN]).unwrap();
        out[n..n + rtp.len()].copy_from_slice(&rtp);
        let (back, payload) = FrameHeader::parse(&out[..n + rtp.len()]).unwrap();
        assert_eq!(back.client, client);
        counters.forwarded(Direction::In, payload.len());
        forwarded += 1;

        // The same datagram bundled with two others, and the bundle read back.
        let mut writer = BundleWriter::new(&mut bundle_buf);
        for _ in 0..3 {
            writer.push(&header, &rtp).unwrap();
        }
        let bundle = writer.finish().unwrap();
        let mut frames = 0;
        for frame in Bundle::parse(bundle).unwrap() {
            let (back, _) = FrameHeader::parse(frame).unwrap();
            assert_eq!(back.vip, vip);
            frames += 1;
        }
        assert_eq!(frames, 3);

        // The sending side: a bundler gathers two peers' frames and emits both bundles.
        let mut emitted = 0usize;
        let mut emit = |_to: SocketAddr, _head: &[u8], body: &[u8], n: usize| {
            assert!(body.len() <= 1472);
            emitted += n;
        };
        for peer in [transceiver_a, transceiver_b, transceiver_a] {
            bundler.push(peer, &header, &rtp, 1, &mut emit);
        }
        bundler.close_all(&mut emit);
        assert_eq!(emitted, 3);

        // A miss, and expiry of whatever idled out.
        let stranger = FlowKey::new(SocketAddr::from(([192, 0, 2, 1], 9)), vip);
        assert!(table.lookup(&stranger, now).is_none());
        table.expire(now, 16);
    }
    let after = allocations();
    assert_eq!(forwarded, 10_000);
    let c = table.counters();
    assert!(
        c.expired > 1000 && c.created > 1000,
        "expiry and re-creation were exercised: {c:?}"
    );
    assert_eq!(
        after - before,
        0,
        "the per-packet path allocated {} times",
        after - before
    );
}

#[test]
fn the_counter_does_count() {
    // Guards the test above against a counter that cannot fail.
    let before = allocations();
    let v: Vec<u8> = Vec::with_capacity(64);
    assert!(allocations() > before);
    drop(v);
}

#[test]
fn the_forwarder_and_executor_do_not_allocate() {
    use support::{Fate, PlannedEgress, TestRelay};
    use ufrag_common::admission::AdmissionPolicy;
    use ufrag_common::forward::{ForwardPolicy, Verdict};

    let keys = HintKeys::new(HintKey::new(1, &[7; 32]).unwrap(), None).unwrap();
    let vip: SocketAddr = "203.0.113.10:3478".parse().unwrap();
    let transceiver: SocketAddr = "10.0.0.2:40000".parse().unwrap();
    let policy = ForwardPolicy {
        vips: vec![vip],
        allowed_transceiver_networks: vec!["10.0.0.0/8".parse().unwrap()],
        global_relay_networks: vec![],
        cluster_id: 1,
        clusters: Default::default(),
        hint_keys: keys.clone(),
        route_cache: true,
        // The 512 clients share one /24.
        admission: AdmissionPolicy {
            new_flows_per_prefix: 100_000,
            ..AdmissionPolicy::default()
        },
        shared_replays: None,
    };
    let t0 = Instant::now();
    // Another worker takes the returns of this one's flows through the shared set.
    let returns = std::sync::Arc::new(ufrag_common::returns::SharedReturns::new(2048, t0));
    let mut other_worker = TestRelay::new(
        support::started_forwarder(
            policy.clone(),
            FlowTable::new(16, Duration::from_secs(1), t0).unwrap(),
            t0,
        )
        .with_shared_returns(returns.clone()),
        PlannedEgress::planned(vec![Fate::Send]),
    );
    let forwarder = support::started_forwarder(
        policy,
        FlowTable::new(1024, Duration::from_secs(1), t0).unwrap(),
        t0,
    )
    .with_shared_returns(returns);
    // Every path of the egress: sent, refused, queued then sent or refused at the flush.
    let plan = vec![
        Fate::Send,
        Fate::QueueThenSend,
        Fate::FailNow,
        Fate::QueueThenFail,
    ];
    let mut fwd = TestRelay::new(forwarder, PlannedEgress::planned(plan));
    // One session (ufrag) per client port, and a new transaction each time, as real
    // clients have: a request sent again would be refused as a replay.
    let requests: Vec<Vec<u8>> = (0..5_000u32)
        .map(|i| {
            let [hi, lo] = ((i % 512) as u16).to_be_bytes();
            let [t0_, t1, t2, t3] = i.to_be_bytes();
            let ufrag = keys.encode(
                &RoutingHint {
                    cluster: 1,
                    transceiver,
                },
                ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
                [1, 2, 3, hi, lo],
            );
            let password = keys.ice_password(1, ufrag.as_bytes()).unwrap();
            let mut request = [0u8; 256];
            let n = stun::write_binding_request(
                &mut request,
                &[9, 9, 9, 9, 9, 9, 9, 9, t0_, t1, t2, t3],
                ufrag.as_bytes(),
                b"cli0",
                password.as_bytes(),
            )
            .unwrap();
            request[..n].to_vec()
        })
        .collect();
    let rtp = [0x80u8; 172];
    let mut frame = [0u8; MAX_HEADER_LEN + 172];

    let before = allocations();
    for i in 0..5_000u32 {
        let now = t0 + Duration::from_millis(5 * u64::from(i));
        let client = SocketAddr::from(([198, 51, 100, 1], 1024 + (i % 512) as u16));
        let request = &requests[i as usize];
        assert!(matches!(
            fwd.from_client(request, client, vip, now),
            Verdict::Forward { .. }
        ));
        assert!(matches!(
            fwd.from_client(&rtp, client, vip, now),
            Verdict::Forward { .. }
        ));
        // A stranger on a /24 of its own each time: the route-cache lookup rate is per
        // source prefix (200/s from one prefix would spend it).
        let stranger = SocketAddr::from(([100, (i >> 8) as u8, i as u8, 1], 9));
        assert!(matches!(
            fwd.from_client(&rtp, stranger, vip, now),
            Verdict::LookupRoute { .. }
        ));
        let h = FrameHeader::new(client, vip).emit(&mut frame).unwrap();
        frame[h..h + rtp.len()].copy_from_slice(&rtp);
        assert!(matches!(
            fwd.from_internal(&frame[..h + rtp.len()], transceiver, now),
            Verdict::Return { .. }
        ));
        assert!(matches!(
            other_worker.from_internal(&frame[..h + rtp.len()], transceiver, now),
            Verdict::Return { .. }
        ));
        other_worker.flush();
        fwd.flush();
        fwd.expire(now, 8);
    }
    let after = allocations();
    assert_eq!(
        after - before,
        0,
        "the forwarder allocated {} times",
        after - before
    );
    assert!(fwd.counters().flows_expired > 100, "expiry was exercised");
    assert_eq!(other_worker.counters().shared_returns, 5_000);
}

#[test]
fn parking_a_datagram_for_a_route_lookup_does_not_allocate() {
    use support::{CLIENT, ParkingEgress, PlannedEgress, RTP, TRANSCEIVER, VIP, a, policy};
    use ufrag_common::execute::{Executor, PARK_WAIT};
    use ufrag_common::forward::{ForwardPolicy, Route};
    use ufrag_common::metrics::SharedCounters;

    let t0 = Instant::now();
    let cached = ForwardPolicy {
        route_cache: true,
        ..policy()
    };
    let table = FlowTable::new(64, Duration::from_secs(30), t0).unwrap();
    let mut executor = Executor::new(support::started_forwarder(cached, table, t0), t0);
    let mut egress = ParkingEgress(PlannedEgress::planned(vec![]));
    let shared = SharedCounters::default();
    let route = Route {
        next_hop: a(TRANSCEIVER),
        return_via: None,
    };
    let before = allocations();
    for round in 0..200u16 {
        let now = t0 + PARK_WAIT * u32::from(round);
        let client = SocketAddr::new(a(CLIENT).ip(), 1000 + round);
        // Parked, then sent once the route comes (or dropped at the deadline, every other
        // round).
        let d = executor.decide_client(&RTP, client, a(VIP), now);
        executor.carry_out(d, &RTP[..], &mut egress);
        if round % 2 == 0 {
            let key = FlowKey::new(client, a(VIP));
            executor.cache_answer(&key, Some(route), now, &mut egress);
        }
        executor.flush(&mut egress);
        executor.tick(now + PARK_WAIT, 8, &shared);
    }
    assert_eq!(allocations() - before, 0, "parking allocated");
    assert_eq!(executor.counters().in_flight(), Some((0, 0)));
    assert_eq!(
        executor.counters().forwarded_datagrams[Direction::In as usize],
        100
    );
}
