//! Live sessions under hostile traffic and through a relay restart: `n` str0m echo
//! sessions talk while something else happens (a junk flood at the relay's public port,
//! or the relay killed with SIGKILL and started again), and what the sessions lost is
//! measured: echoed audio over sent, and each session's longest gap between two echoes.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use testkit::http::request as http_request;
use testkit::webrtc_client::Client;

use crate::sessions::ClientGroup;

/// What the live sessions saw.
#[derive(Clone, Debug)]
pub struct LiveRun {
    /// Sessions asked for.
    pub sessions: usize,
    /// Sessions that connected.
    pub connected: usize,
    /// Audio packets sent.
    pub sent: usize,
    /// Echoes received.
    pub received: usize,
    /// Each connected session's longest gap between two echoed RTP datagrams at its
    /// socket (the wire).
    pub gaps: Vec<Duration>,
    /// Each connected session's longest gap between two echoes as str0m delivered them.
    pub delivered_gaps: Vec<Duration>,
}

impl LiveRun {
    /// Share of the audio whose echo never came back.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 1.0;
        }
        1.0 - self.received.min(self.sent) as f64 / self.sent as f64
    }
}

/// `n` sessions on signaling `http`, clients on `ip`, connected first, then talking for
/// `talk` on their own thread while `during` runs on this one, `lead` after they start.
pub fn talk_while<T>(
    http: SocketAddr,
    ip: Ipv4Addr,
    n: usize,
    talk: Duration,
    lead: Duration,
    during: impl FnOnce() -> T,
) -> (LiveRun, T) {
    let mut clients: Vec<Client> = (0..n).map(|_| Client::new_on(ip)).collect();
    for c in &mut clients {
        let _ = c.signal(http);
    }
    let mut group = ClientGroup::new(clients).expect("epoll");
    group.connect();
    let (group, outcome) = std::thread::scope(|scope| {
        let talking = std::thread::Builder::new()
            .name("perf-live".into())
            .spawn_scoped(scope, move || {
                group.talk_connected(talk);
                group
            })
            .expect("client thread");
        std::thread::sleep(lead);
        let outcome = during();
        (talking.join().expect("client thread"), outcome)
    });
    let clients = group.clients;
    let run = LiveRun {
        sessions: n,
        connected: clients.iter().filter(|c| c.connected_at.is_some()).count(),
        sent: clients.iter().map(|c| c.audio_sent).sum(),
        received: clients.iter().map(|c| c.audio_received).sum(),
        gaps: clients
            .iter()
            .filter(|c| c.connected_at.is_some())
            .map(|c| c.longest_rtp_gap)
            .collect(),
        delivered_gaps: clients
            .iter()
            .filter(|c| c.connected_at.is_some())
            .map(|c| c.longest_audio_gap)
            .collect(),
    };
    for c in &clients {
        if let Some(location) = &c.location {
            let _ = http_request(http, "DELETE", location, None, &[]);
        }
    }
    (run, outcome)
}

/// The kinds of junk a flood mixes, in turn.
pub const JUNK_KINDS: [&str; 5] = [
    "Binding Request with a bad MESSAGE-INTEGRITY",
    "STUN-looking header with a wrong magic cookie",
    "DTLS record without a flow",
    "RTP without a flow",
    "an authentic Binding Request replayed from many sources",
];

/// Sends junk to `vip` at `rate` datagrams per second for `duration`, from `sources`
/// sockets on `ip`, cycling through [`JUNK_KINDS`]; `valid_request` is an authentic
/// Binding Request (of a session nobody holds) to replay. Returns the datagrams sent.
pub fn junk_flood(
    vip: SocketAddr,
    ip: Ipv4Addr,
    sources: usize,
    rate: u64,
    duration: Duration,
    valid_request: &[u8],
) -> std::io::Result<u64> {
    let sockets: Vec<UdpSocket> = (0..sources.max(1))
        .map(|_| UdpSocket::bind((ip, 0)))
        .collect::<Result<_, _>>()?;
    // The request ends with MESSAGE-INTEGRITY (4 + 20 bytes) and FINGERPRINT (4 + 4):
    // flip a byte of the MAC itself.
    let mut bad_mac = valid_request.to_vec();
    let at = bad_mac.len().saturating_sub(20);
    bad_mac[at] ^= 0x55;
    let mut bad_cookie = [0u8; 20];
    bad_cookie[1] = 1;
    bad_cookie[4..8].copy_from_slice(&[1, 2, 3, 4]);
    let mut dtls = [0u8; 100];
    dtls[..3].copy_from_slice(&[22, 0xfe, 0xfd]);
    let mut rtp = [0u8; 172];
    rtp[..2].copy_from_slice(&[0x80, 111]);
    let kinds: [&[u8]; 5] = [&bad_mac, &bad_cookie, &dtls, &rtp, valid_request];
    let start = Instant::now();
    let per_ms = (rate / 1000).max(1);
    let mut sent = 0u64;
    let mut tick = 0u32;
    while start.elapsed() < duration {
        for _ in 0..per_ms {
            let socket = &sockets[sent as usize % sockets.len()];
            let datagram = kinds[(sent / sockets.len() as u64) as usize % kinds.len()];
            if socket.send_to(datagram, vip).is_ok() {
                sent += 1;
            }
        }
        tick += 1;
        let next = start + Duration::from_millis(1) * tick;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    Ok(sent)
}

/// The `q` quantile of `gaps` in milliseconds (0 for none).
pub fn gap_ms(gaps: &[Duration], q: f64) -> f64 {
    let mut sorted = gaps.to_vec();
    crate::sessions::quantile_ms(&mut sorted, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_the_share_not_echoed() {
        let run = LiveRun {
            sessions: 2,
            connected: 2,
            sent: 1000,
            received: 999,
            gaps: vec![Duration::from_millis(20), Duration::from_millis(40)],
            delivered_gaps: vec![],
        };
        assert!((run.loss() - 0.001).abs() < 1e-12);
        assert_eq!(gap_ms(&run.gaps, 1.0), 40.0);
    }
}
