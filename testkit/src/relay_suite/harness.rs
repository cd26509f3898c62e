//! The suite's harness: a relay binary run as a child process, fake transceivers built
//! from `common`'s frame codec, clients sending STUN built the way browsers do, metrics
//! read over HTTP, and a private `redis-server`.
//!
//! Where hosts live is the [`Backend`]'s [`Place`]:
//! - **loopback**: everything binds to a random 127.x.y.z address of its own, so tests
//!   run in parallel (and two runs never collide);
//! - **the netns testbed** (root): each test gets its own testbed (`crate::testbed`);
//!   clients live in the client namespace, fake transceivers in the transceiver
//!   namespace, the relay (and a second one for global mode) in its own. A backend with
//!   an XDP mode also gets `--interface <relay's veth> --xdp-mode <mode>`.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::{HintKeys, RoutingHint};
use ufrag_common::stun;

use super::{Backend, Place};
use crate::OwnedChild;
pub use crate::addr::{free_tcp_port, unique_ip};
pub use crate::keys::{KEY_HEX, KEYS, keys};
use crate::netns::in_netns;
pub use crate::redis::RedisServer;
use crate::testbed::{Host, Testbed, TestbedOptions};

/// How long any wait in the suite may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// The network a test's hosts live on.
#[derive(Clone, Debug)]
pub struct Net {
    backend: Backend,
    bed: Option<Arc<Testbed>>,
    relay_ips: [Ipv4Addr; 2],
    transceiver_ip: Ipv4Addr,
}

impl Net {
    /// A network for one test of `backend`: loopback addresses, or a fresh testbed with
    /// `queues` RX queues on the relays' interfaces.
    pub(super) fn new(backend: &Backend, queues: u32) -> Net {
        if backend.place == Place::Testbed {
            let bed = Testbed::up_with(TestbedOptions {
                queues,
                second_relay: true,
            })
            .expect("the testbed needs root; CI runs as root");
            Net {
                backend: backend.clone(),
                relay_ips: [bed.relay.addr, bed.relay2.as_ref().expect("asked for").addr],
                transceiver_ip: bed.transceiver.addr,
                bed: Some(Arc::new(bed)),
            }
        } else {
            Net {
                backend: backend.clone(),
                bed: None,
                relay_ips: [unique_ip(), unique_ip()],
                transceiver_ip: unique_ip(),
            }
        }
    }

    /// The address of relay host `n` (0 or 1).
    pub fn relay_ip(&self, n: usize) -> Ipv4Addr {
        self.relay_ips[n]
    }

    fn relay_host(&self, n: usize) -> Option<&Host> {
        let bed = self.bed.as_ref()?;
        Some(if n == 0 {
            &bed.relay
        } else {
            bed.relay2.as_ref().expect("second relay host")
        })
    }

    /// Every address the transceivers use.
    pub fn transceiver_ip(&self) -> Ipv4Addr {
        self.transceiver_ip
    }

    /// The networks relays should accept transceivers from by default.
    pub fn transceiver_nets(&self) -> String {
        if self.bed.is_some() {
            "10.77.0.0/24".into()
        } else {
            "127.0.0.0/8".into()
        }
    }

    /// An address no host of this network has.
    pub fn unused_ip(&self) -> Ipv4Addr {
        if self.bed.is_some() {
            Ipv4Addr::new(10, 77, 0, 254)
        } else {
            Ipv4Addr::new(127, 254, 254, 254)
        }
    }

    /// A client endpoint (its own address on loopback; the client host in the testbed).
    pub fn client(&self) -> Endpoint {
        match &self.bed {
            Some(bed) => Endpoint::bind_in(Some(&bed.client.ns), bed.client.addr),
            None => Endpoint::bind(unique_ip()),
        }
    }

    /// A transceiver endpoint (all on the transceiver address).
    pub fn transceiver(&self) -> Endpoint {
        let ns = self.bed.as_ref().map(|b| b.transceiver.ns.clone());
        Endpoint::bind_in(ns.as_deref(), self.transceiver_ip)
    }

    /// The namespace of the transceiver host, if any (for helpers such as Redis).
    pub fn transceiver_ns(&self) -> Option<String> {
        self.bed.as_ref().map(|b| b.transceiver.ns.clone())
    }
}

/// A relay child process; killed on drop.
#[derive(Debug)]
pub struct RelayProcess {
    pub child: OwnedChild,
    pub vips: Vec<SocketAddr>,
    pub internal: SocketAddr,
    pub metrics: SocketAddr,
    pub log: std::path::PathBuf,
    ns: Option<String>,
    net: Net,
}

