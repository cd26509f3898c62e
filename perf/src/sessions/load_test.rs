//! `ufrag-perf load`'s engine: str0m clients that sign up with a deployment's signaling
//! endpoint at a steady rate, connect through its relay, talk (an Opus frame every 20 ms,
//! a ping every second over `events`) until the whole load has been held together for
//! the planned time, and are then deleted; what each session saw, step by step.
//!
//! The sign-ups run on a few threads of their own (an HTTPS round trip must not hold up
//! the clients' audio); the clients run on driver threads, each one mio poll over its
//! clients' sockets and their str0m timeouts, as [`super::ClientGroup`] does.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use testkit::http::{Endpoint, HttpResponse, request_to};
use testkit::webrtc_client::Client;
use transceiver::model::SessionClaims;
use transceiver::session_token::{self, TokenAlgorithm, TokenRequest};

/// Threads that make the sign-up and delete requests.
const SIGNUP_THREADS: usize = 4;
/// How long a session's last echoes and pongs may take once it stops talking.
const SETTLE: Duration = Duration::from_secs(1);
/// One Opus frame every 20 ms.
const FRAME: Duration = Duration::from_millis(20);
/// The longest a driver thread sleeps without looking at its clients.
const LONGEST_SLEEP: Duration = Duration::from_millis(5);
/// A session that talked this long and heard no audio back failed ([`Failure::Silent`]).
const SILENT_AFTER: Duration = Duration::from_secs(1);
/// How long a minted session token lives.
const MINTED_LIFETIME_S: u64 = 300;

/// Where the sessions sign up: `POST {path}` on `endpoint`.
#[derive(Clone, Debug)]
pub struct Target {
    /// The signaling endpoint.
    pub endpoint: Endpoint,
    /// The sessions collection (`/v1/sessions`).
    pub path: String,
    /// The TLS configuration for an https endpoint.
    pub tls: Arc<rustls::ClientConfig>,
}

impl Target {
    /// The sessions collection's URL, as the report names it.
    pub fn url(&self) -> String {
        format!("{}{}", self.endpoint, self.path)
    }

    /// `method path` with `authorization`, if any.
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &str)>,
        authorization: Option<&str>,
    ) -> Result<HttpResponse, String> {
        let headers: Vec<(&str, &str)> = authorization
            .map(|a| vec![("Authorization", a)])
            .unwrap_or_default();
        request_to(&self.endpoint, &self.tls, method, path, body, &headers)
    }
}

/// What each session presents to signaling.
#[derive(Clone, Debug)]
pub enum Credentials {
    /// Nothing (a deployment that admits anyone on its network).
    None,
    /// The same token for every session: the server-to-server bearer token, or one
    /// session token (then the deployment's per-user cap and single use apply to it).
    Fixed(String),
    /// A session token minted for each session, as the app's server would: its own user
    /// (`sub` = `ufrag-load-{run}-{index}`) and `jti`.
    Minted {
        /// The signing algorithm.
        algorithm: TokenAlgorithm,
        /// The HS256 secret or the private key (PKCS#8 PEM).
        key: Vec<u8>,
        /// The audience the deployment checks.
        audience: String,
        /// Tells this run's users from another run's.
        run: String,
    },
}

impl Credentials {
    /// The `Authorization` header for session `index`, if any.
    pub fn authorization(&self, index: usize) -> Result<Option<String>, String> {
        match self {
            Credentials::None => Ok(None),
            Credentials::Fixed(token) => Ok(Some(format!("Bearer {token}"))),
            Credentials::Minted {
                algorithm,
                key,
                audience,
                run,
            } => {
                let issued_at_s = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let request = TokenRequest {
                    audience: audience.clone(),
                    issued_at_s,
                    lifetime_s: MINTED_LIFETIME_S,
                    id: format!("ufrag-load-{run}-{index}"),
                    claims: SessionClaims {
                        subject: Some(format!("ufrag-load-{run}-{index}")),
                        route: None,
                        metadata: Some(serde_json::json!({ "load_test": run })),
                    },
                };
                let token = session_token::mint(*algorithm, key, &request)?;
                Ok(Some(format!("Bearer {token}")))
            }
        }
    }
}

