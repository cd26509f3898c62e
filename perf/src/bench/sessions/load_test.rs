//! `ufrag-perf load`'s engine: str0m clients that sign up with a deployment's signaling
//! endpoint at a steady rate, connect through its relay, and talk (an Opus frame every
//! 20 ms, a ping every second over `events`); once every session is talking (or has
//! failed) the hold begins, and when it has lasted the planned time they stop and are
//! deleted. What each session saw, step by step.
//!
//! The sign-ups run on threads of their own (an HTTPS round trip must not hold up the
//! clients' audio); the clients run on driver threads, each one mio poll over its
//! clients' sockets and their str0m timeouts, sessions joining as they are signed up.
//! Everything is bounded in time: an HTTP answer by its deadline, a session's setup by
//! the connect timeout, its talk by the hold, a flood of datagrams by the reads one step
//! takes.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use ufrag_model_protocol::messages::SessionClaims;
use ufrag_testbed::http::{Endpoint, HttpResponse, request_to};
use ufrag_testbed::webrtc_client::Client;
use ufrag_transceiver::session_token::{self, TokenAlgorithm, TokenRequest};

use super::{AUDIO_INTERVAL, AUDIO_PHASES};

/// Sign-up threads at most: each makes one request at a time.
const MAX_SIGNUP_THREADS: usize = 16;
/// How long a session keeps listening for its last echoes and pongs once it stops.
const LISTEN_AFTER_TALK: Duration = Duration::from_secs(1);
/// The longest a driver thread sleeps without looking at its clients.
const LONGEST_SLEEP: Duration = Duration::from_millis(5);
/// A session that talked this long and heard no audio back failed ([`Failure::Silent`]).
const SILENT_AFTER: Duration = Duration::from_secs(1);
/// How long ICE may stay disconnected before the session has failed (consent
/// freshness allows brief losses).
const DISCONNECTED_FOR: Duration = Duration::from_secs(2);
/// Datagrams one step of a client reads at most (a flood cannot stall its thread).
const READS_PER_STEP: usize = 256;
/// How long a minted session token lives.
const MINTED_LIFETIME_S: u64 = 300;
/// Sockets and descriptors the tester holds beside one per session.
pub const SPARE_FILES: u64 = 128;

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
    /// How long every session talks together once the last one has started talking.
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

    /// Threads that make the sign-up requests: enough for the rate when an answer takes
    /// up to half a second.
    pub fn signup_threads(&self) -> usize {
        ((self.rate * 0.5).ceil() as usize)
            .clamp(2, MAX_SIGNUP_THREADS)
            .min(self.sessions.max(1))
    }
}

/// Why a session did not get through its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The tester could not mint its token (the error says why).
    Token(String),
    /// The tester could not open or watch its socket (the error says why).
    Local(String),
    /// Signaling answered the POST with this status and reason.
    Refused {
        /// The status.
        status: u16,
        /// The body's first line.
        reason: String,
    },
    /// Signaling did not answer the POST (the error says why).
    Unanswered(String),
    /// A 201 without a `Location` (the session cannot be deleted).
    NoLocation,
    /// A 201 whose answer str0m could not take.
    BadAnswer,
    /// ICE and DTLS did not connect within the connect timeout.
    NotConnected,
    /// Connected, but the `events` channel did not open within the connect timeout.
    NoChannel,
    /// ICE stayed disconnected for more than 2 s while the session talked.
    Disconnected,
    /// The session talked and heard no audio back.
    Silent,
}

impl Failure {
    /// The reason as the report groups it.
    pub fn label(&self) -> String {
        match self {
            Failure::Token(why) => format!("the tester could not mint a token: {why}"),
            Failure::Local(why) => format!("the tester could not open a client: {why}"),
            Failure::Refused { status, reason } => format!("POST answered {status}: {reason}"),
            Failure::Unanswered(why) => format!("POST not answered: {why}"),
            Failure::NoLocation => "a 201 without a Location".into(),
            Failure::BadAnswer => "the answer's SDP was not usable".into(),
            Failure::NotConnected => "ICE + DTLS did not connect".into(),
            Failure::NoChannel => "the events channel did not open".into(),
            Failure::Disconnected => "ICE disconnected while talking".into(),
            Failure::Silent => "no audio came back".into(),
        }
    }
}

