//! Hostile clients beside legitimate ones: each attack that one attacker host can make
//! on the public ports (from its own addresses, and from spoofed ones where UDP lets it)
//! runs on its own thread at a paced rate while new str0m echo sessions, each from its
//! own address, sign up, connect and talk through relay-mio. What those sessions got
//! (how many connected, their setup time, their loss) is what `perf resilience` reports
//! beside a calm run. Every attack is bounded in rate, count and time.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_common::hint::HintKeys;

use crate::bench::probe::signed_binding_request;

mod proxied;

/// The attacks, in the order the report shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Attack {
    /// Nothing: the sessions alone.
    Calm,
    /// Binding Requests with an authentic hint and a wrong MESSAGE-INTEGRITY, from
    /// spoofed sources on many prefixes: each costs the relay HMACs until refused.
    AuthFailures,
    /// One authentic Binding Request replayed byte for byte from spoofed sources (a
    /// captured packet): at most one flow, whichever worker sees it.
    Replay,
    /// Authentic Binding Requests (the attacker's own sessions' credentials, fresh
    /// transaction ids) from spoofed sources on many prefixes, each flow kept busy with
    /// blind DTLS: an attempt to fill the flow tables.
    Squatting,
    /// TCP connections to the ICE-TCP VIP from many addresses, held silent.
    IceTcpSlots,
    /// Keep-alive connections to the signaling port from one address, beyond every
    /// connection cap, each sending cheap GETs.
    SignalingConnections,
    /// Sign-ups from one address as fast as it can make them, none of which ever
    /// connects: each would park a session until its connect timeout.
    SignupFlood,
    /// Real sessions whose checks and DTLS (with every retransmission) come from a new
    /// spoofed source every few hundred ms, only the checks' answers passed back: an
    /// attempt to prove flows nobody receives on.
    BlindProof,
    /// Real sessions that nominate a victim's address and hold their own next DTLS
    /// flight back: an attempt to make the victim the verified path.
    PathSteering,
    /// One session PATCHing ICE restarts as fast as it may, each new ufrag used at once
    /// in signed first requests from spoofed sources: an attempt to mint admission
    /// identities.
    RestartMinting,
}

impl Attack {
    /// Every attack and the calm run, calm first.
    pub const ALL: [Attack; 10] = [
        Attack::Calm,
        Attack::AuthFailures,
        Attack::Replay,
        Attack::Squatting,
        Attack::IceTcpSlots,
        Attack::SignalingConnections,
        Attack::SignupFlood,
        Attack::BlindProof,
        Attack::PathSteering,
        Attack::RestartMinting,
    ];

    /// The report's name for it.
    pub fn label(self) -> &'static str {
        match self {
            Attack::Calm => "calm (no attack)",
            Attack::AuthFailures => "failed authentications",
            Attack::Replay => "one request replayed",
            Attack::Squatting => "flow-table squatting",
            Attack::IceTcpSlots => "ICE-TCP slots held",
            Attack::SignalingConnections => "signaling connections held",
            Attack::SignupFlood => "sign-up flood",
            Attack::BlindProof => "blind proof with retransmissions",
            Attack::PathSteering => "path steering",
            Attack::RestartMinting => "restart minting",
        }
    }

    /// What one attacker does, for the report.
    pub fn how(self) -> &'static str {
        match self {
            Attack::Calm => "nothing",
            Attack::AuthFailures => {
                "Binding Requests with an authentic hint and a wrong MESSAGE-INTEGRITY, from \
                 256 spoofed sources on 64 /24s"
            }
            Attack::Replay => {
                "one authentic Binding Request (of a session nobody holds) replayed byte \
                 for byte from 256 spoofed sources on 64 /24s"
            }
            Attack::Squatting => {
                "authentic Binding Requests of 128 sessions (fresh transaction ids), each \
                 followed by blind DTLS, from 512 spoofed sources on 64 /24s, each source \
                 every few tens of ms"
            }
            Attack::IceTcpSlots => {
                "TCP connections to the ICE-TCP VIP from 256 addresses on 64 /24s, each \
                 kept open and silent (at most 3,000; the relay may close them), at up to a \
                 tenth of the datagram rate (a connect waits for the relay's backlog)"
            }
            Attack::SignalingConnections => {
                "keep-alive connections to the signaling port from one address (1,100: \
                 beyond the per-address and the global cap), each sending GET /healthz, \
                 at a tenth of the datagram rate"
            }
            Attack::SignupFlood => {
                "one real str0m offer POSTed again and again from one address, a \
                 connection per sign-up, at up to a tenth of the datagram rate; no sign-up \
                 ever connects"
            }
            Attack::BlindProof => {
                "16 sessions signed up from two addresses; every 250 ms each moves to a new \
                 spoofed source (48 per session, on four /24s), which sends a nomination \
                 the attacker signs with the session's credentials, then the str0m \
                 client's checks, ClientHello and retransmissions; only the checks' \
                 answers are passed back to the client"
            }
            Attack::PathSteering => {
                "16 sessions signed up and connecting from the attacker's addresses; on \
                 the server's first DTLS flight each nominates a victim address (a signed \
                 check with USE-CANDIDATE from it) and holds its own next flight 1.5 s, \
                 then nominates the victim again every 500 ms"
            }
            Attack::RestartMinting => {
                "one session PATCHing ICE restarts from one address at up to a tenth of \
                 the datagram rate, each new ufrag used at once in signed first requests \
                 from 8 fresh spoofed sources"
            }
        }
    }
}

