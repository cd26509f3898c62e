//! Bundles on the internal leg, on a real relay-mio worker and real loopback
//! sockets. The clients' datagrams are queued on the VIP before the worker starts, so its
//! first `recvmmsg` reads them in one batch and what it sends is known exactly:
//!
//! - a transceiver in `bundle_to` gets the batch's frames in bundles, none past the
//!   internal MTU, in order; a transceiver outside it gets single frames (an old
//!   transceiver keeps working);
//! - a bundle of replies reaches each client; a bad frame inside a bundle is that frame's
//!   drop alone;
//! - a malformed bundle, and a bundle from outside the transceiver networks, are each one
//!   datagram received and dropped whole;
//! - every datagram ends in one counter: nothing is left in flight.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ufrag_common::bundle::{BUNDLE_HEADER_LEN, Bundle, BundleWriter, is_bundle, max_bundle_len};
use ufrag_common::config::BundlePolicy;
use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::RoutingHint;
use ufrag_common::metrics::RelayMetrics;
use ufrag_common::reasons::{Direction, DropReason, Port};
use ufrag_common::stun;
use ufrag_relay_mio::worker::{Worker, WorkerSpec};

mod support;

const CLIENTS: usize = 8;
const RTP_PER_CLIENT: usize = 3;
const RTP_LEN: usize = 172;
const MTU: u16 = 1000;

/// A loopback address of this process's own (so two runs cannot collide).
fn own_ip(last: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(127, 70 + (pid % 50) as u8, (pid / 50 % 250) as u8 + 1, last)
}

fn frames_of(datagram: &[u8]) -> Vec<(FrameHeader, Vec<u8>)> {
    let parse = |f: &[u8]| {
        let (h, d) = FrameHeader::parse(f).expect("the relay sends good frames");
        (h, d.to_vec())
    };
    if is_bundle(datagram) {
        Bundle::parse(datagram)
            .expect("the relay sends good bundles")
            .map(parse)
            .collect()
    } else {
        vec![parse(datagram)]
    }
}

/// Reads datagrams from `socket` until `frames` frames came (or it times out).
fn receive_frames(socket: &UdpSocket, frames: usize) -> Vec<Vec<u8>> {
    let mut buf = [0u8; 2048];
    let mut datagrams = Vec::new();
    let mut got = 0;
    while got < frames {
        let (len, _) = socket
            .recv_from(&mut buf)
            .expect("the relay forwards every frame");
        got += frames_of(&buf[..len]).len();
        datagrams.push(buf[..len].to_vec());
    }
    datagrams
}

/// Client `c`'s `k`-th media datagram: RTP-shaped, naming both.
fn rtp(c: usize, k: usize) -> [u8; RTP_LEN] {
    let mut d = [0x80u8; RTP_LEN];
    d[1] = c as u8;
    d[2] = k as u8;
    d
}

/// Each client sends a Binding Request signed for a session on `transceiver_of(c)`,
/// then [`RTP_PER_CLIENT`] media datagrams, all to `vip` (queued before the worker runs).
fn open_sessions(
    clients: &[UdpSocket],
    vip: SocketAddr,
    transceiver_of: impl Fn(usize) -> SocketAddr,
) {
    let keys = support::keys();
    for (c, client) in clients.iter().enumerate() {
        let hint = RoutingHint {
            cluster: 0,
            transceiver: transceiver_of(c),
        };
        let ufrag = keys.encode(
            &hint,
            ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
            [c as u8; 5],
        );
        let pwd = keys.ice_password(1, ufrag.as_bytes()).unwrap();
        let mut check = [0u8; 512];
        let n = stun::write_binding_request(
            &mut check,
            &[c as u8; 12],
            ufrag.as_bytes(),
            b"cli1",
            pwd.as_bytes(),
        )
        .unwrap();
        client.send_to(&check[..n], vip).unwrap();
        for k in 0..RTP_PER_CLIENT {
            client.send_to(&rtp(c, k), vip).unwrap();
        }
    }
}

/// Each of the clients `which` had its media arrive among `frames` whole and in the
/// order sent.
fn assert_media_in_order(
    frames: &[(FrameHeader, Vec<u8>)],
    clients: &[UdpSocket],
    which: impl Iterator<Item = usize>,
) {
    for c in which {
        let client = clients[c].local_addr().unwrap();
        let media: Vec<Vec<u8>> = frames
            .iter()
            .filter(|(h, d)| h.client == client && d[0] == 0x80)
            .map(|(_, d)| d.clone())
            .collect();
        let sent: Vec<Vec<u8>> = (0..RTP_PER_CLIENT).map(|k| rtp(c, k).to_vec()).collect();
        assert_eq!(media, sent, "client {c}'s media, whole and in order");
    }
}