/// What one session saw. Setup times are from just before its POST.
#[derive(Clone, Debug, Default)]
pub struct SessionRecord {
    /// Its place in the sign-up order.
    pub index: usize,
    /// How late its sign-up started against its due time (the tester's own lag).
    pub lateness: Duration,
    /// POST → the answer (DNS, TCP and TLS included).
    pub answered: Option<Duration>,
    /// POST → ICE and DTLS connected.
    pub connected: Option<Duration>,
    /// POST → the `events` channel open.
    pub channel_open: Option<Duration>,
    /// POST → the first audio packet back (audio starts when the channel opens).
    pub first_audio: Option<Duration>,
    /// When it started talking, from the start of the run.
    pub talk_from: Option<Duration>,
    /// Audio frames it sent.
    pub audio_sent: usize,
    /// Frames it did not send because its thread was late by more than a frame.
    pub late_frames: u64,
    /// Audio packets it received.
    pub audio_received: usize,
    /// Audio packets missing from the sequence numbers it received.
    pub audio_gaps: u64,
    /// Pings it sent.
    pub pings: usize,
    /// The round trip of each ping answered.
    pub rtts: Vec<Duration>,
    /// Why it failed, if it did.
    pub failure: Option<Failure>,
    /// Its `Location`, when signaling created it.
    pub location: Option<String>,
    /// The DELETE's status (0: not answered), for a session that was created.
    pub deleted: Option<u16>,
}

/// What a run saw.
#[derive(Debug)]
pub struct Outcome {
    /// Every session, in sign-up order.
    pub sessions: Vec<SessionRecord>,
    /// What each client thread cost.
    pub drivers: Vec<DriverLoad>,
    /// When the hold began (every session talking or failed), from the start.
    pub hold_started: Option<Duration>,
    /// From the first sign-up to the last session's end (the deletes apart).
    pub elapsed: Duration,
    /// How long the deletes took.
    pub deleting: Duration,
}

/// What one client thread cost.
#[derive(Clone, Copy, Debug)]
pub struct DriverLoad {
    /// CPU seconds over its whole life.
    pub cpu_seconds: f64,
    /// Its whole life.
    pub wall: Duration,
    /// The share of a core it was busy over the hold, when it saw the whole hold.
    pub hold_busy: Option<f64>,
}

/// What the run has done so far, for the progress bar and the caller's readings.
#[derive(Debug, Default)]
pub struct Progress {
    /// Sessions whose POST was made.
    pub signed_up: AtomicUsize,
    /// Sessions talking now.
    pub talking: AtomicUsize,
    /// Sessions failed.
    pub failed: AtomicUsize,
    /// Sessions finished (either way).
    pub finished: AtomicUsize,
    /// Sessions that started talking or failed before they could.
    settled: AtomicUsize,
    /// When the last of them settled: the hold begins.
    hold_started: OnceLock<Instant>,
}

impl Progress {
    /// One more session talks, or failed before it could; the last one starts the hold.
    fn settle_one(&self, plan: &Plan) {
        if self.settled.fetch_add(1, Ordering::Relaxed) + 1 == plan.sessions {
            let _ = self.hold_started.set(Instant::now());
        }
    }

    /// When the hold began, once it has.
    pub fn hold_started(&self) -> Option<Instant> {
        self.hold_started.get().copied()
    }

    /// One more session failed and is over.
    fn fail_one(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.finished.fetch_add(1, Ordering::Relaxed);
    }
}

/// One session on its way: the client and what it saw so far.
struct Live {
    record: SessionRecord,
    client: Client,
    posted: Instant,
    /// When it started talking (its channel open), and its next frame and ping.
    talk_from: Option<Instant>,
    next_frame: Instant,
    /// Added once after the first frame: this session's place within the 20 ms.
    phase: Duration,
    next_ping: Instant,
    next_ping_id: u64,
    pending_pings: VecDeque<(u64, Instant)>,
    finished: bool,
}

