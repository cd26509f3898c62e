//! Small network tools the testbed runs inside its namespaces (through `perf`
//! subcommands): a frame-echoing fake transceiver and a client that makes a flow through
//! a relay and counts what comes back. Bounded in packets and time.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::{HintKeys, RoutingHint};
use ufrag_common::stun;

/// A fake transceiver: every valid frame is sent back to the relay it came from, marked
/// as sent on a verified path as a transceiver marks what it sends to a client path that
/// answered its probe (so the relay returns the datagram to its client, and counts the
/// flow's proof). Stops after `max` frames or `idle` without traffic; returns the number
/// echoed.
pub fn fake_transceiver(bind: SocketAddr, max: u64, idle: Duration) -> std::io::Result<u64> {
    let socket = UdpSocket::bind(bind)?;
    socket.set_read_timeout(Some(idle))?;
    let (mut buf, mut reply) = ([0u8; 2048], [0u8; 2048]);
    let mut echoed = 0;
    while echoed < max {
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            break;
        };
        if let Ok((header, payload)) = FrameHeader::parse(&buf[..n]) {
            let at = header
                .on_verified_path(true)
                .emit(&mut reply)
                .expect("a header as long as the one read");
            reply[at..at + payload.len()].copy_from_slice(payload);
            socket.send_to(&reply[..at + payload.len()], from)?;
            echoed += 1;
        }
    }
    Ok(echoed)
}

/// What a probe saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// RTP-like datagrams sent after the Binding Request.
    pub sent: u64,
    /// Echoes received.
    pub received: u64,
}

/// A browser-shaped Binding Request whose server ufrag routes to `transceiver` (cluster
/// 0); `seed` varies the hint's random bits (so each seed is its own session) and the
/// transaction id.
pub fn binding_request(keys: &HintKeys, transceiver: SocketAddr, seed: u32) -> Vec<u8> {
    let [a, b, c, d] = seed.to_be_bytes();
    signed_binding_request(
        keys,
        transceiver,
        seed,
        [a, b, c, d, d, c, b, a, 0x5e, 0xed, a, d],
    )
}

/// A Binding Request for session `session` (its hint's random bits) on `transceiver`,
/// with `transaction` as its id: what the holder of a session's credentials (its
/// POST's answer) can sign as often as it likes.
pub fn signed_binding_request(
    keys: &HintKeys,
    transceiver: SocketAddr,
    session: u32,
    transaction: [u8; 12],
) -> Vec<u8> {
    let [a, b, c, d] = session.to_be_bytes();
    let ufrag = keys.encode(
        &RoutingHint {
            cluster: 0,
            transceiver,
        },
        ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
        [a, b, c, d, 0x5e],
    );
    let pwd = keys
        .ice_password(keys.current().id(), ufrag.as_bytes())
        .expect("the current key derives passwords");
    let mut buf = [0u8; 512];
    let n = stun::write_binding_request(
        &mut buf,
        &transaction,
        ufrag.as_bytes(),
        b"perf",
        pwd.as_bytes(),
    )
    .expect("a Binding Request fits");
    buf[..n].to_vec()
}

/// Makes a flow through the relay at `vip` to `transceiver` with a Binding Request,
/// sends `count` RTP-like datagrams (one per millisecond) and counts the echoes.
pub fn relay_probe(
    keys: &HintKeys,
    vip: SocketAddr,
    transceiver: SocketAddr,
    (count, session): (u64, u8),
) -> std::io::Result<ProbeResult> {
    let any: std::net::IpAddr = if vip.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let socket = UdpSocket::bind((any, 0))?;
    socket.set_read_timeout(Some(Duration::from_millis(500)))?;
    socket.send_to(&binding_request(keys, transceiver, u32::from(session)), vip)?;
    let mut buf = [0u8; 2048];
    // The Binding Request itself comes back (the fake transceiver echoes every frame).
    let _ = socket.recv_from(&mut buf);
    let mut rtp = [0u8; 172];
    rtp[0] = 0x80;
    rtp[1] = 111;
    let mut received = 0;
    let rtp_len = rtp.len();
    let mut count_replies = |socket: &UdpSocket, buf: &mut [u8]| {
        while let Ok((n, from)) = socket.recv_from(buf) {
            if from == vip && n == rtp_len && buf[0] == 0x80 {
                received += 1;
            }
        }
    };
    // Replies are read while sending, so the probe's own receive buffer never overflows.
    socket.set_nonblocking(true)?;
    let start = Instant::now();
    for seq in 0..count {
        rtp[2..4].copy_from_slice(&(seq as u16).to_be_bytes());
        socket.send_to(&rtp, vip)?;
        while start.elapsed() < Duration::from_millis(seq + 1) {
            count_replies(&socket, &mut buf);
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    socket.set_nonblocking(false)?;
    socket.set_read_timeout(Some(Duration::from_millis(300)))?;
    count_replies(&socket, &mut buf);
    Ok(ProbeResult {
        sent: count,
        received,
    })
}
