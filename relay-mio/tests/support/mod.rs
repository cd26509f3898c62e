//! The behaviour-suite harness: a relay binary run as a child process on loopback, fake
//! transceivers built from `common`'s frame codec, clients sending STUN built the way
//! browsers do, metrics read over HTTP, and a private `redis-server`.
//!
//! Everything binds to a random 127.x.y.z address of its own, so tests run in parallel
//! (and two runs of the suite) never collide, and no traffic leaves loopback. The relay
//! under test is `relay-mio` unless `RELAY_UNDER_TEST` names another binary that takes
//! the same flags (the AF_XDP backend, later).
#![allow(dead_code, unreachable_pub)] // each test file uses a different part of the harness

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::{HintKey, HintKeys, RoutingHint};
use ufrag_common::stun;

/// The hint key every relay in the suite gets (id 1).
pub const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
/// How long any wait in the suite may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

pub fn keys() -> HintKeys {
    let secret: Vec<u8> = (0u8..32).collect();
    HintKeys::new(HintKey::new(1, &secret).unwrap(), None).unwrap()
}

/// A fresh loopback address, unique within this run (pid-seeded, then counted).
pub fn unique_ip() -> std::net::Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    std::net::Ipv4Addr::new(
        127,
        100 + (pid % 100) as u8,
        ((pid / 100) % 250) as u8 + 1,
        (n % 250) as u8 + 1,
    )
}