/// What [`Live::advance`] did to a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Nothing the run counts.
    None,
    /// It started talking.
    Talking,
    /// It is over (its record says whether it failed).
    Finished,
}

impl Live {
    fn new(record: SessionRecord, client: Client, posted: Instant) -> Live {
        Live {
            record,
            client,
            posted,
            talk_from: None,
            next_frame: posted,
            phase: Duration::ZERO,
            next_ping: posted,
            next_ping_id: 0,
            pending_pings: VecDeque::new(),
            finished: false,
        }
    }

    /// When this session next needs its driver, short of its socket.
    fn next_wake(&self, talk_until: Option<Instant>) -> Instant {
        let next = self.client.next_timeout();
        match (self.talk_from, talk_until) {
            // Past the end nothing more is sent, whatever was due.
            (Some(_), Some(end)) if self.next_frame >= end || Instant::now() >= end => {
                next.min(end + LISTEN_AFTER_TALK)
            }
            (Some(_), _) => next.min(self.next_frame).min(self.next_ping),
            // Its connect deadline is checked at every wake (at most LONGEST_SLEEP apart).
            (None, _) => next,
        }
    }

    /// Moves the session on at `now`: reads its messages, starts its talk, sends what is
    /// due, and decides whether it failed or is over. `talk_until` is the hold's end
    /// once the hold has begun.
    fn advance(
        &mut self,
        now: Instant,
        plan: &Plan,
        talk_until: Option<Instant>,
        start: Instant,
    ) -> Change {
        if self.finished {
            return Change::None;
        }
        self.read_pongs(now);
        let c = &self.client;
        if let Some(t) = c.connected_at {
            self.record.connected.get_or_insert(t - self.posted);
        }
        if let Some(t) = c.first_audio_at {
            self.record.first_audio.get_or_insert(t - self.posted);
        }
        let since_post = now - self.posted;
        let failure = match (c.connected_at, self.talk_from) {
            (None, _) if since_post > plan.connect_timeout => Some(Failure::NotConnected),
            (Some(t), None) if !c.channel_open && now - t > plan.connect_timeout => {
                Some(Failure::NoChannel)
            }
            (Some(_), Some(_))
                if c.disconnected_since
                    .is_some_and(|t| now - t > DISCONNECTED_FOR) =>
            {
                Some(Failure::Disconnected)
            }
            _ => None,
        };
        if let Some(failure) = failure {
            self.finish(Some(failure));
            return Change::Finished;
        }
        if self.talk_from.is_none() {
            if !c.channel_open {
                return Change::None;
            }
            self.record.channel_open = Some(since_post);
            self.record.talk_from = Some(now - start);
            self.talk_from = Some(now);
            // The first frame goes at once (the first audio back times the server, not
            // the tester); the later ones spread over the 20 ms, as independent talkers'.
            let phase = AUDIO_INTERVAL / AUDIO_PHASES as u32;
            self.phase = phase * (self.record.index % AUDIO_PHASES) as u32;
            self.next_frame = now;
            self.next_ping = now;
            self.talk_now(now, plan);
            return Change::Talking;
        }
        let end = talk_until.unwrap_or(now + AUDIO_INTERVAL);
        if now < end {
            self.talk_now(now, plan);
            return Change::None;
        }
        if now < end + LISTEN_AFTER_TALK {
            return Change::None;
        }
        let talked = end.saturating_duration_since(self.talk_from.unwrap_or(end));
        let silent = talked >= SILENT_AFTER && self.client.audio_received == 0;
        self.finish(silent.then_some(Failure::Silent));
        Change::Finished
    }