#[test]
fn a_batch_for_a_bundling_transceiver_leaves_in_bundles_and_bundled_replies_reach_each_client() {
    let ip = own_ip(1);
    let vip = SocketAddr::from((ip, 3478));
    let internal = SocketAddr::from((ip, 40_000));
    let bundling = UdpSocket::bind((own_ip(2), 0)).unwrap();
    let plain = UdpSocket::bind((own_ip(3), 0)).unwrap();
    let stranger = UdpSocket::bind((own_ip(9), 0)).unwrap();
    for s in [&bundling, &plain] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    let host = |s: &UdpSocket| format!("{}/32", s.local_addr().unwrap().ip());
    let policy = support::policy(vip, &[&host(&bundling), &host(&plain)]);
    let metrics = RelayMetrics::new("mio", 1);
    let spec = WorkerSpec {
        bundles: BundlePolicy {
            to: vec![host(&bundling).parse().unwrap()],
            mtu: MTU,
            gso: false,
        },
        ..support::spec(internal, policy)
    };
    let (worker, _waker) = Worker::bind(spec, metrics.worker(0)).unwrap();

    // Half the clients' sessions live on the bundling transceiver, half on the plain one.
    // Each sends its first check and then media, all queued before the worker runs.
    let clients: Vec<UdpSocket> = (0..CLIENTS)
        .map(|_| UdpSocket::bind((own_ip(4), 0)).unwrap())
        .collect();
    let transceiver_of = |c: usize| {
        if c.is_multiple_of(2) {
            &bundling
        } else {
            &plain
        }
    };
    open_sessions(&clients, vip, |c| transceiver_of(c).local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let thread = std::thread::spawn(move || worker.run(&stopping));

    let per_transceiver = CLIENTS / 2 * (1 + RTP_PER_CLIENT);
    let bundled = receive_frames(&bundling, per_transceiver);
    let single = receive_frames(&plain, per_transceiver);

    // The plain transceiver: one version-1 frame per datagram, as before bundles.
    assert_eq!(single.len(), per_transceiver);
    assert!(single.iter().all(|d| !is_bundle(d)));

    // The bundling one: its 16 frames in bundles that fill the MTU, in each client's order.
    let limit = max_bundle_len(MTU, true);
    assert!(
        bundled.iter().all(|d| d.len() <= limit),
        "a bundle passed the MTU"
    );
    let frame_len = |f: &(FrameHeader, Vec<u8>)| 2 + f.0.encoded_len() + f.1.len();
    let carried: usize = bundled
        .iter()
        .flat_map(|d| frames_of(d))
        .map(|f| frame_len(&f))
        .sum();
    let fewest = (carried + limit - 5) / (limit - 4);
    assert!(
        bundled.len() <= fewest + 1 && bundled.len() < per_transceiver,
        "{} datagrams carried {per_transceiver} frames ({carried} bytes; {fewest} would do)",
        bundled.len()
    );
    assert!(is_bundle(&bundled[0]));
    let frames: Vec<(FrameHeader, Vec<u8>)> = bundled.iter().flat_map(|d| frames_of(d)).collect();
    assert_media_in_order(&frames, &clients, (0..CLIENTS).step_by(2));

    // Replies in one bundle from the bundling transceiver: one per client, and one frame
    // of an unknown version between them, which is its own drop.
    let mut buf = [0u8; 1472];
    let mut writer = BundleWriter::new(&mut buf);
    for c in (0..CLIENTS).step_by(2) {
        let h = FrameHeader::new(clients[c].local_addr().unwrap(), vip).on_verified_path(true);
        writer.push(&h, &[0x80, 0xEE, c as u8]).unwrap();
    }
    let mut reply = writer.finish().unwrap().to_vec();
    // The second frame's first byte: after the bundle header, the first frame (its
    // prefix, a 16-byte header and 3 bytes) and the second's prefix.
    let bad_frame_at = BUNDLE_HEADER_LEN + (2 + 16 + 3) + 2;
    reply[bad_frame_at] = 0xF7;
    bundling.send_to(&reply, internal).unwrap();
    // A malformed bundle (its count promises a frame more), and a good bundle from
    // outside the transceiver networks: each dropped whole.
    let mut overrun = reply.clone();
    overrun[1] += 1;
    bundling.send_to(&overrun, internal).unwrap();
    stranger.send_to(&reply, internal).unwrap();

    let mut got = [0u8; 64];
    for c in (0..CLIENTS).step_by(2) {
        clients[c]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        if c == 2 {
            continue; // its reply was the bad frame
        }
        let (n, from) = clients[c]
            .recv_from(&mut got)
            .expect("the reply reaches its client");
        assert_eq!((&got[..n], from), (&[0x80, 0xEE, c as u8][..], vip));
    }
    clients[2]
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        clients[2].recv_from(&mut got).is_err(),
        "the bad frame went nowhere"
    );

    // Stop, and read the final counters.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap().unwrap();
    let totals = metrics.totals();
    let dropped = |r: DropReason| totals.dropped_datagrams[r.index()];
    assert_eq!(
        totals.forwarded_datagrams[Direction::In as usize],
        2 * per_transceiver as u64
    );
    assert_eq!(totals.forwarded_datagrams[Direction::Out as usize], 3);
    assert_eq!(dropped(DropReason::FrameUnknownVersion), 1);
    assert_eq!(dropped(DropReason::FrameBadBundle), 1);
    assert_eq!(dropped(DropReason::FrameSourceNotAllowed), 1);
    // Internal port: four frames of one bundle, the malformed one, the stranger's.
    assert_eq!(
        totals.received_datagrams[Port::Internal as usize],
        4 + 1 + 1
    );
    assert_eq!(
        totals.in_flight(),
        Some((0, 0)),
        "every datagram ends in one counter"
    );
    let bundles_sent = bundled.iter().filter(|d| is_bundle(d)).count() as u64;
    assert_eq!(totals.bundles_sent, bundles_sent);
    assert_eq!(
        totals.bundles_received, 1,
        "the good bundle alone was opened"
    );
}

