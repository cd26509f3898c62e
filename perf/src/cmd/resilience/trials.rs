//! Live sessions under hostile traffic and through a relay restart: `n` str0m echo
//! sessions talk while something else happens (a junk flood at the relay's public port,
//! the relay killed with SIGKILL and started again, or one of [`crate::cmd::resilience::hostile`]'s
//! attacks running while they sign up), and what the sessions got is measured: how many
//! connected and how long it took, echoed audio over sent, and each session's longest
//! gap between two echoes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_testbed::http::request_from;
use ufrag_testbed::webrtc_client::Client;

use crate::bench::sessions::ClientGroup;
use crate::cmd::resilience::hostile::paced;

/// What the live sessions saw.
#[derive(Clone, Debug)]
pub struct LiveRun {
    /// Sessions asked for.
    pub sessions: usize,
    /// POSTs that did not answer 201 (or did not answer).
    pub refused_posts: usize,
    /// Sessions that connected.
    pub connected: usize,
    /// Each connected session's setup time: from the start of its POST to str0m's
    /// `Connected` (ICE and DTLS done).
    pub setups: Vec<Duration>,
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
    /// The run as the report's JSON has it.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "sessions": self.sessions,
            "refused_posts": self.refused_posts,
            "connected": self.connected,
            "setup_ms": {
                "p50": gap_ms(&self.setups, 0.5),
                "p99": gap_ms(&self.setups, 0.99),
                "max": gap_ms(&self.setups, 1.0),
            },
            "audio_sent": self.sent,
            "audio_echoed": self.received,
            "loss": self.loss(),
            "longest_gap_on_the_wire_ms": {
                "p50": gap_ms(&self.gaps, 0.5),
                "p99": gap_ms(&self.gaps, 0.99),
                "max": gap_ms(&self.gaps, 1.0),
            },
            "longest_gap_delivered_ms": {
                "p50": gap_ms(&self.delivered_gaps, 0.5),
                "max": gap_ms(&self.delivered_gaps, 1.0),
            },
        })
    }

    /// Share of the audio whose echo never came back.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 1.0;
        }
        1.0 - self.received.min(self.sent) as f64 / self.sent as f64
    }
}

/// `n` signed-up clients, client `i` on `ip_of(i)`, and when each one's POST began.
struct SignedUp {
    group: ClientGroup,
    ips: Vec<Ipv4Addr>,
    posted_at: Vec<Instant>,
    refused_posts: usize,
}

impl SignedUp {
    /// POSTs `n` offers to `http`, each from its client's own address, and steps the
    /// clients until every signed-up one has connected (at most 20 s).
    fn connect(http: SocketAddr, n: usize, ip_of: impl Fn(usize) -> Ipv4Addr) -> SignedUp {
        let ips: Vec<Ipv4Addr> = (0..n).map(ip_of).collect();
        let mut clients: Vec<Client> = ips.iter().map(|ip| Client::new_on(*ip)).collect();
        let mut posted_at = Vec::with_capacity(n);
        let mut refused_posts = 0;
        for (c, ip) in clients.iter_mut().zip(&ips) {
            posted_at.push(Instant::now());
            let offer = c.offer.clone();
            let answer = request_from(
                IpAddr::V4(*ip),
                http,
                "POST",
                "/v1/sessions",
                Some(("application/sdp", &offer)),
                &[],
            );
            match answer {
                Some(r) if r.status == 201 => c.apply_answer(&r),
                _ => refused_posts += 1,
            }
        }
        let mut group = ClientGroup::new(clients).expect("epoll");
        group.connect();
        SignedUp {
            group,
            ips,
            posted_at,
            refused_posts,
        }
    }

    /// What the sessions saw; each is DELETEd.
    fn finish(self, http: SocketAddr) -> LiveRun {
        let clients = &self.group.clients;
        let connected = || clients.iter().filter(|c| c.connected_at.is_some());
        let run = LiveRun {
            sessions: clients.len(),
            refused_posts: self.refused_posts,
            connected: connected().count(),
            setups: clients
                .iter()
                .zip(&self.posted_at)
                .filter_map(|(c, posted)| Some(c.connected_at? - *posted))
                .collect(),
            sent: clients.iter().map(|c| c.audio_sent).sum(),
            received: clients.iter().map(|c| c.audio_received).sum(),
            gaps: connected().map(|c| c.longest_rtp_gap).collect(),
            delivered_gaps: connected().map(|c| c.longest_audio_gap).collect(),
        };
        for (c, ip) in clients.iter().zip(&self.ips) {
            if let Some(location) = &c.location {
                let _ = request_from(IpAddr::V4(*ip), http, "DELETE", location, None, &[]);
            }
        }
        run
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
    let signed_up = SignedUp::connect(http, n, |_| ip);
    let (signed_up, outcome) = std::thread::scope(|scope| {
        let talking = std::thread::Builder::new()
            .name("perf-live".into())
            .spawn_scoped(scope, move || {
                let mut signed_up = signed_up;
                signed_up.group.talk_connected(talk);
                signed_up
            })
            .expect("client thread");
        std::thread::sleep(lead);
        let outcome = during();
        (talking.join().expect("client thread"), outcome)
    });
    (signed_up.finish(http), outcome)
}

/// `attack` runs on its own thread (told to stop through its flag); `ramp` after it
/// starts, `n` sessions sign up on `http` (client `i` from `ip_of(i)`), connect and talk
/// for `talk`; then the attack is stopped.
pub fn sessions_during<T: Send>(
    http: SocketAddr,
    n: usize,
    ip_of: impl Fn(usize) -> Ipv4Addr,
    talk: Duration,
    ramp: Duration,
    attack: impl FnOnce(&AtomicBool) -> T + Send,
) -> (LiveRun, T) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let attacker = std::thread::Builder::new()
            .name("perf-attack".into())
            .spawn_scoped(scope, || attack(&stop))
            .expect("attack thread");
        std::thread::sleep(ramp);
        let mut signed_up = SignedUp::connect(http, n, ip_of);
        signed_up.group.talk_connected(talk);
        stop.store(true, Ordering::Relaxed);
        let outcome = attacker.join().expect("attack thread");
        (signed_up.finish(http), outcome)
    })
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
    let tally = paced(rate, &AtomicBool::new(false), duration, |i| {
        let socket = &sockets[i as usize % sockets.len()];
        let datagram = kinds[i as usize / sockets.len() % kinds.len()];
        socket.send_to(datagram, vip).is_ok()
    });
    Ok(tally.sent)
}

/// The `q` quantile of `gaps` in milliseconds (0 for none).
pub fn gap_ms(gaps: &[Duration], q: f64) -> f64 {
    let mut sorted = gaps.to_vec();
    crate::bench::sessions::quantile_ms(&mut sorted, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_the_share_not_echoed() {
        let run = LiveRun {
            sessions: 2,
            refused_posts: 0,
            connected: 2,
            setups: vec![],
            sent: 1000,
            received: 999,
            gaps: vec![Duration::from_millis(20), Duration::from_millis(40)],
            delivered_gaps: vec![],
        };
        assert!((run.loss() - 0.001).abs() < 1e-12);
        assert_eq!(gap_ms(&run.gaps, 1.0), 40.0);
    }
}