/// A free TCP port on `ip` (bind 0, read, release).
pub fn free_tcp_port(ip: std::net::Ipv4Addr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn relay_binary() -> String {
    std::env::var("RELAY_UNDER_TEST")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_relay-mio").to_string())
}

/// A relay child process; killed on drop.
pub struct RelayProcess {
    pub child: Child,
    pub vips: Vec<SocketAddr>,
    pub internal: SocketAddr,
    pub metrics: SocketAddr,
    pub log: std::path::PathBuf,
}

/// How to start a relay: flags beyond the ones every test needs.
#[derive(Clone, Debug)]
pub struct RelaySetup {
    pub vips: usize,
    pub workers: usize,
    pub extra: Vec<String>,
    pub internal_ip: std::net::Ipv4Addr,
    pub vip_ip: std::net::Ipv4Addr,
}

impl Default for RelaySetup {
    fn default() -> Self {
        RelaySetup {
            vips: 1,
            workers: 1,
            extra: vec![],
            internal_ip: unique_ip(),
            vip_ip: unique_ip(),
        }
    }
}

impl RelayProcess {
    pub fn start(setup: &RelaySetup) -> RelayProcess {
        let vips: Vec<SocketAddr> = (0..setup.vips)
            .map(|i| SocketAddr::from((setup.vip_ip, 3478 + i as u16)))
            .collect();
        let internal = SocketAddr::from((setup.internal_ip, 40_000));
        let metrics = SocketAddr::from((setup.internal_ip, free_tcp_port(setup.internal_ip)));
        let mut args: Vec<String> = vec![];
        for v in &vips {
            args.extend(["--vip".into(), v.to_string()]);
        }
        args.extend([
            "--internal-addr".into(),
            internal.to_string(),
            "--workers".into(),
            setup.workers.to_string(),
            "--cpus".into(),
            format!("0-{}", setup.workers.max(2) - 1),
            "--metrics-addr".into(),
            metrics.to_string(),
        ]);
        // Defaults a test can replace by giving the flag itself.
        for (flag, value) in [
            ("--allow-transceiver-net", "127.0.0.0/8"),
            ("--drain-time", "300ms"),
        ] {
            if !setup.extra.iter().any(|a| a == flag) {
                args.extend([flag.to_string(), value.to_string()]);
            }
        }
        args.extend(setup.extra.iter().cloned());
        let log = std::env::temp_dir().join(format!(
            "relay-{}-{}.log",
            std::process::id(),
            internal.ip()
        ));
        let child = Command::new(relay_binary())
            .args(&args)
            .env("UFRAG_RELAY_HINT_KEYS", format!("1:{KEY_HEX}"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("relay binary starts");
        let relay = RelayProcess {
            child,
            vips,
            internal,
            metrics,
            log,
        };
        relay.wait_ready();
        relay
    }

    pub fn vip(&self) -> SocketAddr {
        self.vips[0]
    }

    /// The internal address of worker `i`.
    pub fn internal_of(&self, worker: usize) -> SocketAddr {
        SocketAddr::new(self.internal.ip(), self.internal.port() + worker as u16)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Some((200, _)) = http_get(self.metrics, "/readyz") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("relay not ready within {WAIT:?}; log:\n{}", self.log_text());
    }

    /// The current metrics as `series → value`.
    pub fn metrics(&self) -> HashMap<String, f64> {
        let (_, body) = http_get(self.metrics, "/metrics").expect("metrics endpoint answers");
        body.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                Some((series.to_string(), value.parse().ok()?))
            })
            .collect()
    }

    /// The sum over workers of a metric, filtered by one label (`""` for none).
    pub fn total(&self, name: &str, label: &str) -> f64 {
        self.metrics()
            .iter()
            .filter(|(k, _)| {
                k.starts_with(&format!("{name}{{")) && (label.is_empty() || k.contains(label))
            })
            .map(|(_, v)| v)
            .sum()
    }

    pub fn drops(&self, reason: &str) -> f64 {
        self.total("ufrag_relay_drops_total", &format!("reason=\"{reason}\""))
    }

    /// Waits (bounded) until `f` holds for the metrics, which workers publish every 50 ms.
    pub fn wait_for(&self, what: &str, f: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if f(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "timed out waiting for {what}; metrics:\n{:#?}",
            self.metrics()
                .into_iter()
                .filter(|(_, v)| *v != 0.0)
                .collect::<Vec<_>>()
        );
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for exit; returns the exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "relay did not exit within {WAIT:?}; log:\n{}",
            self.log_text()
        );
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A minimal HTTP/1.0 GET; `(status, body)`.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: relay\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// A UDP endpoint with a receive timeout.
pub struct Endpoint {
    pub socket: UdpSocket,
}

impl Endpoint {
    pub fn bind(ip: std::net::Ipv4Addr) -> Endpoint {
        let socket = UdpSocket::bind((ip, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        Endpoint { socket }
    }

    pub fn addr(&self) -> SocketAddr {
        self.socket.local_addr().unwrap()
    }

    pub fn send(&self, to: SocketAddr, data: &[u8]) {
        self.socket.send_to(data, to).unwrap();
    }

    /// The next datagram within the timeout.
    pub fn recv(&self) -> Option<(Vec<u8>, SocketAddr)> {
        let mut buf = [0u8; 4096];
        let (n, from) = self.socket.recv_from(&mut buf).ok()?;
        Some((buf[..n].to_vec(), from))
    }

    /// Receives one frame and splits it.
    pub fn recv_frame(&self) -> Option<(FrameHeader, Vec<u8>, SocketAddr)> {
        let (data, from) = self.recv()?;
        let (header, payload) = FrameHeader::parse(&data).expect("relay sends valid frames");
        Some((header, payload.to_vec(), from))
    }

    /// Sends `payload` framed for `client` via `vip` to the relay's internal address.
    pub fn send_frame(
        &self,
        relay_internal: SocketAddr,
        client: SocketAddr,
        vip: SocketAddr,
        payload: &[u8],
    ) {
        let h = FrameHeader::new(client, vip);
        let mut f = vec![0u8; h.encoded_len()];
        h.emit(&mut f).unwrap();
        f.extend_from_slice(payload);
        self.send(relay_internal, &f);
    }

    /// Drains anything waiting (short timeout) and returns how many datagrams arrived.
    pub fn count_arrivals(&self) -> usize {
        let mut n = 0;
        while self.recv().is_some() {
            n += 1;
        }
        n
    }
}

/// A Binding Request for a session on `transceiver` (cluster `cluster`), as a browser
/// sends it, with random bits `seed`.
pub fn binding_request_for(transceiver: SocketAddr, cluster: u16, seed: u8) -> Vec<u8> {
    binding_request_with(&keys(), transceiver, cluster, seed)
}

pub fn binding_request_with(
    keys: &HintKeys,
    transceiver: SocketAddr,
    cluster: u16,
    seed: u8,
) -> Vec<u8> {
    let ufrag = keys.encode(
        &RoutingHint {
            cluster,
            transceiver,
        },
        [seed; 6],
    );
    let password = keys
        .ice_password(keys.current().id(), ufrag.as_bytes())
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stun::write_binding_request(
        &mut buf,
        &[seed; 12],
        ufrag.as_bytes(),
        b"c1i3",
        password.as_bytes(),
    )
    .unwrap();
    buf[..n].to_vec()
}

/// An SRTP-like datagram (RTP version 2 header, 160 bytes of payload) with sequence `seq`.
pub fn rtp(seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 111];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[0; 8]);
    p.extend(std::iter::repeat_n(0xAB, 160));
    p
}

/// A DTLS-like record (ClientHello content type 22).
pub fn dtls() -> Vec<u8> {
    let mut p = vec![22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 1, 0, 4];
    p.extend_from_slice(&[1, 0, 0, 0]);
    p
}

#[path = "redis.rs"]
mod redis;
pub use redis::RedisServer;

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_at(unique_ip())
    }
}