/// Where the attacks and the sessions come from: 127.`second`.x.y, a /16 of loopback of
/// this run's own (the attackers on third octets 0..=127 and 200, the legitimate
/// clients each on a /24 of its own from 128).
#[derive(Clone, Copy, Debug)]
pub struct Sources {
    /// The second octet.
    pub second: u8,
}

impl Sources {
    /// Chosen from the process id, away from the 127.200+ addresses the servers use.
    pub fn for_this_run() -> Sources {
        Sources {
            second: 150 + (std::process::id() % 50) as u8,
        }
    }

    /// Attacker address `host` on its /24 number `net`.
    fn attacker(self, net: u8, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, self.second, net, host)
    }

    /// Legitimate client `i`'s address: a /24 of its own for the first 64, then shared.
    pub fn client(self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(127, self.second, 128 + (i % 64) as u8, 1 + (i / 64) as u8)
    }
}

/// What the attacked relay and transceiver are.
#[derive(Clone, Debug)]
pub struct Target {
    /// The relay's UDP VIP.
    pub vip: SocketAddr,
    /// The relay's ICE-TCP VIP.
    pub tcp_vip: SocketAddr,
    /// The transceiver's signaling endpoint.
    pub http: SocketAddr,
    /// The transceiver's worker socket (what hints route to).
    pub transceiver: SocketAddr,
    /// The hint keys an attacker's own sessions are signed with (what it gets by POSTing
    /// sessions and DELETEing them; minted here instead of asked for).
    pub keys: HintKeys,
}

/// What an attacker sent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttackTally {
    /// Datagrams, connections or requests sent.
    pub sent: u64,
    /// For TCP attacks: connections opened (held until the end).
    pub connections: u64,
    /// For the sign-up flood: sign-ups answered with a session (201).
    pub accepted: u64,
    /// How long it ran.
    pub elapsed: Duration,
    /// What it sent and what came back, in a sentence, for attacks the counts above do
    /// not describe.
    pub detail: Option<String>,
}

