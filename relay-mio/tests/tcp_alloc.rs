//! ICE-TCP through a real worker, in process, on real loopback connections, under a
//! counting allocator: once its connections are bound (accepting one allocates its
//! receive buffer, binding it its send buffer), the worker thread allocates nothing per
//! message in either direction (read, unframe, decide, frame, send; return frame, write
//! to the connection; counters and ticks).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ufrag_common::config::TcpPolicy;
use ufrag_common::frame::{FrameHeader, Transport};
use ufrag_common::hint::RoutingHint;
use ufrag_common::metrics::RelayMetrics;
use ufrag_common::stun;
use ufrag_relay_mio::worker::{Worker, WorkerSpec};
use ufrag_testkit::alloc::{self, CountingAllocator};

mod support;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = (message.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(message);
    out
}

#[test]
fn bound_tcp_connections_cost_the_worker_no_allocation_per_message() {
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(127, 61, (pid % 250) as u8 + 1, (pid / 250 % 250) as u8 + 1);
    let vip = SocketAddr::from((ip, 3478));
    let tcp_vip = SocketAddr::from((ip, 4443));
    let internal = SocketAddr::from((ip, 40_000));
    let keys = support::keys();
    let policy = support::policy(vip, &["127.0.0.0/8"]);
    let metrics = RelayMetrics::serving("mio", 1, true);
    let tcp = TcpPolicy {
        vips: vec![tcp_vip],
        ..TcpPolicy::default()
    };
    let spec = WorkerSpec {
        tcp,
        tcp_metrics: metrics.tcp_worker(0).cloned(),
        ..support::spec(internal, policy)
    };
    let (worker, _waker) = Worker::bind(spec, metrics.worker(0)).unwrap();
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
    let mut clients: Vec<TcpStream> = (0..8)
        .map(|_| {
            let c = TcpStream::connect(tcp_vip).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            c
        })
        .collect();
    let mut buf = [0u8; 2048];
    // Bind each connection with its own session's Binding Request.
    for (i, c) in clients.iter_mut().enumerate() {
        let ufrag = keys.encode(
            &RoutingHint {
                cluster: 0,
                transceiver: transceiver.local_addr().unwrap(),
            },
            ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
            [i as u8; 5],
        );
        let pwd = keys.ice_password(1, ufrag.as_bytes()).unwrap();
        let mut stun_buf = [0u8; 512];
        let n = stun::write_binding_request(
            &mut stun_buf,
            &[i as u8; 12],
            ufrag.as_bytes(),
            b"cli1",
            pwd.as_bytes(),
        )
        .unwrap();
        c.write_all(&framed(&stun_buf[..n])).unwrap();
        transceiver.recv_from(&mut buf).unwrap();
    }

    let rtp = framed(&[0x80u8; 172]);
    let mut round = |clients: &mut [TcpStream], per_client: usize| -> usize {
        for c in clients.iter_mut() {
            for _ in 0..per_client {
                c.write_all(&rtp).unwrap();
            }
        }
        let mut echoed = 0;
        for _ in 0..clients.len() * per_client {
            let (len, from) = transceiver.recv_from(&mut buf).unwrap();
            let (h, payload) = FrameHeader::parse(&buf[..len]).unwrap();
            assert_eq!(h.transport, Transport::Tcp);
            let mut reply = vec![0u8; h.encoded_len()];
            h.emit(&mut reply).unwrap();
            reply.extend_from_slice(payload);
            transceiver.send_to(&reply, from).unwrap();
            echoed += 1;
        }
        let mut message = vec![0u8; rtp.len()];
        for c in clients.iter_mut() {
            for _ in 0..per_client {
                c.read_exact(&mut message).unwrap();
                assert_eq!(message, rtp, "each reply arrives whole, framed");
            }
        }
        echoed
    };

    round(&mut clients, 4); // warm-up
    alloc::arm();
    let mut echoed = 0;
    for _ in 0..20 {
        echoed += round(&mut clients, 8);
    }
    // Ticks run while armed (every 50 ms): the connection scan and publication too.
    std::thread::sleep(Duration::from_millis(200));
    echoed += round(&mut clients, 8);
    let allocations = alloc::disarm();

    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
    assert_eq!(echoed, 21 * 8 * 8);
    assert_eq!(
        allocations, 0,
        "the worker thread allocated while carrying TCP messages"
    );
}
