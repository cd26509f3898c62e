//! Session-level measurements with real WebRTC peers: setup time from the signaling
//! POST to ICE+DTLS connected and to the first echoed audio packet for str0m clients and
//! for headless Chromium on the demo page (with ping RTT and echo ratio), and how many
//! concurrent echo sessions one transceiver worker carries with under 1 % audio loss.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use ufrag_testbed::browser::{Browser, Engine, ReportListener};
use ufrag_testbed::http::request as http_request;
use ufrag_testbed::webrtc_client::{Client, RecordedDatagram};

pub mod failed_rows;
pub mod load_test;
mod tcp;

pub use failed_rows::{FailedRow, failed_rows};
pub use tcp::{TcpCapacity, tcp_listener_capacity};

/// Setup times of one session, and its ping round trips once set up.
#[derive(Clone, Debug)]
pub struct Setup {
    /// POST → ICE + DTLS connected.
    pub connected: Duration,
    /// POST → first echoed audio packet.
    pub first_echo: Duration,
    /// Round trips of [`PINGS`] pings over the `events` channel, one after the other,
    /// after the first echo.
    pub rtts: Vec<Duration>,
}

/// Pings each setup-time session sends after its first echo.
pub const PINGS: u32 = 10;

/// [`PINGS`] pings over `c`'s `events` channel (once it is open), each sent when the
/// last one's pong came back: their round trips, or why one got none within `limit`.
fn ping_rtts(c: &mut Client, limit: Duration) -> Result<Vec<Duration>, String> {
    let mut rtts = Vec::with_capacity(PINGS as usize);
    let opening = Instant::now();
    while !c.channel_open {
        c.step();
        if opening.elapsed() > limit {
            return Err(format!("the events channel did not open within {limit:?}"));
        }
        std::thread::yield_now();
    }
    for id in 0..PINGS {
        let pong = format!(r#"{{"type":"pong","id":{id}}}"#);
        let sent = Instant::now();
        if !c.send_text(&format!(r#"{{"type":"ping","id":{id}}}"#)) {
            return Err(format!("ping {id}: the events channel refused it"));
        }
        while !c.messages.contains(&pong) {
            c.step();
            if sent.elapsed() > limit {
                return Err(format!("ping {id}: no pong within {limit:?}"));
            }
            // Polls without sleeping, but gives the core to the relay when it has work.
            std::thread::yield_now();
        }
        rtts.push(sent.elapsed());
    }
    Ok(rtts)
}

/// What the demo page reported for one Chromium session (milliseconds from the POST).
#[derive(Clone, Copy, Debug, Default)]
pub struct BrowserRun {
    /// POST → the answer applied (`setRemoteDescription` resolved).
    pub answer_ms: f64,
    /// POST → ICE connected.
    pub ice_ms: f64,
    /// POST → DTLS connected (the peer connection `connected`).
    pub dtls_ms: f64,
    /// POST → first echoed audio packet.
    pub first_echo_ms: f64,
    /// Ping round trips over the `events` channel, the first second included.
    pub rtt_p50_ms: f64,
    /// The 99th percentile of those.
    pub rtt_p99_ms: f64,
    /// Echoed audio packets over sent ones.
    pub echoed: f64,
}

/// One Chromium session on the demo page at `http`, talking for `talk`: what the page
/// reported, or why there is no report.
pub fn browser_session(http: SocketAddr, talk: Duration) -> Result<BrowserRun, String> {
    let listener =
        ReportListener::bind(None, Ipv4Addr::LOCALHOST.into()).map_err(|e| e.to_string())?;
    let url = format!(
        "http://{http}/?auto={}&report={}",
        talk.as_secs_f64(),
        listener.url()
    );
    let mut chromium = Browser::open(Engine::Chromium, None, &url).map_err(|e| e.to_string())?;
    let body = listener
        .receive(talk + Duration::from_secs(30), || {
            chromium.child.exit_report()
        })
        .map_err(|e| e.to_string())?;
    let report: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    if let Some(error) = report.get("error") {
        return Err(format!("the page failed: {error}"));
    }
    let number = |key: &str| {
        report[key]
            .as_f64()
            .ok_or_else(|| format!("no {key} in {report}"))
    };
    Ok(BrowserRun {
        answer_ms: number("answer_ms")?,
        ice_ms: number("ice_connected_ms")?,
        dtls_ms: number("dtls_connected_ms")?,
        first_echo_ms: number("first_echo_ms")?,
        rtt_p50_ms: number("rtt_p50_ms")?,
        rtt_p99_ms: number("rtt_p99_ms")?,
        echoed: number("audio_received_later")? / number("audio_sent")?.max(1.0),
    })
}

/// Runs `count` sessions one after the other against the signaling endpoint `http`,
/// each to its first echo, then DELETEs it. Returns the setup times, or the error of the
/// first session that failed.
pub fn setup_times(
    http: SocketAddr,
    ip: Ipv4Addr,
    count: usize,
    limit: Duration,
) -> Result<Vec<Setup>, String> {
    setup_times_of(http, count, limit, || Client::new_on(ip))
}

/// [`setup_times`] for clients over ICE-TCP (RFC 4571 on a connection from `ip` to the
/// relay's TCP VIP `relay_tcp`, their only candidate): what a client whose network
/// blocks UDP waits. The connection is opened before the POST, as a browser's would be
/// only after the answer: the TCP handshake (one loopback round trip here) is not in the
/// figures.
pub fn setup_times_over_tcp(
    http: SocketAddr,
    ip: Ipv4Addr,
    relay_tcp: SocketAddr,
    count: usize,
    limit: Duration,
) -> Result<Vec<Setup>, String> {
    setup_times_of(http, count, limit, || Client::over_tcp(ip, relay_tcp))
}

/// [`setup_times`] with clients made by `new_client`.
fn setup_times_of(
    http: SocketAddr,
    count: usize,
    limit: Duration,
    new_client: impl Fn() -> Client,
) -> Result<Vec<Setup>, String> {
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let mut c = new_client();
        let t0 = Instant::now();
        let r = c.signal(http);
        if r.status != 201 {
            return Err(format!(
                "session {i}: POST answered {} {}",
                r.status,
                r.body.trim()
            ));
        }
        let deadline = t0 + limit;
        let mut next_audio = Instant::now();
        while c.first_audio_at.is_none() {
            c.step();
            if c.connected_at.is_some() && Instant::now() >= next_audio {
                c.send_audio();
                next_audio += Duration::from_millis(20);
            }
            if Instant::now() > deadline {
                return Err(format!("session {i}: no echo within {limit:?}"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let (Some(connected), Some(echo)) = (c.connected_at, c.first_audio_at) else {
            return Err(format!("session {i}: incomplete"));
        };
        let rtts = ping_rtts(&mut c, limit).map_err(|e| format!("session {i}: {e}"))?;
        out.push(Setup {
            connected: connected - t0,
            first_echo: echo - t0,
            rtts,
        });
        if let Some(location) = c.location.clone() {
            let _ = http_request(http, "DELETE", &location, None, &[]);
        }
    }
    Ok(out)
}

/// The `q` quantile (0..=1) of `values` in milliseconds.
pub fn quantile_ms(values: &mut [Duration], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_unstable();
    let i = ((values.len() - 1) as f64 * q).round() as usize;
    values[i].as_secs_f64() * 1e3
}

/// The result of one load step.
#[derive(Clone, Copy, Debug)]
pub struct LoadStep {
    /// Sessions asked for.
    pub sessions: usize,
    /// Sessions that connected.
    pub connected: usize,
    /// Audio packets sent by all clients.
    pub sent: usize,
    /// Echoed packets received by all clients.
    pub received: usize,
    /// CPU seconds the client threads used while the clients sent audio, all together.
    pub client_cpu_seconds: f64,
    /// How long the clients sent audio: the window the step's CPU shares are taken over.
    pub talk_seconds: f64,
}

impl LoadStep {
    /// Fraction of audio lost on the round trip.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 1.0;
        }
        1.0 - (self.received.min(self.sent) as f64 / self.sent as f64)
    }
}

/// Clients one thread drives: one mio poll over their sockets, and str0m's timeouts, so
/// an idle client costs nothing (stepping every client every half millisecond made the
/// load client, not the transceiver, the limit at a few hundred sessions).
pub(crate) struct ClientGroup {
    pub(crate) clients: Vec<Client>,
    poll: Poll,
    events: Events,
}

/// How long after the talk the last echoes may arrive.
const SETTLE: Duration = Duration::from_millis(500);
/// One Opus packet per client every 20 ms.
pub(crate) const AUDIO_INTERVAL: Duration = Duration::from_millis(20);
/// The number of evenly spaced instants within [`AUDIO_INTERVAL`] at which the clients of
/// a group send their audio (client *i* at phase *i* mod 20, so 1 ms apart).
pub(crate) const AUDIO_PHASES: usize = 20;

impl ClientGroup {
    pub(crate) fn new(clients: Vec<Client>) -> std::io::Result<ClientGroup> {
        let poll = Poll::new()?;
        for (i, c) in clients.iter().enumerate() {
            poll.registry().register(
                &mut SourceFd(&c.socket.as_raw_fd()),
                Token(i),
                Interest::READABLE,
            )?;
        }
        Ok(ClientGroup {
            clients,
            poll,
            events: Events::with_capacity(1024),
        })
    }

    /// Steps the clients that have data (each reads until its socket would block, as
    /// edge-triggered readiness requires) or a due timeout, until `until`.
    fn run_until(&mut self, until: Instant) {
        loop {
            let now = Instant::now();
            if now >= until {
                return;
            }
            let next = self
                .clients
                .iter()
                .map(Client::next_timeout)
                .fold(until, Instant::min);
            let _ = self
                .poll
                .poll(&mut self.events, Some(next.saturating_duration_since(now)));
            for event in &self.events {
                if let Some(c) = self.clients.get_mut(event.token().0) {
                    c.step();
                }
            }
            let now = Instant::now();
            for c in self.clients.iter_mut().filter(|c| c.next_timeout() <= now) {
                c.step();
            }
        }
    }

    /// Steps the clients until every signaled one has connected (at most 20 s).
    pub(crate) fn connect(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self
            .clients
            .iter()
            .any(|c| c.location.is_some() && c.connected_at.is_none())
            && Instant::now() < deadline
        {
            self.run_until(Instant::now() + Duration::from_millis(5));
        }
    }

    /// Sends one audio packet every 20 ms per connected client for `talk`, then lets the
    /// last echoes arrive.
    pub(crate) fn talk_connected(&mut self, talk: Duration) {
        self.send_audio_for(talk);
        self.settle();
    }

    /// Lets the last echoes arrive.
    fn settle(&mut self) {
        self.run_until(Instant::now() + SETTLE);
    }

    /// Sends one audio packet every 20 ms per connected client for `talk`. The clients' packets are spread over the 20 ms in
    /// [`AUDIO_PHASES`] phases, as independent users' are: sending every client's packet
    /// at the same instant would measure a burst of a whole step's sessions at once,
    /// which no real population of talkers makes.
    fn send_audio_for(&mut self, talk: Duration) {
        let start = Instant::now();
        let phase_length = AUDIO_INTERVAL / AUDIO_PHASES as u32;
        let mut tick = 0usize;
        while start.elapsed() < talk {
            self.run_until(start + phase_length * tick as u32);
            let phase = tick % AUDIO_PHASES;
            let due = self.clients.iter_mut().enumerate();
            for (_, c) in due.filter(|(i, c)| i % AUDIO_PHASES == phase && c.connected_at.is_some())
            {
                c.send_audio();
            }
            tick += 1;
        }
    }
}

/// How the capacity step's clients talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Talkers {
    /// Each str0m client plays back a talk recorded from itself just before (see
    /// [`Client::record_talk`]): real SRTP from a real str0m session, at a `send_to` per
    /// datagram, so the load client is not the limit; the echoes are checked by str0m
    /// afterwards.
    Recorded,
    /// Each str0m client runs live (SRTP, pacing and timers per packet, as it talks).
    Live,
}

impl ClientGroup {
    /// Lets the connected clients' channel setup finish live, then records each one's
    /// talk of `talk`, client *i* at phase *i* mod [`AUDIO_PHASES`].
    fn record(&mut self, talk: Duration) -> Vec<Vec<RecordedDatagram>> {
        self.run_until(Instant::now() + Duration::from_millis(300));
        let frames = (talk.as_millis() / AUDIO_INTERVAL.as_millis()) as usize;
        let phase_length = AUDIO_INTERVAL / AUDIO_PHASES as u32;
        self.clients
            .iter_mut()
            .enumerate()
            .map(|(i, c)| match c.connected_at {
                Some(_) => c.record_talk(phase_length * (i % AUDIO_PHASES) as u32, frames),
                None => Vec::new(),
            })
            .collect()
    }

    /// Sends every recorded datagram at its offset from now, keeping what arrives.
    fn play(&mut self, recordings: &[Vec<RecordedDatagram>]) {
        let mut schedule: Vec<(Duration, usize, usize)> = recordings
            .iter()
            .enumerate()
            .flat_map(|(c, r)| r.iter().enumerate().map(move |(d, x)| (x.offset, c, d)))
            .collect();
        schedule.sort_unstable();
        let start = Instant::now();
        let mut next = 0;
        while next < schedule.len() {
            let elapsed = start.elapsed();
            while let Some(&(_, c, d)) = schedule.get(next).filter(|s| s.0 <= elapsed) {
                let datagram = &recordings[c][d];
                let _ = self.clients[c].socket.send_to(&datagram.bytes, datagram.to);
                next += 1;
            }
            let Some(&(offset, ..)) = schedule.get(next) else {
                break;
            };
            self.keep_arrivals_for(offset.saturating_sub(start.elapsed()));
        }
    }

    /// Waits up to `wait` for datagrams, and keeps what arrives at each ready client.
    fn keep_arrivals_for(&mut self, wait: Duration) {
        let _ = self.poll.poll(&mut self.events, Some(wait));
        for event in &self.events {
            if let Some(c) = self.clients.get_mut(event.token().0) {
                c.keep_arrivals();
            }
        }
    }

    /// Keeps what arrives for `time` more, then has str0m check every kept echo.
    fn settle_recorded(&mut self, time: Duration) {
        let until = Instant::now() + time;
        while let Some(wait) = until.checked_duration_since(Instant::now()) {
            self.keep_arrivals_for(wait);
        }
        for c in &mut self.clients {
            c.keep_arrivals();
            c.verify_echoes();
        }
    }
}

/// One capacity step: how many sessions, how their clients talk, and where they run.
#[derive(Clone, Copy, Debug)]
pub struct LoadPlan {
    /// Concurrent sessions.
    pub sessions: usize,
    /// How long every client talks.
    pub talk: Duration,
    /// Threads the clients are spread over, each with its own poll and timeouts.
    pub threads: usize,
    /// Live or recorded talkers.
    pub talkers: Talkers,
    /// The CPU the client threads are pinned to, if any.
    pub cpu: Option<usize>,
}

/// `plan.sessions` concurrent sessions against `http`, each client on one of `ips`.
/// `sample` is called just before the clients start sending audio (all connected) and
/// just after they stop, so the caller can take CPU counters over the talk alone; both
/// samples come back with the step.
pub fn load_step<S>(
    http: SocketAddr,
    ips: &[Ipv4Addr],
    plan: LoadPlan,
    mut sample: impl FnMut() -> S,
) -> (LoadStep, [S; 2]) {
    let LoadPlan {
        sessions: n,
        talk,
        threads,
        talkers,
        cpu,
    } = plan;
    let mut clients: Vec<Client> = (0..n).map(|i| Client::new_on(ips[i % ips.len()])).collect();
    for c in &mut clients {
        let _ = c.signal(http);
    }
    let threads = threads.max(1);
    let mut groups: Vec<Vec<Client>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in clients.into_iter().enumerate() {
        groups[i % threads].push(c);
    }
    // The client threads and this one meet when every client has connected (the talk
    // starts) and when every thread has sent its last audio (the talk ends).
    let talk_edges = std::sync::Barrier::new(threads + 1);
    let (clients, cpu, samples, talk_seconds) = std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(i, group)| {
                let talk_edges = &talk_edges;
                std::thread::Builder::new()
                    .name(format!("perf-client-{i}"))
                    .spawn_scoped(scope, move || {
                        if let Some(cpu) = cpu {
                            let _ =
                                core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
                        }
                        let mut group = ClientGroup::new(group).expect("epoll");
                        group.connect();
                        let recordings = match talkers {
                            Talkers::Recorded => group.record(talk),
                            Talkers::Live => Vec::new(),
                        };
                        talk_edges.wait();
                        let cpu_before = crate::bench::cpu::thread_cpu_seconds();
                        match talkers {
                            Talkers::Recorded => group.play(&recordings),
                            Talkers::Live => group.send_audio_for(talk),
                        }
                        let cpu = crate::bench::cpu::thread_cpu_seconds() - cpu_before;
                        talk_edges.wait();
                        match talkers {
                            Talkers::Recorded => group.settle_recorded(SETTLE),
                            Talkers::Live => group.settle(),
                        }
                        (group.clients, cpu)
                    })
                    .expect("client thread")
            })
            .collect();
        talk_edges.wait();
        let (first, t0) = (sample(), Instant::now());
        talk_edges.wait();
        let (last, talk_seconds) = (sample(), t0.elapsed().as_secs_f64());
        let (clients, cpu): (Vec<Vec<Client>>, Vec<f64>) = handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .unzip();
        (clients, cpu, [first, last], talk_seconds)
    });
    let clients: Vec<Client> = clients.into_iter().flatten().collect();
    let step = LoadStep {
        sessions: n,
        connected: clients.iter().filter(|c| c.connected_at.is_some()).count(),
        sent: clients.iter().map(|c| c.audio_sent).sum(),
        received: clients.iter().map(|c| c.audio_received).sum(),
        client_cpu_seconds: cpu.iter().sum(),
        talk_seconds,
    };
    for c in &clients {
        if let Some(location) = &c.location {
            let _ = http_request(http, "DELETE", location, None, &[]);
        }
    }
    (step, samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_ranked_values() {
        let mut v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile_ms(&mut v, 0.5), 51.0);
        assert_eq!(quantile_ms(&mut v, 0.99), 99.0);
        assert_eq!(quantile_ms(&mut [], 0.5), 0.0);
    }

    #[test]
    fn loss_counts_missing_echoes() {
        let s = LoadStep {
            sessions: 1,
            connected: 1,
            sent: 1000,
            received: 995,
            client_cpu_seconds: 0.0,
            talk_seconds: 0.0,
        };
        assert!((s.loss() - 0.005).abs() < 1e-12);
        assert_eq!(
            LoadStep {
                sessions: 1,
                connected: 0,
                sent: 0,
                received: 0,
                client_cpu_seconds: 0.0,
                talk_seconds: 0.0,
            }
            .loss(),
            1.0
        );
    }
}