impl AttackTally {
    /// The rate reached, per second.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `attack` on `target` at `rate` datagrams per second (TCP attacks: a tenth of it
/// in connections or requests) until `stop` is set or `limit` has passed.
pub fn run_attack(
    attack: Attack,
    target: &Target,
    sources: Sources,
    rate: u64,
    stop: &AtomicBool,
    limit: Duration,
) -> std::io::Result<AttackTally> {
    match attack {
        Attack::Calm => Ok(AttackTally::default()),
        Attack::AuthFailures => {
            let requests: Vec<Vec<u8>> = (0..64u32)
                .map(|session| {
                    let mut request = signed_binding_request(
                        &target.keys,
                        target.transceiver,
                        0xbad0_0000 + session,
                        [0xba, 0xd0, session as u8, 1, 2, 3, 4, 5, 6, 7, 8, 9],
                    );
                    // MESSAGE-INTEGRITY (4 + 20 bytes) and FINGERPRINT (4 + 4) end it.
                    let at = request.len() - 20;
                    request[at] ^= 0x55;
                    request
                })
                .collect();
            let sockets = spoofed_sockets(sources, 64, 4)?;
            let sent = paced(rate, stop, limit, |i| {
                let socket = &sockets[i as usize % sockets.len()];
                let request = &requests[i as usize / sockets.len() % requests.len()];
                socket.send_to(request, target.vip).is_ok()
            });
            Ok(sent)
        }
        Attack::Replay => {
            let captured = signed_binding_request(
                &target.keys,
                target.transceiver,
                0x0e71_a700,
                [0x0e, 0x71, 0xa7, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            );
            let sockets = spoofed_sockets(sources, 64, 4)?;
            Ok(paced(rate, stop, limit, |i| {
                let socket = &sockets[i as usize % sockets.len()];
                socket.send_to(&captured, target.vip).is_ok()
            }))
        }
        Attack::Squatting => {
            let sockets = spoofed_sockets(sources, 64, 8)?;
            let mut dtls = [0u8; 100];
            dtls[..3].copy_from_slice(&[22, 0xfe, 0xfd]);
            Ok(paced(rate, stop, limit, |i| {
                let source = i as usize / 2 % sockets.len();
                let socket = &sockets[source];
                if i % 2 == 1 {
                    return socket.send_to(&dtls, target.vip).is_ok();
                }
                let round = (i / 2 / sockets.len() as u64) as u32;
                let [a, b, c, d] = round.to_be_bytes();
                let request = signed_binding_request(
                    &target.keys,
                    target.transceiver,
                    0x5a00_0000 + (source / 4) as u32,
                    [
                        0x5a,
                        (source >> 8) as u8,
                        source as u8,
                        a,
                        b,
                        c,
                        d,
                        0,
                        0,
                        0,
                        0,
                        1,
                    ],
                );
                socket.send_to(&request, target.vip).is_ok()
            }))
        }
        Attack::IceTcpSlots => hold_ice_tcp_slots(target.tcp_vip, sources, rate / 10, stop, limit),
        Attack::SignalingConnections => {
            hold_signaling_connections(target.http, sources, rate / 10, stop, limit)
        }
        Attack::SignupFlood => Ok(flood_sign_ups(target.http, sources, rate / 10, stop, limit)),
        Attack::BlindProof => proxied::blind_proof(target, sources, stop, limit),
        Attack::PathSteering => proxied::path_steering(target, sources, stop, limit),
        Attack::RestartMinting => proxied::restart_minting(target, sources, rate / 10, stop, limit),
    }
}

/// UDP sockets on `nets` /24s × `hosts` addresses of the attacker's space (what spoofing
/// gives an attacker who never needs the answers).
fn spoofed_sockets(sources: Sources, nets: u8, hosts: u8) -> std::io::Result<Vec<UdpSocket>> {
    (0..nets)
        .flat_map(|net| (1..=hosts).map(move |host| (net, host)))
        .map(|(net, host)| UdpSocket::bind((sources.attacker(net, host), 0)))
        .collect()
}

/// Calls `send_one(i)` for i = 0, 1, … at `rate` per second (in 1 ms ticks) until `stop`
/// or `limit`; counts the calls that sent.
pub fn paced(
    rate: u64,
    stop: &AtomicBool,
    limit: Duration,
    mut send_one: impl FnMut(u64) -> bool,
) -> AttackTally {
    let start = Instant::now();
    let per_ms = (rate / 1000).max(1);
    let mut tally = AttackTally::default();
    let mut calls = 0u64;
    let mut tick = 0u32;
    while start.elapsed() < limit && !stop.load(Ordering::Relaxed) {
        for _ in 0..per_ms {
            if send_one(calls) {
                tally.sent += 1;
            }
            calls += 1;
        }
        tick += 1;
        let next = start + Duration::from_millis(1) * tick;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    tally.elapsed = start.elapsed();
    tally
}

/// A TCP connection to `to` from `source`, or `None` if it was not made within 50 ms.
fn connect_from(source: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket.bind(&SocketAddr::from((source, 0)).into()).ok()?;
    socket
        .connect_timeout(&to.into(), Duration::from_millis(50))
        .ok()?;
    let stream: TcpStream = socket.into();
    stream.set_nonblocking(true).ok()?;
    Some(stream)
}

/// The most connections an attack holds at once: 3,000, or fewer if this process may
/// not open that many files.
fn connection_budget() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse::<usize>().ok())
        })
        .unwrap_or(1024);
    3_000.min(soft.saturating_sub(1_000))
}

