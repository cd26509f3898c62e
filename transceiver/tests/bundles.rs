//! A relay that bundles: every datagram of a session towards the transceiver arrives in
//! a bundle (what the test's relay read in a 5 ms window, several frames at once when
//! the client sent a flight), and the session still connects (ICE, DTLS), opens its
//! data channel and gets its audio echoed. The transceiver reads real traffic out of
//! bundles, not only counts them. Its replies come back as single frames, or, when it is
//! told the relay reads bundles (`--bundle-to`), in bundles of their own.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use support::*;
use ufrag_common::bundle::{Bundle, BundleWriter, is_bundle};
use ufrag_common::frame::FrameHeader;

/// How long the test's relay collects client datagrams before it sends them as one
/// bundle.
const WINDOW: Duration = Duration::from_millis(5);
/// The test's relay stops on its own after this, whatever happens.
const LIFETIME: Duration = Duration::from_secs(60);

/// A relay for one transceiver that sends it bundles only.
struct BundlingRelay {
    vip: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Bundles sent that held more than one frame.
    multi_frame_bundles: Arc<AtomicU64>,
    /// Bundles received from the transceiver (each holds several frames).
    bundles_back: Arc<AtomicU64>,
}

impl BundlingRelay {
    /// Binds the VIP (for the transceiver's `--advertise`) and the internal socket (for
    /// its `--bundle-to`); [`BundlingRelay::run`] starts forwarding.
    fn bind() -> (UdpSocket, UdpSocket) {
        let vip = UdpSocket::bind((unique_ip(), 0)).unwrap();
        let internal = UdpSocket::bind((unique_ip(), 0)).unwrap();
        (vip, internal)
    }

    fn run(vip: UdpSocket, internal: UdpSocket, transceiver: SocketAddr) -> BundlingRelay {
        let vip_addr = vip.local_addr().unwrap();
        for socket in [&vip, &internal] {
            socket
                .set_read_timeout(Some(Duration::from_millis(1)))
                .unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let multi_frame_bundles = Arc::new(AtomicU64::new(0));
        let bundles_back = Arc::new(AtomicU64::new(0));
        let (stopping, counted) = (Arc::clone(&stop), Arc::clone(&multi_frame_bundles));
        let counted_back = Arc::clone(&bundles_back);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut datagram = [0u8; 2048];
            let mut bundle = [0u8; 1472];
            while !stopping.load(Ordering::Relaxed) && started.elapsed() < LIFETIME {
                // Clients → transceiver: what arrives in one window, as one bundle.
                let mut writer = BundleWriter::new(&mut bundle);
                let window = Instant::now();
                while window.elapsed() < WINDOW {
                    if let Ok((n, client)) = vip.recv_from(&mut datagram) {
                        let header = FrameHeader::new(client, vip_addr);
                        if writer.push(&header, &datagram[..n]).is_err() {
                            // Full (a DTLS flight): send it, start the next with this one.
                            send_bundle(writer, &internal, transceiver, &counted);
                            writer = BundleWriter::new(&mut bundle);
                            writer
                                .push(&header, &datagram[..n])
                                .expect("one datagram fits an empty bundle");
                        }
                    }
                }
                send_bundle(writer, &internal, transceiver, &counted);
                // Transceiver → clients: frames, alone or bundled, unframed.
                while let Ok((n, _)) = internal.recv_from(&mut datagram) {
                    let frames: Vec<&[u8]> = if is_bundle(&datagram[..n]) {
                        counted_back.fetch_add(1, Ordering::Relaxed);
                        let bundle = Bundle::parse(&datagram[..n]).expect("a good bundle");
                        assert!(bundle.len() > 1, "a lone frame leaves as itself");
                        bundle.collect()
                    } else {
                        vec![&datagram[..n]]
                    };
                    for frame in frames {
                        let (header, payload) =
                            FrameHeader::parse(frame).expect("the transceiver frames");
                        vip.send_to(payload, header.client).unwrap();
                    }
                }
            }
        });
        BundlingRelay {
            vip: vip_addr,
            stop,
            thread: Some(thread),
            multi_frame_bundles,
            bundles_back,
        }
    }
}

/// Sends what `writer` holds (if anything) to `transceiver`, counting it in
/// `multi_frame_bundles` when it holds several frames.
fn send_bundle(
    writer: BundleWriter<'_>,
    internal: &UdpSocket,
    transceiver: SocketAddr,
    multi_frame_bundles: &AtomicU64,
) {
    if writer.count() > 1 {
        multi_frame_bundles.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(bundle) = writer.finish() {
        internal.send_to(bundle, transceiver).unwrap();
    }
}

impl Drop for BundlingRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn a_session_whose_datagrams_all_arrive_in_bundles_connects_and_is_echoed() {
    let (vip, internal) = BundlingRelay::bind();
    let vip_addr = vip.local_addr().unwrap();
    let mut xcvr = Transceiver::start(Some(vip_addr), &[]);
    xcvr.wait_ready();
    let relay = BundlingRelay::run(vip, internal, xcvr.worker);
    assert_eq!(relay.vip, vip_addr);

    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let _client = converse_with_echo(client, "through a bundling relay", 25, 20);
    assert!(
        relay.multi_frame_bundles.load(Ordering::Relaxed) > 0,
        "some bundles held several frames (a DTLS flight, audio in one window)"
    );
    assert_eq!(
        relay.bundles_back.load(Ordering::Relaxed),
        0,
        "a transceiver not told the relay reads bundles sends none"
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_dropped_datagrams_total{reason=\"frame_bad_bundle\"}"),
        0.0
    );
}

/// Told the relay reads bundles, the transceiver answers in bundles: its handshake
/// flights and the echo of a window's audio leave together, and the session works.
#[test]
fn a_transceiver_told_the_relay_reads_bundles_answers_in_bundles() {
    let (vip, internal) = BundlingRelay::bind();
    let vip_addr = vip.local_addr().unwrap();
    let relay_net = format!("{}/32", internal.local_addr().unwrap().ip());
    let mut xcvr = Transceiver::start(Some(vip_addr), &["--bundle-to", &relay_net]);
    xcvr.wait_ready();
    let relay = BundlingRelay::run(vip, internal, xcvr.worker);

    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let _client = converse_with_echo(client, "answered in bundles", 25, 20);
    assert!(
        relay.bundles_back.load(Ordering::Relaxed) > 0,
        "the transceiver sent bundles back"
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_dropped_datagrams_total{reason=\"send_failed\"}"),
        0.0
    );
}