/// `--internal-gso`: the same queued batch, runs of equal-size frames to one transceiver
/// leaving as one GSO send each; the kernel cuts them, so the transceiver (which reads
/// no bundles) receives every frame as a datagram of its own, each client's in order,
/// and every one is counted forwarded.
#[test]
fn with_gso_every_frame_reaches_a_plain_transceiver_alone_and_in_order() {
    let ip = own_ip(11);
    let vip = SocketAddr::from((ip, 3478));
    let internal = SocketAddr::from((ip, 40_000));
    let transceiver = UdpSocket::bind((own_ip(12), 0)).unwrap();
    transceiver
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let host = format!("{}/32", transceiver.local_addr().unwrap().ip());
    let metrics = RelayMetrics::new("mio", 1);
    let spec = WorkerSpec {
        bundles: BundlePolicy {
            gso: true,
            ..BundlePolicy::default()
        },
        ..support::spec(internal, support::policy(vip, &[&host]))
    };
    let (worker, _waker) = Worker::bind(spec, metrics.worker(0)).unwrap();
    let clients: Vec<UdpSocket> = (0..CLIENTS)
        .map(|_| UdpSocket::bind((own_ip(13), 0)).unwrap())
        .collect();
    open_sessions(&clients, vip, |_| transceiver.local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let thread = std::thread::spawn(move || worker.run(&stopping));

    let expected = CLIENTS * (1 + RTP_PER_CLIENT);
    let datagrams = receive_frames(&transceiver, expected);
    assert_eq!(datagrams.len(), expected, "one datagram per frame");
    let frames: Vec<(FrameHeader, Vec<u8>)> = datagrams
        .iter()
        .map(|d| {
            assert!(!is_bundle(d), "no bundles without --bundle-to");
            let mut f = frames_of(d);
            assert_eq!(f.len(), 1);
            f.remove(0)
        })
        .collect();
    assert_media_in_order(&frames, &clients, 0..CLIENTS);
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap().unwrap();
    let totals = metrics.totals();
    assert_eq!(
        totals.forwarded_datagrams[Direction::In as usize],
        expected as u64
    );
    assert_eq!(totals.in_flight(), Some((0, 0)));
    assert_eq!(totals.bundles_sent, 0);
    // Each client's three media frames are one run at least: fewer sends than frames.
    assert!(
        (1..expected as u64).contains(&totals.gso_sends),
        "{} GSO sends for {expected} frames",
        totals.gso_sends
    );
}