/// Opens silent connections to the ICE-TCP VIP at `rate` per second from 256 addresses
/// and holds them (the relay may close them; they are not reopened).
fn hold_ice_tcp_slots(
    tcp_vip: SocketAddr,
    sources: Sources,
    rate: u64,
    stop: &AtomicBool,
    limit: Duration,
) -> std::io::Result<AttackTally> {
    let budget = connection_budget();
    let mut held = Vec::with_capacity(budget);
    let mut tally = paced(rate, stop, limit, |i| {
        if held.len() >= budget {
            return false;
        }
        let source = sources.attacker(64 + (i % 64) as u8, 1 + (i / 64 % 4) as u8);
        match connect_from(source, tcp_vip) {
            Some(stream) => {
                held.push(stream);
                true
            }
            None => false,
        }
    });
    tally.connections = tally.sent;
    Ok(tally)
}

/// Keeps up to 1,100 keep-alive connections to the signaling port open from one address
/// and sends `GET /healthz` on them in turn at `rate` per second; a connection the server
/// closed is opened again.
fn hold_signaling_connections(
    http: SocketAddr,
    sources: Sources,
    rate: u64,
    stop: &AtomicBool,
    limit: Duration,
) -> std::io::Result<AttackTally> {
    const CONNECTIONS: usize = 1_100;
    let budget = CONNECTIONS.min(connection_budget());
    let source = sources.attacker(200, 1);
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {http}\r\n\r\n");
    let mut connections: Vec<Option<TcpStream>> = (0..budget).map(|_| None).collect();
    let mut opened = 0u64;
    let mut scratch = [0u8; 4096];
    let mut tally = paced(rate, stop, limit, |i| {
        let slot = &mut connections[i as usize % budget];
        if slot.is_none() {
            *slot = connect_from(source, http);
            opened += u64::from(slot.is_some());
        }
        let Some(stream) = slot else {
            return false;
        };
        // Drain what the server answered; a closed or failed connection is reopened next
        // time round.
        let alive = loop {
            match stream.read(&mut scratch) {
                Ok(0) => break false,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                Err(_) => break false,
            }
        };
        if !alive || stream.write_all(request.as_bytes()).is_err() {
            *slot = None;
            return false;
        }
        true
    });
    tally.connections = opened;
    Ok(tally)
}

/// POSTs one str0m offer to the signaling port from one address at `rate` per second, a
/// connection per sign-up, never connecting any; counts the sign-ups answered 201.
fn flood_sign_ups(
    http: SocketAddr,
    sources: Sources,
    rate: u64,
    stop: &AtomicBool,
    limit: Duration,
) -> AttackTally {
    let source = sources.attacker(201, 1);
    let offer = ufrag_testbed::webrtc_client::Client::new_on(source).offer;
    let request = format!(
        "POST /v1/sessions HTTP/1.1\r\nHost: {http}\r\nContent-Type: application/sdp\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{offer}",
        offer.len()
    );
    let mut accepted = 0u64;
    let mut tally = paced(rate, stop, limit, |_| {
        let Some(mut stream) = connect_from(source, http) else {
            return false;
        };
        // The answer's status line is all that is read, for at most 100 ms.
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut status = [0u8; 12];
        if stream.read_exact(&mut status).is_ok() && status.ends_with(b" 201") {
            accepted += 1;
        }
        true
    });
    tally.accepted = accepted;
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_and_attackers_never_share_a_slash_24() {
        let s = Sources { second: 170 };
        let client_nets: std::collections::BTreeSet<u8> =
            (0..200).map(|i| s.client(i).octets()[2]).collect();
        assert_eq!(client_nets.len(), 64, "the first 64 clients each on a /24");
        for net in 0..128 {
            assert!(!client_nets.contains(&s.attacker(net, 1).octets()[2]));
        }
        assert!(!client_nets.contains(&s.attacker(200, 1).octets()[2]));
    }

    #[test]
    fn pacing_counts_what_sent_and_stops_when_told() {
        let stop = AtomicBool::new(false);
        let mut calls = 0u64;
        let tally = paced(5_000, &stop, Duration::from_millis(20), |i| {
            calls += 1;
            i % 2 == 0
        });
        assert!(calls >= 5, "at least one tick of 5");
        assert_eq!(tally.sent, calls.div_ceil(2));
        stop.store(true, Ordering::Relaxed);
        let stopped = paced(5_000, &stop, Duration::from_secs(10), |_| true);
        assert_eq!(stopped.sent, 0);
    }
}