/// How the load is made.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Sessions in all.
    pub sessions: usize,
    /// Sign-ups per second.
    pub rate: f64,
    /// How long every session is held together once the last one has signed up.
    pub hold: Duration,
    /// Driver threads the clients are spread over.
    pub threads: usize,
    /// The clients' address.
    pub local: Ipv4Addr,
    /// How long ICE and DTLS may take after the answer, and the channel after them.
    pub connect_timeout: Duration,
    /// A ping over `events` this often.
    pub ping_every: Duration,
}

impl Plan {
    /// When session `index` is due to sign up, from the start.
    fn due(&self, index: usize) -> Duration {
        Duration::from_secs_f64(index as f64 / self.rate)
    }

    /// How long the sign-ups take: from the first to the last one's due time.
    pub fn ramp(&self) -> Duration {
        self.due(self.sessions.saturating_sub(1))
    }
}

/// Why a session did not get through its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Signaling answered the POST with this status and reason.
    Refused {
        /// The status.
        status: u16,
        /// The body's first line.
        reason: String,
    },
    /// Signaling did not answer the POST (the error says why).
    Unanswered(String),
    /// A 201 whose answer str0m could not take.
    BadAnswer,
    /// ICE and DTLS did not connect within the connect timeout.
    NotConnected,
    /// Connected, but the `events` channel did not open within the connect timeout.
    NoChannel,
    /// ICE reported the connection lost while the session talked.
    Disconnected,
    /// The session talked and heard no audio back.
    Silent,
}

impl Failure {
    /// The reason as the report groups it.
    pub fn label(&self) -> String {
        match self {
            Failure::Refused { status, reason } => format!("POST answered {status}: {reason}"),
            Failure::Unanswered(why) => format!("POST not answered: {why}"),
            Failure::BadAnswer => "the answer's SDP was not usable".into(),
            Failure::NotConnected => "ICE + DTLS did not connect".into(),
            Failure::NoChannel => "the events channel did not open".into(),
            Failure::Disconnected => "ICE disconnected while talking".into(),
            Failure::Silent => "no audio came back".into(),
        }
    }
}

/// What one session saw. Times are from just before its POST.
#[derive(Clone, Debug, Default)]
pub struct SessionRecord {
    /// Its place in the sign-up order.
    pub index: usize,
    /// How late its sign-up started against its due time (the tester's own lag).
    pub lateness: Duration,
    /// POST → the answer.
    pub answered: Option<Duration>,
    /// POST → ICE and DTLS connected.
    pub connected: Option<Duration>,
    /// POST → the `events` channel open.
    pub channel_open: Option<Duration>,
    /// POST → the first audio packet back.
    pub first_audio: Option<Duration>,
    /// Audio frames it sent.
    pub audio_sent: usize,
    /// Audio packets it received.
    pub audio_received: usize,
    /// Audio packets the server numbered between the first and the last received.
    pub audio_expected: u64,
    /// Pings it sent.
    pub pings: usize,
    /// The round trip of each ping answered.
    pub rtts: Vec<Duration>,
    /// Why it failed, if it did.
    pub failure: Option<Failure>,
    /// The DELETE's status (0: not answered), for a session that was made.
    pub deleted: Option<u16>,
    /// Its `Location`.
    pub location: Option<String>,
    /// Its `Authorization` (a minted token deletes its own session).
    authorization: Option<String>,
}

/// What a run saw.
#[derive(Debug)]
pub struct Outcome {
    /// Every session, in sign-up order.
    pub sessions: Vec<SessionRecord>,
    /// CPU seconds each driver thread used, and the wall time it ran.
    pub drivers: Vec<(f64, Duration)>,
    /// From the first sign-up to the last session's end.
    pub elapsed: Duration,
}

