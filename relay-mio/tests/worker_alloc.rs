//! A real worker, in process, on real loopback sockets, forwarding in both directions
//! under a counting allocator: after warm-up, the worker thread allocates nothing per
//! packet (receive, decide, frame, send, counters, expiry ticks), sleeping in epoll or
//! busy-polling, with the internal leg in bundles both ways, and sending runs by GSO.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ufrag_common::bundle::{Bundle, BundleWriter, is_bundle};
use ufrag_common::config::{BundlePolicy, PollMode};
use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::RoutingHint;
use ufrag_common::metrics::{RelayMetrics, SharedCounters};
use ufrag_common::stun;
use ufrag_relay_mio::worker::{Worker, WorkerSpec};
use ufrag_testkit::alloc::{self, CountingAllocator};

mod support;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// One test for both poll modes, one after the other: the counting allocator is armed
/// for the whole process.
#[test]
fn the_worker_does_not_allocate_per_packet_sleeping_or_busy_polling_or_bundling_or_by_gso() {
    forward_under_the_counting_allocator(PollMode::Wakeup, 0, Internal::Single);
    forward_under_the_counting_allocator(PollMode::Busy, 1, Internal::Single);
    forward_under_the_counting_allocator(PollMode::Wakeup, 2, Internal::Bundles);
    forward_under_the_counting_allocator(PollMode::Wakeup, 3, Internal::Gso);
}

/// How the worker sends to the transceiver.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Internal {
    /// One datagram per frame.
    Single,
    /// In bundles (`--bundle-to`).
    Bundles,
    /// Runs of equal-size frames as one GSO send (`--internal-gso`).
    Gso,
}

fn forward_under_the_counting_allocator(
    poll_mode: PollMode,
    port_offset: u16,
    internal_leg: Internal,
) {
    let bundles = internal_leg == Internal::Bundles;
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(127, 60, (pid % 250) as u8 + 1, (pid / 250 % 250) as u8 + 1);
    let vip = SocketAddr::from((ip, 3478 + port_offset));
    let internal = SocketAddr::from((ip, 40_000 + port_offset));
    let keys = support::keys();
    let policy = support::policy(vip, &["127.0.0.0/8"]);
    let metrics = RelayMetrics::new("mio", 1);
    let shared: Arc<SharedCounters> = metrics.worker(0);
    let spec = WorkerSpec {
        idle_timeout: Duration::from_millis(300),
        poll_mode,
        bundles: BundlePolicy {
            to: if bundles {
                vec!["127.0.0.0/8".parse().unwrap()]
            } else {
                vec![]
            },
            mtu: 1500,
            gso: internal_leg == Internal::Gso,
        },
        ..support::spec(internal, policy)
    };
    let (worker, _waker) = Worker::bind(spec, shared).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        alloc::count_this_thread();
        worker.run(&stopping).unwrap();
    });

    let transceiver = UdpSocket::bind((ip, 0)).unwrap();
    transceiver
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let clients: Vec<UdpSocket> = (0..16).map(|_| UdpSocket::bind((ip, 0)).unwrap()).collect();
    // One session and transaction per client, as real clients have (one request sent
    // from 16 addresses would be refused as a replay); after the flows expire, each
    // client's next check is a new transaction (`generation`).
    let requests_of = |generation: u8| -> Vec<Vec<u8>> {
        (0..clients.len() as u8)
            .map(|i| {
                let ufrag = keys.encode(
                    &RoutingHint {
                        cluster: 0,
                        transceiver: transceiver.local_addr().unwrap(),
                    },
                    ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
                    [i; 5],
                );
                let pwd = keys.ice_password(1, ufrag.as_bytes()).unwrap();
                let mut stun_buf = [0u8; 512];
                let n = stun::write_binding_request(
                    &mut stun_buf,
                    &[i, generation, i, i, i, i, i, i, i, i, i, i],
                    ufrag.as_bytes(),
                    b"cli1",
                    pwd.as_bytes(),
                )
                .unwrap();
                stun_buf[..n].to_vec()
            })
            .collect()
    };
    let (requests, next_checks) = (requests_of(0), requests_of(1));
    let rtp = [0x80u8; 172];
    let mut buf = [0u8; 2048];

    let mut bundles_seen = 0;
    let mut round = |requests: &[Vec<u8>], rtp_per_client: usize| -> usize {
        let mut got = 0;
        for (c, request) in clients.iter().zip(requests) {
            c.send_to(request, vip).unwrap();
            for _ in 0..rtp_per_client {
                c.send_to(&rtp, vip).unwrap();
            }
        }
        let mut bundled = 0;
        while got < clients.len() * (1 + rtp_per_client) {
            let (len, from) = transceiver.recv_from(&mut buf).unwrap();
            // Answer each frame, in kind: a bundle with a bundle, a frame with a frame.
            // The return path runs too.
            let frames: Vec<&[u8]> = if is_bundle(&buf[..len]) {
                bundled += 1;
                Bundle::parse(&buf[..len]).unwrap().collect()
            } else {
                vec![&buf[..len]]
            };
            let mut reply = vec![0u8; 1472];
            let mut writer = BundleWriter::new(&mut reply);
            let mut single = Vec::new();
            for frame in &frames {
                let (h, payload) = FrameHeader::parse(frame).unwrap();
                writer.push(&h, payload).unwrap();
                single = frame.to_vec();
                got += 1;
            }
            if frames.len() > 1 {
                transceiver.send_to(writer.finish().unwrap(), from).unwrap();
            } else {
                transceiver.send_to(&single, from).unwrap();
            }
        }
        assert!(
            bundles || bundled == 0,
            "bundles reached a transceiver not configured for them"
        );
        bundles_seen += bundled;
        for c in &clients {
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            for _ in 0..1 + rtp_per_client {
                c.recv_from(&mut buf).unwrap();
            }
        }
        got
    };

    round(&requests, 4); // warm-up: lazily initialised thread-locals, first flows
    alloc::arm();
    let mut forwarded = 0;
    for _ in 0..20 {
        forwarded += round(&requests, 8);
    }
    // Let flows expire and ticks publish while armed, then create them again.
    std::thread::sleep(Duration::from_millis(500));
    forwarded += round(&next_checks, 8);
    let allocations = alloc::disarm();
    if bundles {
        assert!(bundles_seen > 0, "no batch was bundled");
    }

    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
    assert_eq!(forwarded, 21 * 16 * 9);
    let totals = metrics.totals();
    assert!(
        totals.flows_expired >= 16,
        "expiry ran while counting: {totals:?}"
    );
    assert_eq!(
        allocations, 0,
        "the worker thread ({poll_mode:?}) allocated while forwarding"
    );
}