/// How to start a relay: flags beyond the ones every test needs.
#[derive(Clone, Debug)]
pub struct RelaySetup {
    pub vips: usize,
    pub workers: usize,
    pub extra: Vec<String>,
    pub net: Net,
    /// Which relay host (0, or 1 for the second relay of global mode).
    pub host: usize,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

impl RelaySetup {
    /// One VIP, one worker, host 0, no extra flags, on `net`.
    pub fn on(net: Net) -> RelaySetup {
        RelaySetup {
            vips: 1,
            workers: 1,
            extra: vec![],
            net,
            host: 0,
            env: vec![],
        }
    }
}

impl RelayProcess {
    pub fn start(setup: &RelaySetup) -> RelayProcess {
        let ip = setup.net.relay_ip(setup.host);
        let host = setup.net.relay_host(setup.host).cloned();
        let vips: Vec<SocketAddr> = (0..setup.vips)
            .map(|i| SocketAddr::from((ip, 3478 + i as u16)))
            .collect();
        let internal = SocketAddr::from((ip, 40_000));
        let metrics = match host {
            Some(_) => SocketAddr::from(([127, 0, 0, 1], 9100)),
            None => SocketAddr::from((ip, free_tcp_port(ip))),
        };
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
        let nets = setup.net.transceiver_nets();
        for (flag, value) in [
            ("--allow-transceiver-net", nets.as_str()),
            ("--drain-time", "300ms"),
        ] {
            if !setup.extra.iter().any(|a| a == flag) {
                args.extend([flag.to_string(), value.to_string()]);
            }
        }
        if let (Some(h), Some(mode)) = (&host, setup.net.backend.xdp) {
            args.extend([
                "--interface".into(),
                h.ifname.clone(),
                "--xdp-mode".into(),
                mode.flag().into(),
            ]);
        }
        args.extend(setup.net.backend.flags.iter().cloned());
        args.extend(setup.extra.iter().cloned());
        let log = std::env::temp_dir().join(format!(
            "relay-{}-{}-{}.log",
            std::process::id(),
            internal.ip(),
            unique_ip()
        ));
        let binary = &setup.net.backend.binary;
        let mut command = match &host {
            Some(h) => h.command(binary.to_str().expect("UTF-8 path")),
            None => Command::new(binary),
        };
        command
            .args(&args)
            .env("UFRAG_RELAY_HINT_KEYS", KEYS)
            .env("UFRAG_ALLOW_EXAMPLE_SECRETS", "1")
            .env("RUST_LOG", "info")
            .envs(setup.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = OwnedChild::spawn(&mut command).expect("relay binary starts");
        let relay = RelayProcess {
            child,
            vips,
            internal,
            metrics,
            log,
            ns: host.map(|h| h.ns),
            net: setup.net.clone(),
        };
        relay.wait_ready();
        relay
    }

    pub fn vip(&self) -> SocketAddr {
        self.vips[0]
    }

    /// The network this relay lives on.
    pub fn net(&self) -> &Net {
        &self.net
    }

    /// The internal address of worker `i`.
    pub fn internal_of(&self, worker: usize) -> SocketAddr {
        SocketAddr::new(self.internal.ip(), self.internal.port() + worker as u16)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GETs a path of the relay's HTTP endpoint (inside its namespace in the testbed).
    pub fn http(&self, path: &str) -> Option<(u16, String)> {
        crate::http::get(self.ns.as_deref(), self.metrics, path)
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Some((200, _)) = self.http("/readyz") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("relay not ready within {WAIT:?}; log:\n{}", self.log_text());
    }

    /// The current metrics as `series → value`.
    pub fn metrics(&self) -> HashMap<String, f64> {
        let (_, body) = self.http("/metrics").expect("metrics endpoint answers");
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
        self.total(
            "ufrag_relay_dropped_datagrams_total",
            &format!("reason=\"{reason}\""),
        )
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
        self.signal("TERM");
    }

    /// Sends signal `name` (`TERM`, `STOP`, `CONT`) to the relay.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
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
        self.child.stop();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// How long a test waits for a datagram that should arrive.
pub const ARRIVAL_WAIT: Duration = Duration::from_secs(3);
/// How long a test listens to confirm that nothing (more) arrives.
pub const QUIET_WAIT: Duration = Duration::from_millis(300);

/// A UDP endpoint with a receive timeout.
#[derive(Debug)]
pub struct Endpoint {
    pub socket: UdpSocket,
}

impl Endpoint {
    pub fn bind(ip: Ipv4Addr) -> Endpoint {
        Self::bind_in(None, ip)
    }

    /// Binds in network namespace `ns` (the socket stays there, whoever uses it).
    pub fn bind_in(ns: Option<&str>, ip: Ipv4Addr) -> Endpoint {
        let socket = in_netns(ns, move || UdpSocket::bind((ip, 0)))
            .unwrap()
            .unwrap();
        socket.set_read_timeout(Some(ARRIVAL_WAIT)).unwrap();
        Endpoint { socket }
    }

    pub fn addr(&self) -> SocketAddr {
        self.socket.local_addr().unwrap()
    }

    pub fn send(&self, to: SocketAddr, data: &[u8]) {
        self.socket.send_to(data, to).unwrap();
    }

    /// The next datagram, waiting at most [`ARRIVAL_WAIT`] (generous: a datagram that
    /// should arrive may be late on a busy machine).
    pub fn recv(&self) -> Option<(Vec<u8>, SocketAddr)> {
        self.recv_within(ARRIVAL_WAIT)
    }

    /// True if nothing arrives within [`QUIET_WAIT`]. Callers first wait for the relay's
    /// counters to show the datagram was handled, so this short wait cannot pass early.
    pub fn nothing_arrives(&self) -> bool {
        self.recv_within(QUIET_WAIT).is_none()
    }

    fn recv_within(&self, wait: Duration) -> Option<(Vec<u8>, SocketAddr)> {
        self.socket.set_read_timeout(Some(wait)).ok()?;
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

    /// Says, as a transceiver does when a session ends, that `client`'s session on `vip`
    /// ended: a frame with the session-ended bit and no datagram.
    pub fn send_session_ended(
        &self,
        relay_internal: SocketAddr,
        client: SocketAddr,
        vip: SocketAddr,
    ) {
        let h = FrameHeader::new(client, vip)
            .on_verified_path(true)
            .ending_session();
        let mut f = vec![0u8; h.encoded_len()];
        h.emit(&mut f).unwrap();
        self.send(relay_internal, &f);
    }

    /// Sends `payload` framed for `client` via `vip` to the relay's internal address.
    pub fn send_frame(
        &self,
        relay_internal: SocketAddr,
        client: SocketAddr,
        vip: SocketAddr,
        payload: &[u8],
    ) {
        // As a transceiver sends on a path that answered its probe.
        let h = FrameHeader::new(client, vip).on_verified_path(true);
        let mut f = vec![0u8; h.encoded_len()];
        h.emit(&mut f).unwrap();
        f.extend_from_slice(payload);
        self.send(relay_internal, &f);
    }

    /// Drains what has arrived (until [`QUIET_WAIT`] passes without a datagram) and
    /// returns how many datagrams there were. Callers first wait for the relay's counters
    /// to show it forwarded them.
    pub fn count_arrivals(&self) -> usize {
        let mut n = 0;
        while self.recv_within(QUIET_WAIT).is_some() {
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
    signed_binding_request(keys, transceiver, cluster, seed, [seed; 12])
}

/// [`binding_request_for`] with its own transaction id: what a holder of the session's
/// credentials can sign as often as it likes.
pub fn binding_request_with_transaction(
    transceiver: SocketAddr,
    cluster: u16,
    seed: u8,
    transaction_id: [u8; 12],
) -> Vec<u8> {
    signed_binding_request(&keys(), transceiver, cluster, seed, transaction_id)
}

/// When this process's hints were minted: once, so that one seed names one session
/// however long the process runs.
fn minted() -> u32 {
    static MINTED: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MINTED.get_or_init(|| ufrag_common::hint::unix_seconds(std::time::SystemTime::now()))
}

fn signed_binding_request(
    keys: &HintKeys,
    transceiver: SocketAddr,
    cluster: u16,
    seed: u8,
    transaction_id: [u8; 12],
) -> Vec<u8> {
    let ufrag = keys.encode(
        &RoutingHint {
            cluster,
            transceiver,
        },
        minted(),
        [seed; 5],
    );
    let password = keys
        .ice_password(keys.current().id(), ufrag.as_bytes())
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stun::write_binding_request(
        &mut buf,
        &transaction_id,
        ufrag.as_bytes(),
        b"c1i3",
        password.as_bytes(),
    )
    .unwrap();
    buf[..n].to_vec()
}

/// An SRTP-like datagram (RTP version 2 header, 160 bytes of payload) with sequence `seq`.
/// Media both ways on `client`'s flow, which proves it to the relay (the client's half
/// alone a spoofer could send blind; a proven flow is recorded in the route cache), then
/// one more datagram from the client. Returns once the transceiver has it.
pub fn prove_flow(relay: &RelayProcess, transceiver: &Endpoint, client: &Endpoint) {
    client.send(relay.vip(), &rtp(0));
    transceiver
        .recv_frame()
        .expect("the client's media forwarded");
    transceiver.send_frame(relay.internal_of(0), client.addr(), relay.vip(), &rtp(1));
    client.recv().expect("the transceiver's media returned");
    client.send(relay.vip(), &rtp(2));
    transceiver
        .recv_frame()
        .expect("the client's next media forwarded");
}

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

impl Net {
    /// A private `redis-server` the relay can reach: on a fresh loopback address, or in
    /// the testbed's transceiver namespace (the relay reaches it across the bridge).
    pub fn redis(&self) -> RedisServer {
        match self.transceiver_ns() {
            None => RedisServer::start_at(unique_ip()),
            Some(_) => self.redis_on(SocketAddr::from((self.transceiver_ip(), 6379))),
        }
    }

    /// A `redis-server` on `addr` (again, after one was killed there).
    pub fn redis_on(&self, addr: SocketAddr) -> RedisServer {
        RedisServer::start_on(addr, self.transceiver_ns().as_deref())
    }
}
