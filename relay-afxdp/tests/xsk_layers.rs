//! Both AF_XDP layers under the worker's interface (`UmemSocket`), on a real socket bound
//! to the testbed relay's veth (root; CI runs as root): ours (`xsk`) and the `xdp`
//! crate's through its adapter (`xsk_crate`). Each keeps the contract the worker relies
//! on: only a frame the caller holds can be read, written, sent or recycled, and each
//! only once; any other address (never received, already given back, outside the UMEM,
//! a length past the frame's end) is refused, never trusted; and no more frames wait to
//! be sent than the backlog allows.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_relay_afxdp::steering::{AttachMode, Steering};
use ufrag_relay_afxdp::xsk::{RxFrame, UmemSocket, XdpSocket, XskConfig};
use ufrag_relay_afxdp::xsk_crate::CrateSocket;
use ufrag_testkit::testbed::Testbed;
use ufrag_testkit::testbed::tools::{ifindex_in, require_root};

const PAYLOAD: &[u8] = b"the contract of a frame";
const FRAME_SIZE: u32 = 2048;

#[test]
fn our_layer_refuses_every_frame_the_caller_does_not_hold() {
    holds_the_contract(XdpSocket::open);
}

#[test]
fn the_xdp_crate_layer_refuses_every_frame_the_caller_does_not_hold() {
    holds_the_contract(CrateSocket::open);
}

/// Receives up to `want` frames, polling for at most five seconds.
fn receive<S: UmemSocket>(socket: &mut S, want: usize) -> Vec<RxFrame> {
    let mut frames = vec![];
    let mut batch = [RxFrame { addr: 0, len: 0 }; 8];
    let deadline = Instant::now() + Duration::from_secs(5);
    while frames.len() < want && Instant::now() < deadline {
        socket.maintain();
        let n = socket.receive(&mut batch[..want - frames.len()]);
        frames.extend_from_slice(&batch[..n]);
        if n == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    frames
}

fn holds_the_contract<S: UmemSocket + 'static>(open: fn(u32, u32, XskConfig) -> io::Result<S>) {
    require_root();
    let bed = Testbed::up().expect("testbed");
    let vip = SocketAddr::new(bed.relay.ip(false), 3478);
    let internal = SocketAddr::new(bed.relay.ip(false), 40000);
    let ifindex = ifindex_in(&bed.relay.ns, &bed.relay.ifname);
    // The client sends a datagram to the VIP every 20 ms (at most 500) until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let client_ip = bed.client.ip(false);
    let sending = {
        let stop = Arc::clone(&stop);
        ufrag_testkit::netns::spawn_in(Some(&bed.client.ns), "contract-client", move || {
            let socket = UdpSocket::bind((client_ip, 0)).expect("client socket");
            for _ in 0..500 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let _ = socket.send_to(PAYLOAD, vip);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .expect("into the client's namespace")
    };
    let checked = ufrag_testkit::netns::in_netns(Some(&bed.relay.ns), move || {
        let steering = Steering::load_with(&[vip], &[internal], 1, None).expect("the program");
        let config = XskConfig {
            frames: 64,
            frame_size: FRAME_SIZE,
            headroom: 128,
            ring_size: 32,
            tx_backlog: 2,
            ..XskConfig::default()
        };
        let mut socket = open(ifindex, 0, config).expect("the socket binds");
        steering
            .register_socket(0, socket.fd())
            .expect("registered");
        let _link = steering.attach(ifindex, AttachMode::Skb).expect("attached");

        // Nothing is the caller's before a receive: not the first frame, not one in the
        // middle of the UMEM, not past its end.
        for addr in [0, 5 * 2048 + 384, 64 * 2048, u64::MAX] {
            assert!(
                socket.frame_buffer(addr).is_empty(),
                "{addr} before any receive"
            );
            assert!(!socket.transmit(addr, 60), "{addr} sent before any receive");
            socket.recycle(addr);
        }

        let frames = receive(&mut socket, 5);
        assert_eq!(frames.len(), 5, "five of the client's datagrams arrive");
        let [
            recycled,
            sent,
            too_long,
            fills_the_backlog,
            beyond_the_backlog,
        ] = [frames[0], frames[1], frames[2], frames[3], frames[4]];

        // A received frame is the caller's: its bytes are the client's datagram.
        let at = socket.offset_in_buffer(recycled.addr);
        assert_eq!(socket.address_at(recycled.addr, at), recycled.addr);
        let end = at + recycled.len as usize;
        let buffer = socket.frame_buffer(recycled.addr);
        assert!(buffer.len() >= end, "the buffer holds the frame");
        assert!(
            buffer[..end].ends_with(PAYLOAD),
            "the datagram is in the frame"
        );

        // Given back once, it is nobody's: no buffer, no send, a second recycle is a no-op.
        socket.recycle(recycled.addr);
        assert!(socket.frame_buffer(recycled.addr).is_empty());
        assert!(!socket.transmit(recycled.addr, recycled.len));
        socket.recycle(recycled.addr);

        // Sent once, it is the kernel's: a second send and its buffer are refused.
        assert!(socket.transmit(sent.addr, sent.len));
        assert!(!socket.transmit(sent.addr, sent.len), "sent twice");
        assert!(socket.frame_buffer(sent.addr).is_empty());

        // A length running past the frame's end is refused and the frame stays the
        // caller's, to recycle.
        let room = FRAME_SIZE as usize - socket.offset_in_buffer(too_long.addr);
        assert!(!socket.transmit(too_long.addr, room as u32 + 1));
        assert!(!socket.frame_buffer(too_long.addr).is_empty());
        socket.recycle(too_long.addr);

        // Two frames waiting fill a backlog of two: a third is refused and stays the
        // caller's; once the kernel has sent them (kicked, completions reaped), the
        // backlog is empty again.
        assert!(socket.transmit(fills_the_backlog.addr, fills_the_backlog.len));
        assert_eq!(socket.tx_waiting(), 2);
        assert!(socket.tx_backlog_full());
        assert!(!socket.transmit(beyond_the_backlog.addr, beyond_the_backlog.len));
        assert!(!socket.frame_buffer(beyond_the_backlog.addr).is_empty());
        socket.recycle(beyond_the_backlog.addr);
        let deadline = Instant::now() + Duration::from_secs(5);
        while socket.tx_waiting() > 0 && Instant::now() < deadline {
            socket.flush_tx();
            socket.maintain();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(socket.tx_waiting(), 0, "the kernel sent the backlog");

        // The frames cycle on: the layer still receives after all that.
        let more = receive(&mut socket, 2);
        assert_eq!(more.len(), 2, "receiving goes on");
        for frame in more {
            socket.recycle(frame.addr);
        }
    });
    stop.store(true, Ordering::Relaxed);
    let _ = sending.join();
    checked.expect("into the relay's namespace");
}