/// Counts the progress bar shows.
#[derive(Debug, Default)]
pub struct Progress {
    /// Sessions whose POST was made.
    pub signed_up: AtomicUsize,
    /// Sessions connected with the channel open.
    pub talking: AtomicUsize,
    /// Sessions failed.
    pub failed: AtomicUsize,
    /// Sessions finished (either way).
    pub finished: AtomicUsize,
}

/// One session on its way: the client and what it saw so far.
struct Live {
    record: SessionRecord,
    client: Client,
    posted: Instant,
    /// When it started talking (channel open), and its next frame and ping.
    talk_from: Option<Instant>,
    next_frame: Instant,
    next_ping: Instant,
    next_ping_id: u32,
    pending_pings: VecDeque<(u32, Instant)>,
    finished: bool,
}

impl Live {
    fn new(record: SessionRecord, client: Client, posted: Instant) -> Live {
        Live {
            record,
            client,
            posted,
            talk_from: None,
            next_frame: posted,
            next_ping: posted,
            next_ping_id: 0,
            pending_pings: VecDeque::new(),
            finished: false,
        }
    }

    /// When this session next needs the driver, short of its socket.
    fn next_wake(&self, talk_until: Instant) -> Instant {
        let next = self.client.next_timeout();
        match self.talk_from {
            Some(_) if self.next_frame < talk_until => {
                next.min(self.next_frame).min(self.next_ping)
            }
            Some(_) => next.min(talk_until + SETTLE),
            // Its connect deadline is checked at every wake (at most LONGEST_SLEEP apart).
            None => next,
        }
    }

