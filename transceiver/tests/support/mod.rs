//! End-to-end harness: an in-process relay-mio (real sockets, real worker threads), the
//! transceiver binary as a child process, a tiny HTTP client, and a str0m client peer.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use relay_mio::relay::Relay;
use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::channel::ChannelId;
use str0m::media::{Direction, Frequency, MediaKind, MediaTime, Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc};
use ufrag_common::config::{RelayArgs, RelayConfig};

pub const KEYS: &str = "1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
pub const WAIT: Duration = Duration::from_secs(15);

pub fn unique_ip() -> Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        10 + (pid % 80) as u8,
        ((pid / 80) % 250) as u8 + 1,
        (n % 250) as u8 + 1,
    )
}

fn free_tcp_port(ip: Ipv4Addr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A relay-mio running in this process.
pub struct TestRelay {
    pub relay: Option<Relay>,
    pub vip: SocketAddr,
    pub internal: SocketAddr,
}

impl TestRelay {
    pub fn start(extra: &[&str]) -> TestRelay {
        let ip = unique_ip();
        Self::start_on(ip, extra)
    }

    pub fn start_on(ip: Ipv4Addr, extra: &[&str]) -> TestRelay {
        let vip = SocketAddr::from((ip, 3478));
        let internal = SocketAddr::from((ip, 40_000));
        let metrics = SocketAddr::from((ip, free_tcp_port(ip)));
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            relay: RelayArgs,
        }
        let mut argv = vec![
            "relay".to_string(),
            "--vip".into(),
            vip.to_string(),
            "--internal-addr".into(),
            internal.to_string(),
            "--workers".into(),
            "1".into(),
            "--cpus".into(),
            "0".into(),
            "--allow-transceiver-net".into(),
            "127.0.0.0/8".into(),
            "--metrics-addr".into(),
            metrics.to_string(),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        let args = <Cli as clap::Parser>::parse_from(argv).relay;
        let config = RelayConfig::load(&args, Some(KEYS), 2).unwrap();
        let relay = Relay::start(&config).unwrap();
        TestRelay {
            relay: Some(relay),
            vip,
            internal,
        }
    }

    pub fn stop(&mut self) {
        if let Some(r) = self.relay.take() {
            r.join().unwrap();
        }
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The transceiver binary.
pub struct Transceiver {
    pub child: Child,
    pub http: SocketAddr,
    pub worker: SocketAddr,
    log: std::path::PathBuf,
}

impl Transceiver {
    /// Relay mode, advertising `vip`.
    pub fn start(vip: Option<SocketAddr>, extra: &[&str]) -> Transceiver {
        Self::start_with_env(vip, extra, &[])
    }

    /// Like `start`, with extra environment variables.
    pub fn start_with_env(
        vip: Option<SocketAddr>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Transceiver {
        let ip = unique_ip();
        let http = SocketAddr::from((ip, free_tcp_port(ip)));
        let worker = SocketAddr::from((ip, 41_000));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_transceiver"));
        cmd.args([
            "--http-addr",
            &http.to_string(),
            "--bind",
            &worker.to_string(),
        ]);
        match vip {
            Some(vip) => cmd.args(["--advertise", &vip.to_string()]),
            None => cmd.arg("--direct"),
        };
        if vip.is_some() && !extra.contains(&"--allow-relay-net") {
            cmd.args(["--allow-relay-net", "127.0.0.0/8"]);
        }
        cmd.args(extra);
        cmd.envs(env.iter().copied());
        let log = std::env::temp_dir().join(format!("xcvr-{}-{ip}.log", std::process::id()));
        let child = cmd
            .env("UFRAG_RELAY_HINT_KEYS", KEYS)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let t = Transceiver {
            child,
            http,
            worker,
            log,
        };
        let deadline = Instant::now() + WAIT;
        while http_request(t.http, "GET", "/readyz", None, &[]).map(|r| r.status) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "transceiver not ready: {}",
                t.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        t
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn metric(&self, series_prefix: &str) -> f64 {
        let body = http_request(self.http, "GET", "/metrics", None, &[])
            .unwrap()
            .body;
        body.lines()
            .filter(|l| l.starts_with(series_prefix))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    }
}

impl Drop for Transceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with `Connection: close`.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    extra_headers: &[(&str, &str)],
) -> Option<HttpResponse> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in extra_headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    match body {
        Some((content_type, b)) => req.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )),
        None => req.push_str("Content-Length: 0\r\n\r\n"),
    }
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    Some(HttpResponse {
        status,
        headers,
        body: body.to_string(),
    })
}

/// A str0m client peer: full ICE (not lite), one audio m-line, the "events" channel.
pub struct Client {
    pub rtc: Rtc,
    pub socket: UdpSocket,
    pub local: SocketAddr,
    pub mid: Mid,
    pub channel: ChannelId,
    pending: Option<SdpPendingOffer>,
    pub offer: String,
    pub location: Option<String>,
    pub connected_at: Option<Instant>,
    pub channel_open: bool,
    pub messages: Vec<String>,
    pub audio_received: usize,
    pub audio_sent: usize,
    next_timeout: Instant,
    pt: Option<Pt>,
    rtp_time: u64,
}

impl Client {
    pub fn new() -> Client {
        let now = Instant::now();
        let socket = UdpSocket::bind((unique_ip(), 0)).unwrap();
        socket.set_nonblocking(true).unwrap();
        let local = socket.local_addr().unwrap();
        let mut rtc = Rtc::builder()
            .clear_codecs()
            .enable_opus(true, false)
            .build(now);
        rtc.add_local_candidate(Candidate::host(local, "udp").unwrap());
        let mut api = rtc.sdp_api();
        let mid = api.add_media(MediaKind::Audio, Direction::SendRecv, None, None, None);
        let channel = api.add_channel("events".into());
        let (offer, pending) = api.apply().unwrap();
        Client {
            rtc,
            socket,
            local,
            mid,
            channel,
            pending: Some(pending),
            offer: offer.to_sdp_string(),
            location: None,
            connected_at: None,
            channel_open: false,
            messages: vec![],
            audio_received: 0,
            audio_sent: 0,
            next_timeout: now,
            pt: None,
            rtp_time: 0,
        }
    }

    /// POSTs the offer; on 201 applies the answer.
    pub fn signal(&mut self, http: SocketAddr) -> HttpResponse {
        let r = http_request(
            http,
            "POST",
            "/v1/sessions",
            Some(("application/sdp", &self.offer)),
            &[],
        )
        .expect("signaling answers");
        if r.status == 201 {
            let answer = SdpAnswer::from_sdp_string(&r.body).expect("answer parses");
            let pending = self.pending.take().unwrap();
            self.rtc
                .sdp_api()
                .accept_answer(pending, answer)
                .expect("answer accepted");
            self.location = r.header("Location").map(str::to_string);
        }
        r
    }

    /// Drains outputs, then reads whatever arrived (non-blocking). Returns when idle.
    pub fn step(&mut self) {
        let now = Instant::now();
        if now >= self.next_timeout {
            let _ = self.rtc.handle_input(Input::Timeout(now));
        }
        self.drain();
        let mut buf = [0u8; 2048];
        while let Ok((n, source)) = self.socket.recv_from(&mut buf) {
            let Ok(r) = Receive::new(Protocol::Udp, source, self.local, &buf[..n]) else {
                continue;
            };
            let _ = self.rtc.handle_input(Input::Receive(Instant::now(), r));
            self.drain();
        }
    }

    fn drain(&mut self) {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Transmit(t)) => {
                    let _ = self.socket.send_to(&t.contents, t.destination);
                }
                Ok(Output::Timeout(t)) => {
                    self.next_timeout = t;
                    return;
                }
                Ok(Output::Event(e)) => match e {
                    Event::Connected => self.connected_at = Some(Instant::now()),
                    Event::ChannelOpen(id, _) if id == self.channel => self.channel_open = true,
                    Event::ChannelData(d) if !d.binary => {
                        self.messages
                            .push(String::from_utf8_lossy(&d.data).to_string());
                    }
                    Event::MediaData(_) => self.audio_received += 1,
                    _ => {}
                },
                Err(_) => return,
            }
        }
    }

    pub fn send_text(&mut self, text: &str) -> bool {
        let ok = self
            .rtc
            .channel(self.channel)
            .is_some_and(|mut ch| ch.write(false, text.as_bytes()).is_ok());
        self.drain();
        ok
    }

    /// Writes one 20 ms Opus-sized audio packet.
    pub fn send_audio(&mut self) -> bool {
        let Some(writer) = self.rtc.writer(self.mid) else {
            return false;
        };
        let pt = match self.pt {
            Some(pt) => pt,
            None => match writer.payload_params().next() {
                Some(p) => {
                    let pt = p.pt();
                    self.pt = Some(pt);
                    pt
                }
                None => return false,
            },
        };
        self.rtp_time += 960;
        let payload = vec![0xF8u8; 80];
        let ok = writer
            .write(
                pt,
                Instant::now(),
                MediaTime::new(self.rtp_time, Frequency::FORTY_EIGHT_KHZ),
                payload,
            )
            .is_ok();
        if ok {
            self.audio_sent += 1;
        }
        self.drain();
        ok
    }
}

/// Steps every client until `done` holds for all of them, or panics after `WAIT`.
pub fn run_until(clients: &mut [Client], what: &str, done: impl Fn(&Client) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        for c in clients.iter_mut() {
            c.step();
        }
        if clients.iter().all(&done) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// An offer with only a data channel (no audio).
pub fn offer_without_audio() -> String {
    let mut rtc = Rtc::builder().build(Instant::now());
    let local = SocketAddr::from((unique_ip(), 9));
    rtc.add_local_candidate(Candidate::host(local, "udp").unwrap());
    let mut api = rtc.sdp_api();
    api.add_channel("events".into());
    api.apply().unwrap().0.to_sdp_string()
}

#[path = "../../../relay-mio/tests/support/redis.rs"]
mod redis;
#[allow(unused_imports)] // not every test file needs redis
pub use redis::RedisServer;
