//! A relay that bundles: every datagram of a session towards the transceiver arrives in
//! a bundle (what the test's relay read in a 5 ms window, several frames at once when
//! the client sent a flight), and the session still connects (ICE, DTLS), opens its
//! data channel and gets its audio echoed. The transceiver reads real traffic out of
//! bundles, not only counts them; its replies come back as single frames.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use support::*;
use ufrag_common::bundle::BundleWriter;
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
}

impl BundlingRelay {
    /// Binds the VIP (for the transceiver's `--advertise`); [`BundlingRelay::run`]
    /// starts forwarding.
    fn bind() -> (UdpSocket, SocketAddr) {
        let vip = UdpSocket::bind((unique_ip(), 0)).unwrap();
        let addr = vip.local_addr().unwrap();
        (vip, addr)
    }

    fn run(vip: UdpSocket, transceiver: SocketAddr) -> BundlingRelay {
        let vip_addr = vip.local_addr().unwrap();
        let internal = UdpSocket::bind((unique_ip(), 0)).unwrap();
        for socket in [&vip, &internal] {
            socket
                .set_read_timeout(Some(Duration::from_millis(1)))
                .unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let multi_frame_bundles = Arc::new(AtomicU64::new(0));
        let (stopping, counted) = (Arc::clone(&stop), Arc::clone(&multi_frame_bundles));
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
                // Transceiver → clients: single frames, unframed.
                while let Ok((n, _)) = internal.recv_from(&mut datagram) {
                    let (header, payload) =
                        FrameHeader::parse(&datagram[..n]).expect("the transceiver frames");
                    vip.send_to(payload, header.client).unwrap();
                }
            }
        });
        BundlingRelay {
            vip: vip_addr,
            stop,
            thread: Some(thread),
            multi_frame_bundles,
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
    let (vip, vip_addr) = BundlingRelay::bind();
    let mut xcvr = Transceiver::start(Some(vip_addr), &[]);
    xcvr.wait_ready();
    let relay = BundlingRelay::run(vip, xcvr.worker);
    assert_eq!(relay.vip, vip_addr);

    let mut client = new_client();
    assert_eq!(client.signal(xcvr.http).status, 201);
    let _client = converse_with_echo(client, "through a bundling relay", 25, 20);
    assert!(
        relay.multi_frame_bundles.load(Ordering::Relaxed) > 0,
        "some bundles held several frames (a DTLS flight, audio in one window)"
    );
    assert_eq!(
        xcvr.metric("ufrag_transceiver_dropped_datagrams_total{reason=\"frame_bad_bundle\"}"),
        0.0
    );
}