    /// Sends the frame and the ping that are due.
    fn talk_now(&mut self, now: Instant, plan: &Plan) {
        if now >= self.next_frame {
            self.client.send_audio();
            self.next_frame += AUDIO_INTERVAL + std::mem::take(&mut self.phase);
            // A driver that fell behind skips the frames it missed rather than send a
            // burst, and counts them.
            if self.next_frame < now {
                let behind = (now - self.next_frame).as_nanos() / AUDIO_INTERVAL.as_nanos();
                self.record.late_frames += behind as u64 + 1;
                self.next_frame += AUDIO_INTERVAL * (behind as u32 + 1);
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
    }

    /// Takes the pongs among the messages that arrived (the rest are dropped).
    fn read_pongs(&mut self, now: Instant) {
        for message in std::mem::take(&mut self.client.messages) {
            let Some(id) = pong_id(&message) else {
                continue;
            };
            if let Some(at) = self.pending_pings.iter().position(|(p, _)| *p == id)
                && let Some((_, sent)) = self.pending_pings.remove(at)
            {
                self.record.rtts.push(now - sent);
            }
        }
    }

    fn finish(&mut self, failure: Option<Failure>) {
        let c = &self.client;
        self.record.audio_sent = c.audio_sent;
        self.record.audio_received = c.audio_received;
        self.record.audio_gaps = c.audio_gaps;
        self.record.failure = failure;
        self.finished = true;
    }
}

/// The id of a pong (`{"type":"pong","id":N}`, whatever else it carries), if `message`
/// is one.
fn pong_id(message: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(message).ok()?;
    (value["type"] == "pong").then(|| value["id"].as_u64())?
}

/// A client on a socket of `local`; an error (out of descriptors, say) in one line.
fn new_client(local: Ipv4Addr) -> Result<Client, String> {
    let socket = UdpSocket::bind((local, 0)).map_err(|e| format!("bind {local}: {e}"))?;
    Ok(Client::with_socket(socket))
}

/// One session end to end, before the load: signs up, connects, is answered one ping,
/// is deleted. An error says in one line what a user must fix.
pub fn pilot(target: &Target, credentials: &Credentials, plan: &Plan) -> Result<Pilot, String> {
    // The pilot is a user of its own, after the load's (a minted token per session).
    let pilot_index = plan.sessions;
    let authorization = credentials.authorization(pilot_index)?;
    let mut client = new_client(plan.local)?;
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
        404 | 405 if target.path != "/v1/sessions" => {
            return Err(format!(
                "POST {url} answered {}: no sessions endpoint at {} (it is /v1/sessions)",
                answer.status, target.path
            ));
        }
        401 | 403 if authorization.is_none() => {
            return Err(format!(
                "POST {url} answered {}: a token is required ({reason}); give \
                 --token-file, UFRAG_TRANSCEIVER_TOKEN or --mint-key-file",
                answer.status
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
    let location = answer.header("Location").map(str::to_string);
    let delete = || {
        if let Some(location) = &location {
            let _ = target.request("DELETE", location, None, authorization.as_deref());
        }
    };
    if let Err(e) = client.try_apply_answer(&answer) {
        delete();
        return Err(format!("POST {url}: the answer's SDP is not usable: {e}"));
    }
    if location.is_none() {
        return Err(format!("POST {url} answered 201 without a Location"));
    }
    let relay = relay_candidates(&answer.body);
    let deadline = Instant::now() + plan.connect_timeout;
    let reached = step_until(&mut client, deadline, |c| {
        c.connected_at.is_some() && c.channel_open
    });
    if !reached {
        delete();
        return Err(match client.connected_at {
            None => format!(
                "the session was answered, but ICE and DTLS did not connect within {:?}: \
                 the relay at {relay} is unreachable from {}",
                plan.connect_timeout, plan.local
            ),
            Some(_) => format!(
                "the session connected through {relay}, but its events channel did not \
                 open within {:?}",
                plan.connect_timeout
            ),
        });
    }
    let connected = posted.elapsed();
    let ping_sent = Instant::now();
    let mut ponged = false;
    let answered_ping = client.send_text(r#"{"type":"ping","id":0}"#)
        && step_until(&mut client, ping_sent + plan.connect_timeout, |c| {
            ponged |= std::mem::take(&mut c.messages)
                .iter()
                .any(|m| pong_id(m) == Some(0));
            ponged
        });
    let rtt = ping_sent.elapsed();
    delete();
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

/// A server's message as a report shows it: its first line, at most 160 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    line.chars().take(160).collect()
}

/// Steps `client` (sleeping a millisecond between steps) until `done` or `deadline`.
fn step_until(
    client: &mut Client,
    deadline: Instant,
    mut done: impl FnMut(&mut Client) -> bool,
) -> bool {
    loop {
        client.step_bounded(READS_PER_STEP);
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

/// Runs the load: `plan.sessions` sign-ups at `plan.rate`; once every session talks (or
/// failed before it could) they talk on together for `plan.hold`; then each is deleted
/// (at the same rate).
pub fn run(
    target: &Target,
    credentials: &Credentials,
    plan: &Plan,
    progress: &Progress,
) -> Outcome {
    let start = Instant::now();
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
                    .spawn_scoped(scope, move || drive(inbox, plan, progress, start))
                    .expect("a driver thread starts")
            })
            .collect();
        let signups: Vec<_> = (0..plan.signup_threads())
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
                            let lost = match sign_up(target, credentials, plan, index, lateness) {
                                Ok(up) => match senders[index % senders.len()].send(up) {
                                    Ok(()) => None,
                                    // Its driver is gone (it panicked): the session still
                                    // settles, so the others' hold begins and ends.
                                    Err(crossbeam_channel::SendError(up)) => {
                                        let mut record = up.record;
                                        record.failure = Some(Failure::Local(
                                            "its client thread stopped".into(),
                                        ));
                                        Some(record)
                                    }
                                },
                                Err(record) => Some(*record),
                            };
                            if let Some(record) = lost {
                                progress.fail_one();
                                progress.settle_one(plan);
                                refused
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(record);
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
    let deleting = Instant::now();
    delete_all(target, credentials, plan, &mut sessions);
    Outcome {
        sessions,
        drivers,
        hold_started: progress.hold_started().map(|t| t - start),
        elapsed,
        deleting: deleting.elapsed(),
    }
}

/// POSTs session `index`'s offer: the client on its way to a driver, or the record of
/// why it cannot go on.
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
    let refuse = |mut record: SessionRecord, failure| {
        record.failure = Some(failure);
        Err(Box::new(record))
    };
    let authorization = match credentials.authorization(index) {
        Ok(a) => a,
        Err(e) => return refuse(record, Failure::Token(e)),
    };
    let mut client = match new_client(plan.local) {
        Ok(c) => c,
        Err(e) => return refuse(record, Failure::Local(e)),
    };
    let offer = client.offer().to_string();
    let posted = Instant::now();
    let answer = target.request(
        "POST",
        &target.path,
        Some(("application/sdp", &offer)),
        authorization.as_deref(),
    );
    let answer = match answer {
        Err(e) => return refuse(record, Failure::Unanswered(e)),
        Ok(a) if a.status != 201 => {
            let (status, reason) = (a.status, first_line(&a.body));
            return refuse(record, Failure::Refused { status, reason });
        }
        Ok(a) => a,
    };
    record.answered = Some(posted.elapsed());
    // Kept from any 201, so a session made with an unusable answer is still deleted.
    record.location = answer.header("Location").map(str::to_string);
    if record.location.is_none() {
        return refuse(record, Failure::NoLocation);
    }
    if client.try_apply_answer(&answer).is_err() {
        return refuse(record, Failure::BadAnswer);
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
    progress: &Progress,
    start: Instant,
) -> (Vec<SessionRecord>, DriverLoad) {
    let (cpu_before, wall_before) = (crate::bench::cpu::thread_cpu_seconds(), Instant::now());
    // This thread's CPU when it first saw the hold, and its share of a core over it.
    let mut hold_began: Option<(f64, Instant)> = None;
    let mut hold_busy: Option<f64> = None;
    let mut poll = Poll::new().expect("epoll");
    let mut events = Events::with_capacity(1024);
    let mut live: Vec<Live> = Vec::new();
    // Sessions that stopped at their read cap: stepped again without waiting.
    let mut unread: Vec<usize> = Vec::new();
    let mut inbox_open = true;
    let mut unfinished = 0usize;
    while inbox_open || unfinished > 0 {
        loop {
            match inbox.try_recv() {
                Ok(up) => {
                    let token = Token(live.len());
                    let fd = up.client.socket.as_raw_fd();
                    let watched =
                        poll.registry()
                            .register(&mut SourceFd(&fd), token, Interest::READABLE);
                    let mut session = Live::new(up.record, up.client, up.posted);
                    match watched {
                        Ok(()) => unfinished += 1,
                        Err(e) => {
                            session.finish(Some(Failure::Local(format!("epoll: {e}"))));
                            progress.fail_one();
                            progress.settle_one(plan);
                        }
                    }
                    live.push(session);
                }
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    inbox_open = false;
                    break;
                }
            }
        }
        let talk_until = progress.hold_started().map(|t| t + plan.hold);
        let now = Instant::now();
        if let Some(end) = talk_until {
            let (cpu, since) =
                *hold_began.get_or_insert_with(|| (crate::bench::cpu::thread_cpu_seconds(), now));
            if now >= end && hold_busy.is_none() {
                let wall = (now - since).as_secs_f64().max(1e-9);
                hold_busy = Some((crate::bench::cpu::thread_cpu_seconds() - cpu) / wall);
            }
        }
        let wake = match unread.is_empty() {
            true => live
                .iter()
                .filter(|s| !s.finished)
                .map(|s| s.next_wake(talk_until))
                .fold(now + LONGEST_SLEEP, Instant::min),
            false => now,
        };
        let _ = poll.poll(&mut events, Some(wake.saturating_duration_since(now)));
        let ready = events.iter().map(|e| e.token().0);
        for i in std::mem::take(&mut unread).into_iter().chain(ready) {
            if let Some(session) = live.get_mut(i).filter(|s| !s.finished)
                && session.client.step_bounded(READS_PER_STEP)
            {
                unread.push(i);
            }
        }
        let now = Instant::now();
        for (i, session) in live.iter_mut().enumerate().filter(|(_, s)| !s.finished) {
            if session.client.next_timeout() <= now && session.client.step_bounded(READS_PER_STEP) {
                unread.push(i);
            }
            let was_talking = session.talk_from.is_some();
            match session.advance(now, plan, talk_until, start) {
                Change::None => {}
                Change::Talking => {
                    progress.talking.fetch_add(1, Ordering::Relaxed);
                    progress.settle_one(plan);
                }
                Change::Finished => {
                    unfinished -= 1;
                    progress.finished.fetch_add(1, Ordering::Relaxed);
                    match (was_talking, session.record.failure.is_some()) {
                        (true, failed) => {
                            progress.talking.fetch_sub(1, Ordering::Relaxed);
                            if failed {
                                progress.failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        (false, _) => {
                            progress.failed.fetch_add(1, Ordering::Relaxed);
                            progress.settle_one(plan);
                        }
                    }
                    let fd = session.client.socket.as_raw_fd();
                    let _ = poll.registry().deregister(&mut SourceFd(&fd));
                }
            }
        }
        unread.sort_unstable();
        unread.dedup();
        unread.retain(|&i| live.get(i).is_some_and(|s| !s.finished));
    }
    let used = DriverLoad {
        cpu_seconds: crate::bench::cpu::thread_cpu_seconds() - cpu_before,
        wall: wall_before.elapsed(),
        hold_busy,
    };
    (live.into_iter().map(|s| s.record).collect(), used)
}

/// Deletes every session that was created, at the sign-up rate over the sign-up
/// threads (a deployment's per-address request rate holds for deletes too), each with
/// a token of its own user minted now (one minted at sign-up may have expired).
fn delete_all(
    target: &Target,
    credentials: &Credentials,
    plan: &Plan,
    sessions: &mut [SessionRecord],
) {
    let start = Instant::now();
    let created: Vec<usize> = (0..sessions.len())
        .filter(|&i| sessions[i].location.is_some())
        .collect();
    let next = AtomicUsize::new(0);
    let statuses: Mutex<Vec<(usize, u16)>> = Mutex::new(Vec::new());
    let shared: &[SessionRecord] = sessions;
    std::thread::scope(|scope| {
        for _ in 0..plan.signup_threads() {
            scope.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = created.get(n) else { return };
                    let due = start + plan.due(n);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let record = &shared[i];
                    let location = record.location.as_deref().unwrap_or_default();
                    let status = credentials
                        .authorization(record.index)
                        .map_err(|e| e.to_string())
                        .and_then(|a| target.request("DELETE", location, None, a.as_deref()))
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