    /// Moves the session on at `now`: reads its messages, starts its talk, sends what is
    /// due, and decides whether it failed or is over. True when it finished now.
    fn advance(&mut self, now: Instant, plan: &Plan, talk_until: Instant) -> bool {
        if self.finished {
            return false;
        }
        self.read_messages(now);
        let c = &self.client;
        let since_post = now - self.posted;
        if let Some(t) = c.connected_at {
            self.record.connected.get_or_insert(t - self.posted);
        }
        if let Some(t) = c.first_audio_at {
            self.record.first_audio.get_or_insert(t - self.posted);
        }
        let failure = match (c.connected_at, self.talk_from) {
            (None, _) if since_post > plan.connect_timeout => Some(Failure::NotConnected),
            (Some(t), None) if !c.channel_open && now - t > plan.connect_timeout => {
                Some(Failure::NoChannel)
            }
            (Some(_), Some(_)) if c.disconnected => Some(Failure::Disconnected),
            _ => None,
        };
        if let Some(failure) = failure {
            return self.finish(Some(failure));
        }
        if c.channel_open && self.talk_from.is_none() {
            self.record.channel_open = Some(since_post);
            self.talk_from = Some(now);
            // Sessions spread their frames over the 20 ms, as independent talkers do.
            let phase = FRAME / 20 * (self.record.index % 20) as u32;
            self.next_frame = now + phase;
            self.next_ping = now;
        }
        let Some(talk_from) = self.talk_from else {
            return false;
        };
        if now < talk_until {
            if now >= self.next_frame {
                self.client.send_audio();
                // A driver that fell behind skips frames instead of sending a burst.
                self.next_frame += FRAME;
                if self.next_frame < now {
                    self.next_frame = now + FRAME;
                }
            }
            if now >= self.next_ping {
                let id = self.next_ping_id;
                self.next_ping_id += 1;
                if self
                    .client
                    .send_text(&format!(r#"{{"type":"ping","id":{id}}}"#))
                {
                    self.pending_pings.push_back((id, now));
                    self.record.pings += 1;
                }
                self.next_ping += plan.ping_every;
            }
            return false;
        }
        if now < talk_until + SETTLE {
            return false;
        }
        let talked = talk_until.saturating_duration_since(talk_from);
        let silent = talked >= SILENT_AFTER && self.client.audio_received == 0;
        self.finish(silent.then_some(Failure::Silent))
    }

    /// Takes the pongs among the messages that arrived.
    fn read_messages(&mut self, now: Instant) {
        for message in std::mem::take(&mut self.client.messages) {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&message) else {
                continue;
            };
            if value["type"] != "pong" {
                continue;
            }
            let Some(id) = value["id"].as_u64() else {
                continue;
            };
            if let Some(at) = self
                .pending_pings
                .iter()
                .position(|(p, _)| u64::from(*p) == id)
            {
                let (_, sent) = self.pending_pings.remove(at).unwrap_or((0, now));
                self.record.rtts.push(now - sent);
            }
        }
    }

    fn finish(&mut self, failure: Option<Failure>) -> bool {
        let c = &self.client;
        self.record.audio_sent = c.audio_sent;
        self.record.audio_received = c.audio_received;
        self.record.audio_expected = c.audio_seq.map_or(0, |(first, last)| last - first + 1);
        self.record.failure = failure;
        self.finished = true;
        true
    }
}

/// One session end to end, before the load: signs up, connects, is answered one ping,
/// is deleted. An error says in one line what a user must fix.
pub fn pilot(target: &Target, credentials: &Credentials, plan: &Plan) -> Result<Pilot, String> {
    // The pilot is a user of its own, after the load's (a minted token per session).
    let authorization = credentials.authorization(plan.sessions)?;
    let mut client = Client::new_on(plan.local);
    let posted = Instant::now();
    let url = target.url();
    let offer = client.offer().to_string();
    let answer = target
        .request(
            "POST",
            &target.path,
            Some(("application/sdp", &offer)),
            authorization.as_deref(),
        )
        .map_err(|e| format!("POST {url}: {e}"))?;
    let reason = first_line(&answer.body);
    match answer.status {
        201 => {}
        404 | 405 => {
            return Err(format!(
                "POST {url} answered {}: no sessions endpoint at {} (it is /v1/sessions)",
                answer.status, target.path
            ));
        }
        401 | 403 => {
            return Err(format!(
                "POST {url} answered {}: the token was refused ({reason})",
                answer.status
            ));
        }
        status => return Err(format!("POST {url} answered {status}: {reason}")),
    }
    let answered = posted.elapsed();
    client
        .try_apply_answer(&answer)
        .map_err(|e| format!("POST {url}: the answer's SDP is not usable: {e}"))?;
    let location = client.location.clone();
    let delete = |client: &Client| {
        if let Some(location) = &client.location {
            let _ = target.request("DELETE", location, None, authorization.as_deref());
        }
    };
    let relay = relay_candidates(&answer.body);
    let deadline = Instant::now() + plan.connect_timeout;
    let reached = step_until(&mut client, deadline, |c| {
        c.connected_at.is_some() && c.channel_open
    });
    if !reached {
        delete(&client);
        let what = if client.connected_at.is_none() {
            "ICE and DTLS did not connect"
        } else {
            "the events channel did not open"
        };
        return Err(format!(
            "the session was answered, but {what} within {:?}: the relay at {relay} is \
             unreachable from {}",
            plan.connect_timeout, plan.local
        ));
    }
    let connected = posted.elapsed();
    let pong = r#"{"type":"pong","id":0}"#;
    let ping_sent = Instant::now();
    let answered_ping = client.send_text(r#"{"type":"ping","id":0}"#)
        && step_until(&mut client, ping_sent + plan.connect_timeout, |c| {
            c.messages.iter().any(|m| m == pong)
        });
    let rtt = ping_sent.elapsed();
    delete(&client);
    if !answered_ping {
        return Err(format!(
            "the session connected through {relay}, but no pong came back within {:?}",
            plan.connect_timeout
        ));
    }
    Ok(Pilot {
        answered,
        connected,
        rtt,
        relay,
        location,
    })
}

/// What the pilot session saw.
#[derive(Clone, Debug)]
pub struct Pilot {
    /// POST → the answer.
    pub answered: Duration,
    /// POST → ICE, DTLS and the channel.
    pub connected: Duration,
    /// Its ping's round trip.
    pub rtt: Duration,
    /// The relay's candidates in the answer.
    pub relay: String,
    /// Its `Location`.
    pub location: Option<String>,
}

/// The answer's candidates' addresses (`ADDR:PORT/proto`), for a message.
fn relay_candidates(sdp: &str) -> String {
    let mut addresses: Vec<String> = sdp
        .lines()
        .filter_map(|l| l.trim().strip_prefix("a=candidate:"))
        .filter_map(|c| {
            let fields: Vec<&str> = c.split_whitespace().collect();
            let (proto, ip, port) = (fields.get(2)?, fields.get(4)?, fields.get(5)?);
            Some(format!("{ip}:{port}/{}", proto.to_ascii_lowercase()))
        })
        .collect();
    addresses.dedup();
    match addresses.is_empty() {
        true => "(no candidate in the answer)".into(),
        false => addresses.join(", "),
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    line.chars().take(160).collect()
}

/// Steps `client` (sleeping a millisecond between steps) until `done` or `deadline`.
fn step_until(client: &mut Client, deadline: Instant, done: impl Fn(&Client) -> bool) -> bool {
    loop {
        client.step();
        if done(client) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A signed-up session on its way to a driver thread.
struct SignedUp {
    record: SessionRecord,
    client: Client,
    posted: Instant,
}

/// Runs the load: `plan.sessions` sign-ups at `plan.rate`, every session held until the
/// last has been up for `plan.hold`, then each deleted (at the same rate).
pub fn run(
    target: &Target,
    credentials: &Credentials,
    plan: &Plan,
    progress: &Progress,
) -> Outcome {
    let start = Instant::now();
    let talk_until =
        start + plan.ramp() + plan.connect_timeout.min(Duration::from_secs(2)) + plan.hold;
    let threads = plan.threads.max(1);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads)
        .map(|_| crossbeam_channel::unbounded::<SignedUp>())
        .unzip();
    let refused: Mutex<Vec<SessionRecord>> = Mutex::new(Vec::new());
    let next = AtomicUsize::new(0);
    let (driven, drivers) = std::thread::scope(|scope| {
        let drivers: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(i, inbox)| {
                std::thread::Builder::new()
                    .name(format!("load-driver-{i}"))
                    .spawn_scoped(scope, move || drive(inbox, plan, talk_until, progress))
                    .expect("a driver thread starts")
            })
            .collect();
        let signups: Vec<_> = (0..SIGNUP_THREADS.min(plan.sessions.max(1)))
            .map(|i| {
                let (senders, refused, next) = (senders.clone(), &refused, &next);
                std::thread::Builder::new()
                    .name(format!("load-signup-{i}"))
                    .spawn_scoped(scope, move || {
                        loop {
                            let index = next.fetch_add(1, Ordering::Relaxed);
                            if index >= plan.sessions {
                                return;
                            }
                            let due = start + plan.due(index);
                            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                                std::thread::sleep(wait);
                            }
                            let lateness = Instant::now().saturating_duration_since(due);
                            progress.signed_up.fetch_add(1, Ordering::Relaxed);
                            match sign_up(target, credentials, plan, index, lateness) {
                                Ok(up) => {
                                    let _ = senders[index % senders.len()].send(up);
                                }
                                Err(record) => {
                                    progress.failed.fetch_add(1, Ordering::Relaxed);
                                    progress.finished.fetch_add(1, Ordering::Relaxed);
                                    refused
                                        .lock()
                                        .unwrap_or_else(|e| e.into_inner())
                                        .push(*record);
                                }
                            }
                        }
                    })
                    .expect("a sign-up thread starts")
            })
            .collect();
        drop(senders);
        for signup in signups {
            signup.join().expect("a sign-up thread");
        }
        let mut driven = Vec::new();
        let mut cpu = Vec::new();
        for driver in drivers {
            let (records, used) = driver.join().expect("a driver thread");
            driven.extend(records);
            cpu.push(used);
        }
        (driven, cpu)
    });
    let elapsed = start.elapsed();
    let mut sessions: Vec<SessionRecord> = driven;
    sessions.extend(refused.into_inner().unwrap_or_else(|e| e.into_inner()));
    sessions.sort_by_key(|r| r.index);
    delete_all(target, plan, &mut sessions);
    Outcome {
        sessions,
        drivers,
        elapsed,
    }
}

/// POSTs session `index`'s offer: the client on its way to a driver, or the record of
/// why signaling would not have it.
fn sign_up(
    target: &Target,
    credentials: &Credentials,
    plan: &Plan,
    index: usize,
    lateness: Duration,
) -> Result<SignedUp, Box<SessionRecord>> {
    let mut record = SessionRecord {
        index,
        lateness,
        ..SessionRecord::default()
    };
    let authorization = match credentials.authorization(index) {
        Ok(a) => a,
        Err(e) => {
            record.failure = Some(Failure::Unanswered(format!("cannot mint a token: {e}")));
            return Err(Box::new(record));
        }
    };
    let mut client = Client::new_on(plan.local);
    let offer = client.offer().to_string();
    let posted = Instant::now();
    let answer = target.request(
        "POST",
        &target.path,
        Some(("application/sdp", &offer)),
        authorization.as_deref(),
    );
    record.authorization = authorization;
    match answer {
        Err(e) => record.failure = Some(Failure::Unanswered(e)),
        Ok(a) if a.status != 201 => {
            record.failure = Some(Failure::Refused {
                status: a.status,
                reason: first_line(&a.body),
            });
        }
        Ok(a) => {
            record.answered = Some(posted.elapsed());
            if client.try_apply_answer(&a).is_err() {
                record.failure = Some(Failure::BadAnswer);
            }
            record.location = client.location.clone();
        }
    }
    if record.failure.is_some() {
        return Err(Box::new(record));
    }
    Ok(SignedUp {
        record,
        client,
        posted,
    })
}

/// A driver thread: takes signed-up sessions from `inbox` and moves each on until it
/// ends; returns their records, and its CPU seconds and wall time.
fn drive(
    inbox: crossbeam_channel::Receiver<SignedUp>,
    plan: &Plan,
    talk_until: Instant,
    progress: &Progress,
) -> (Vec<SessionRecord>, (f64, Duration)) {
    let (cpu_before, wall_before) = (crate::cpu::thread_cpu_seconds(), Instant::now());
    let mut poll = Poll::new().expect("epoll");
    let mut events = Events::with_capacity(1024);
    let mut live: Vec<Live> = Vec::new();
    let mut inbox_open = true;
    let mut unfinished = 0usize;
    while inbox_open || unfinished > 0 {
        loop {
            match inbox.try_recv() {
                Ok(up) => {
                    let token = Token(live.len());
                    let fd = up.client.socket.as_raw_fd();
                    if poll
                        .registry()
                        .register(&mut SourceFd(&fd), token, Interest::READABLE)
                        .is_err()
                    {
                        crate::say!(
                            "load: cannot watch a client's socket; session {} dropped",
                            up.record.index
                        );
                    }
                    live.push(Live::new(up.record, up.client, up.posted));
                    unfinished += 1;
                }
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    inbox_open = false;
                    break;
                }
            }
        }
        let now = Instant::now();
        let wake = live
            .iter()
            .filter(|s| !s.finished)
            .map(|s| s.next_wake(talk_until))
            .fold(now + LONGEST_SLEEP, Instant::min);
        let _ = poll.poll(&mut events, Some(wake.saturating_duration_since(now)));
        for event in &events {
            if let Some(session) = live.get_mut(event.token().0).filter(|s| !s.finished) {
                session.client.step();
            }
        }
        let now = Instant::now();
        for session in live.iter_mut().filter(|s| !s.finished) {
            if session.client.next_timeout() <= now {
                session.client.step();
            }
            let was_talking = session.talk_from.is_some();
            if session.advance(now, plan, talk_until) {
                unfinished -= 1;
                progress.finished.fetch_add(1, Ordering::Relaxed);
                if session.record.failure.is_some() {
                    progress.failed.fetch_add(1, Ordering::Relaxed);
                }
                if was_talking {
                    progress.talking.fetch_sub(1, Ordering::Relaxed);
                }
                let fd = session.client.socket.as_raw_fd();
                let _ = poll.registry().deregister(&mut SourceFd(&fd));
            } else if !was_talking && session.talk_from.is_some() {
                progress.talking.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let used = (
        crate::cpu::thread_cpu_seconds() - cpu_before,
        wall_before.elapsed(),
    );
    (live.into_iter().map(|s| s.record).collect(), used)
}

/// Deletes every session that was made, at the sign-up rate over the sign-up threads
/// (a deployment's per-address request rate holds for deletes too).
fn delete_all(target: &Target, plan: &Plan, sessions: &mut [SessionRecord]) {
    let start = Instant::now();
    let made: Vec<usize> = (0..sessions.len())
        .filter(|&i| sessions[i].location.is_some())
        .collect();
    let next = AtomicUsize::new(0);
    let statuses: Mutex<Vec<(usize, u16)>> = Mutex::new(Vec::new());
    let shared: &[SessionRecord] = sessions;
    std::thread::scope(|scope| {
        for _ in 0..SIGNUP_THREADS {
            scope.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = made.get(n) else { return };
                    let due = start + plan.due(n);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let record = &shared[i];
                    let location = record.location.as_deref().unwrap_or_default();
                    let status = target
                        .request("DELETE", location, None, record.authorization.as_deref())
                        .map_or(0, |r| r.status);
                    statuses
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((i, status));
                }
            });
        }
    });
    for (i, status) in statuses.into_inner().unwrap_or_else(|e| e.into_inner()) {
        sessions[i].deleted = Some(status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_the_relay_it_points_at() {
        let sdp = "v=0\r\na=candidate:1 1 udp 2130706431 203.0.113.7 3478 typ host\r\n\
                   a=candidate:2 1 udp 2130706431 203.0.113.7 3478 typ host\r\n\
                   a=candidate:3 1 TCP 2130706430 203.0.113.7 443 typ host tcptype passive\r\n";
        assert_eq!(
            relay_candidates(sdp),
            "203.0.113.7:3478/udp, 203.0.113.7:443/tcp"
        );
        assert_eq!(relay_candidates("v=0\r\n"), "(no candidate in the answer)");
    }

    #[test]
    fn sign_ups_are_due_at_the_rate_and_the_ramp_ends_at_the_last() {
        let plan = Plan {
            sessions: 201,
            rate: 20.0,
            hold: Duration::from_secs(1),
            threads: 1,
            local: Ipv4Addr::LOCALHOST,
            connect_timeout: Duration::from_secs(10),
            ping_every: Duration::from_secs(1),
        };
        assert_eq!(plan.due(0), Duration::ZERO);
        assert_eq!(plan.due(20), Duration::from_secs(1));
        assert_eq!(plan.ramp(), Duration::from_secs(10));
    }

    #[test]
    fn minted_tokens_name_one_user_each() {
        let credentials = Credentials::Minted {
            algorithm: TokenAlgorithm::Hs256,
            key: b"0123456789abcdef0123456789abcdef".to_vec(),
            audience: "ufrag-relay".into(),
            run: "t".into(),
        };
        let first = credentials.authorization(1).unwrap().unwrap();
        let second = credentials.authorization(2).unwrap().unwrap();
        assert!(first.starts_with("Bearer ey"), "{first}");
        assert_ne!(first, second);
        assert_eq!(Credentials::None.authorization(1).unwrap(), None);
        assert_eq!(
            Credentials::Fixed("x".into()).authorization(1).unwrap(),
            Some("Bearer x".into())
        );
    }

    #[test]
    fn failures_read_as_one_reason_each() {
        let refused = Failure::Refused {
            status: 429,
            reason: "too many sessions from this address".into(),
        };
        assert_eq!(
            refused.label(),
            "POST answered 429: too many sessions from this address"
        );
        assert_eq!(Failure::Silent.label(), "no audio came back");
    }
}
