//! Paced load and a measuring sink.
//!
//! Each datagram is 200 bytes and starts like RTP (first byte 0x80, so a relay forwards
//! it on an existing flow), followed by a sequence number and the send time in
//! nanoseconds since a shared epoch; the sink, in the same process, reads the time back
//! for one-way latency. The generator paces in 0.5 ms slices and sends what is due with
//! `sendmmsg`, a batch of up to 64 per client socket at a time.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};
use ufrag_common::frame::FrameHeader;
use ufrag_udp::{BATCH, RecvBatch, SendBatch, bind_udp};

/// Size of every generated datagram.
pub const DATAGRAM_LEN: usize = 200;
/// Loss above this fraction fails a trial.
pub const LOSS_FREE: f64 = 0.001;

/// A UDP socket bound to `addr` in namespace `ns` (`None`: this one), with the relay's
/// large buffers.
pub fn bind_in(ns: Option<&str>, addr: SocketAddr) -> std::io::Result<UdpSocket> {
    testkit::netns::in_netns(ns, move || bind_udp(addr, false))?
}

/// Until `stopping` is set: waits (at most 20 ms) for `socket` to be readable, then reads
/// it a `recvmmsg` batch at a time until it has nothing, handing each batch to `each`
/// (the batch, how many datagrams it holds, the socket's fd). The receive loop of the
/// sink and the bare forwarder.
pub fn receive_batches(
    socket: UdpSocket,
    stopping: &AtomicBool,
    mut each: impl FnMut(&RecvBatch, usize, std::os::fd::RawFd),
) {
    let mut socket = mio::net::UdpSocket::from_std(socket);
    let mut poll = Poll::new().expect("epoll");
    poll.registry()
        .register(&mut socket, Token(0), Interest::READABLE)
        .expect("register");
    let mut events = Events::with_capacity(8);
    let mut recv = RecvBatch::new();
    let fd = socket.as_raw_fd();
    while !stopping.load(Ordering::Relaxed) {
        let _ = poll.poll(&mut events, Some(Duration::from_millis(20)));
        while let Ok(n @ 1..) = recv.recv(fd) {
            each(&recv, n, fd);
        }
    }
}

/// What arrived at the sink during one trial.
#[derive(Debug)]
struct SinkState {
    received: u64,
    latency_ns: Histogram<u64>,
}

/// A UDP sink that counts datagrams and records their one-way latency.
#[derive(Debug)]
pub struct Sink {
    addr: SocketAddr,
    state: Arc<Mutex<SinkState>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 10_000_000_000, 3).expect("valid histogram bounds")
}

impl Sink {
    /// Listens on `addr`. `framed`: datagrams carry a relay frame header to skip.
    pub fn start(addr: SocketAddr, framed: bool, epoch: Instant) -> std::io::Result<Self> {
        Self::start_in(None, addr, framed, epoch)
    }

    /// Like [`Sink::start`], with the socket in network namespace `ns`.
    pub fn start_in(
        ns: Option<&str>,
        addr: SocketAddr,
        framed: bool,
        epoch: Instant,
    ) -> std::io::Result<Self> {
        let socket = bind_in(ns, addr)?;
        let addr = socket.local_addr()?;
        let state = Arc::new(Mutex::new(SinkState {
            received: 0,
            latency_ns: new_histogram(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopping) = (Arc::clone(&state), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("sink".into())
            .spawn(move || {
                pin_to_load_cpu();
                receive_batches(socket, &stopping, |recv, n, _| {
                    let now = epoch.elapsed().as_nanos() as u64;
                    let mut s = shared.lock().expect("sink state");
                    for i in 0..n {
                        let Some(d) = recv.get(i) else { continue };
                        let payload = if framed {
                            match FrameHeader::parse(d.data) {
                                Ok((_, p)) => p,
                                Err(_) => continue,
                            }
                        } else {
                            d.data
                        };
                        let Some(sent) = payload.get(4..12) else {
                            continue;
                        };
                        if payload.first() != Some(&0x80) {
                            continue; // a forwarded Binding Request during setup
                        }
                        let sent = u64::from_be_bytes(sent.try_into().expect("8 bytes"));
                        s.received += 1;
                        let _ = s.latency_ns.record(now.saturating_sub(sent).max(1_000));
                    }
                });
            })?;
        Ok(Sink {
            addr,
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// The sink's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Clears the counters for a new trial.
    pub fn reset(&self) {
        let mut s = self.state.lock().expect("sink state");
        s.received = 0;
        s.latency_ns.reset();
    }

    /// What arrived since the last reset (count, latency histogram), resetting both.
    pub fn take(&self) -> (u64, Histogram<u64>) {
        let mut s = self.state.lock().expect("sink state");
        let h = std::mem::replace(&mut s.latency_ns, new_histogram());
        (std::mem::take(&mut s.received), h)
    }

    /// Datagrams seen since the last reset (any kind).
    pub fn received(&self) -> u64 {
        self.state.lock().expect("sink state").received
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The client addresses of `flows` flows: ports `first_port`… on one address, then on
/// the next (consecutive last octets), at most `ports_per_addr` ports each. Flow `f` is
/// `addr(f)`; the live-frames generator stamps the same address into its `f`-th frame of
/// every cycle, so the socket that made flow `f` and the frames that load it agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowPlan {
    /// The first client address (IPv4 or IPv6).
    pub first_ip: IpAddr,
    /// The first source port on every address.
    pub first_port: u16,
    /// Ports per address.
    pub ports_per_addr: u32,
    /// Flows in all.
    pub flows: u32,
}

/// Why a flow plan cannot be laid out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlowPlanError {
    /// No flows, or no ports per address.
    #[error("a flow plan needs at least one flow and one port per address")]
    Empty,
    /// The ports run past 65535.
    #[error("ports {first}..{first}+{per_addr} run past 65535")]
    Ports {
        /// The first port.
        first: u16,
        /// Ports per address.
        per_addr: u32,
    },
    /// The addresses run past the last octet 254.
    #[error("{needed} addresses from {first} run past .254")]
    Addresses {
        /// The first address.
        first: IpAddr,
        /// Addresses needed.
        needed: u32,
    },
}

impl FlowPlan {
    /// `flows` flows from `first_ip`:`first_port` on, `ports_per_addr` per address.
    pub fn new(
        first_ip: impl Into<IpAddr>,
        first_port: u16,
        ports_per_addr: u32,
        flows: u32,
    ) -> Result<Self, FlowPlanError> {
        let first_ip = first_ip.into();
        if flows == 0 || ports_per_addr == 0 || first_port == 0 {
            return Err(FlowPlanError::Empty);
        }
        let ports_per_addr = ports_per_addr.min(flows);
        if u32::from(first_port) + ports_per_addr > 65_536 {
            return Err(FlowPlanError::Ports {
                first: first_port,
                per_addr: ports_per_addr,
            });
        }
        let plan = FlowPlan {
            first_ip,
            first_port,
            ports_per_addr,
            flows,
        };
        if u32::from(last_octet(first_ip)) + plan.addresses() > 255 {
            return Err(FlowPlanError::Addresses {
                first: first_ip,
                needed: plan.addresses(),
            });
        }
        Ok(plan)
    }

    /// How many client addresses the flows use.
    pub fn addresses(&self) -> u32 {
        self.flows.div_ceil(self.ports_per_addr)
    }

    /// The `i`-th client address: the first with its last octet `i` up.
    pub fn ip(&self, i: u32) -> IpAddr {
        match self.first_ip {
            IpAddr::V4(v4) => {
                let mut o = v4.octets();
                o[3] += i as u8;
                IpAddr::from(o)
            }
            IpAddr::V6(v6) => {
                let mut o = v6.octets();
                o[15] += i as u8;
                IpAddr::from(o)
            }
        }
    }

    /// Flow `f`'s client address (`f` < `flows`).
    pub fn addr(&self, f: u32) -> SocketAddr {
        SocketAddr::new(
            self.ip(f / self.ports_per_addr),
            self.first_port + (f % self.ports_per_addr) as u16,
        )
    }

    /// Whether the flows are IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.first_ip.is_ipv6()
    }
}

/// An address's last octet (what a plan counts its addresses up in).
pub(crate) fn last_octet(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(v4) => v4.octets()[3],
        IpAddr::V6(v6) => v6.octets()[15],
    }
}

/// Sends `datagram(f)` from each flow `f` of `plan` to `to` once, at most `per_second`
/// a second, from one raw socket of the plan's family in namespace `ns` (so no flow needs
/// a socket of its own and 100k flows fit the open-file limit; the client addresses must
/// be on the namespace's interface, so that whatever answers reaches a real host).
pub fn make_flows(
    ns: Option<&str>,
    plan: &FlowPlan,
    to: SocketAddr,
    per_second: u32,
    datagram: impl Fn(u32) -> Vec<u8>,
) -> std::io::Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if to.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let raw = testkit::netns::in_netns(ns, move || {
        // IPPROTO_RAW: the packets carry their own IP header (IP_HDRINCL, and for IPv6
        // the kernel sets it for IPPROTO_RAW alike).
        Socket::new(domain, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))
    })??;
    // Port 0: an IPv6 raw socket reads a destination port as a protocol number.
    let dest = socket2::SockAddr::from(SocketAddr::new(to.ip(), 0));
    let start = Instant::now();
    for f in 0..plan.flows {
        let due = start + Duration::from_secs_f64(f64::from(f) / f64::from(per_second.max(1)));
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let packet = udp_packet(plan.addr(f), to, &datagram(f));
        if let Err(e) = raw.send_to(&packet, &dest) {
            // A full send buffer: wait a little and try once more.
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(1));
            raw.send_to(&packet, &dest)?;
        }
    }
    Ok(())
}

/// An IP header and a UDP header in front of `payload`: [`ipv4_udp_packet`] or
/// [`ipv6_udp_packet`], by the addresses' family (which must agree).
pub fn udp_packet(from: SocketAddr, to: SocketAddr, payload: &[u8]) -> Vec<u8> {
    match (from, to) {
        (SocketAddr::V4(f), SocketAddr::V4(t)) => ipv4_udp_packet(f, t, payload),
        (SocketAddr::V6(f), SocketAddr::V6(t)) => {
            ipv6_udp_packet(*f.ip(), *t.ip(), (f.port(), t.port()), payload)
        }
        _ => panic!("{from} → {to}: one family"),
    }
}

/// An IPv6 header (hop limit 64) and a UDP header with its checksum (mandatory in IPv6,
/// over the pseudo-header) in front of `payload`.
pub fn ipv6_udp_packet(
    from: std::net::Ipv6Addr,
    to: std::net::Ipv6Addr,
    (from_port, to_port): (u16, u16),
    payload: &[u8],
) -> Vec<u8> {
    let udp_len = (8 + payload.len()) as u16;
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&from.octets());
    p.extend_from_slice(&to.octets());
    p.extend_from_slice(&from_port.to_be_bytes());
    p.extend_from_slice(&to_port.to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    let mut pseudo = Vec::with_capacity(40 + p.len());
    pseudo.extend_from_slice(&from.octets());
    pseudo.extend_from_slice(&to.octets());
    pseudo.extend_from_slice(&u32::from(udp_len).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    pseudo.extend_from_slice(&p[40..]);
    let sum = match crate::xdp::checksum(&pseudo) {
        0 => 0xffff, // 0 means "no checksum", which IPv6 forbids
        s => s,
    };
    p[46..48].copy_from_slice(&sum.to_be_bytes());
    p
}

/// An IPv4 header (checksummed, DF, TTL 64) and a UDP header (checksum 0: none, which
/// IPv4 allows) in front of `payload`.
pub fn ipv4_udp_packet(from: SocketAddrV4, to: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let total = (20 + 8 + payload.len()) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    p.extend_from_slice(&from.ip().octets());
    p.extend_from_slice(&to.ip().octets());
    let sum = crate::xdp::checksum(&p);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(&from.port().to_be_bytes());
    p.extend_from_slice(&to.port().to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

/// Client sockets that send paced load (one socket per flow; one send batch they take
/// turns with, so a socket costs no buffers of its own and 100k flows fit).
#[derive(Debug)]
pub struct Generator {
    clients: Vec<UdpSocket>,
    batch: SendBatch,
    epoch: Instant,
    seq: u16,
    payload_len: usize,
}

/// The outcome of one trial.
#[derive(Clone, Copy, Debug)]
pub struct Trial {
    /// Target rate.
    pub offered_pps: u64,
    /// Rate the generator achieved.
    pub sent_pps: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams received.
    pub received: u64,
    /// One-way latency of the sampled datagrams.
    pub latency: Latency,
}

impl Trial {
    /// A trial that offered and carried nothing: the place of a row's latency trial
    /// before `perf compare --interleave` reaches its last round and takes it.
    pub const NONE: Trial = Trial {
        offered_pps: 0,
        sent_pps: 0,
        sent: 0,
        received: 0,
        latency: Latency {
            samples: 0,
            cdf_us: [0.0; CDF_QUANTILES.len()],
        },
    };
}

/// The quantiles a [`Latency`] keeps: its CDF, from the 1st percentile to the maximum.
pub const CDF_QUANTILES: [f64; 8] = [0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0];

/// One-way latency of a trial's sampled datagrams: how many were sampled, and the
/// latency at each of [`CDF_QUANTILES`] (µs). No samples: all zero.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Datagrams whose latency was recorded (a tail quantile from few samples is a
    /// handful of datagrams: p99.9 of 5,000 is the 5th worst).
    pub samples: u64,
    /// Latency at each of [`CDF_QUANTILES`], µs.
    pub cdf_us: [f64; CDF_QUANTILES.len()],
}

impl Latency {
    /// From a histogram of nanoseconds.
    pub fn from_histogram(latency_ns: &Histogram<u64>) -> Latency {
        if latency_ns.is_empty() {
            return Latency::default();
        }
        Latency {
            samples: latency_ns.len(),
            cdf_us: CDF_QUANTILES.map(|q| latency_ns.value_at_quantile(q) as f64 / 1_000.0),
        }
    }

    /// The latency at quantile `q`, which must be one of [`CDF_QUANTILES`].
    pub fn at(&self, q: f64) -> f64 {
        let i = CDF_QUANTILES
            .iter()
            .position(|&k| k == q)
            .expect("one of CDF_QUANTILES");
        self.cdf_us[i]
    }

    /// The median, µs.
    pub fn p50(&self) -> f64 {
        self.at(0.5)
    }

    /// The 99th percentile, µs.
    pub fn p99(&self) -> f64 {
        self.at(0.99)
    }

    /// The 99.9th percentile, µs.
    pub fn p999(&self) -> f64 {
        self.at(0.999)
    }
}

impl Trial {
    /// A trial at `offered_pps` that sent `sent` in `seconds`, of which `received`
    /// arrived; latency from `latency_ns` (which may hold a sample of them).
    pub fn from_counts(
        offered_pps: u64,
        sent: u64,
        seconds: f64,
        received: u64,
        latency_ns: &Histogram<u64>,
    ) -> Trial {
        Trial {
            offered_pps,
            sent_pps: (sent as f64 / seconds.max(1e-9)) as u64,
            sent,
            received,
            latency: Latency::from_histogram(latency_ns),
        }
    }

    /// Fraction lost.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        (self.sent.saturating_sub(self.received)) as f64 / self.sent as f64
    }

    /// True when loss is under 0.1 %.
    pub fn loss_free(&self) -> bool {
        self.loss() < LOSS_FREE
    }

    /// True when the generator fell short of the target rate by more than 5 %: then the
    /// generator, not the system under test, was the limit.
    pub fn generator_bound(&self) -> bool {
        (self.sent_pps as f64) < 0.95 * self.offered_pps as f64
    }
}

impl Generator {
    /// `clients` sockets on `ip` (distinct source ports: distinct flows).
    pub fn new(ip: Ipv4Addr, clients: usize, epoch: Instant) -> std::io::Result<Self> {
        Self::new_in(None, ip, clients, epoch)
    }

    /// Like [`Generator::new`], with the sockets in network namespace `ns`.
    pub fn new_in(
        ns: Option<&str>,
        ip: Ipv4Addr,
        clients: usize,
        epoch: Instant,
    ) -> std::io::Result<Self> {
        Self::bound_in(ns, ip, 0, clients, epoch)
    }

    /// Like [`Generator::new_in`], on ports `first_port` to `first_port + clients - 1`
    /// (0: any), so that frames another tool sends from those ports belong to the flows
    /// these sockets make.
    pub fn bound_in(
        ns: Option<&str>,
        ip: Ipv4Addr,
        first_port: u16,
        clients: usize,
        epoch: Instant,
    ) -> std::io::Result<Self> {
        let addrs = (0..clients)
            .map(|i| {
                let port = if first_port == 0 {
                    0
                } else {
                    first_port + i as u16
                };
                SocketAddr::from((ip, port))
            })
            .collect();
        Self::on_addrs(ns, addrs, epoch)
    }

    /// One socket on each of the first `sockets` of `plan`'s flow addresses (all of
    /// them if fewer), in the plan's order.
    pub fn for_flows(
        ns: Option<&str>,
        plan: &FlowPlan,
        sockets: u32,
        epoch: Instant,
    ) -> std::io::Result<Self> {
        let addrs = (0..plan.flows.min(sockets)).map(|f| plan.addr(f));
        Self::on_addrs(ns, addrs.collect(), epoch)
    }

    fn on_addrs(ns: Option<&str>, addrs: Vec<SocketAddr>, epoch: Instant) -> std::io::Result<Self> {
        let ipv6 = addrs.first().is_some_and(SocketAddr::is_ipv6);
        let clients = testkit::netns::in_netns(ns, move || {
            addrs
                .into_iter()
                .map(|a| bind_udp(a, false))
                .collect::<std::io::Result<Vec<_>>>()
        })??;
        Ok(Generator {
            clients,
            batch: SendBatch::new(ipv6),
            epoch,
            seq: 0,
            payload_len: DATAGRAM_LEN,
        })
    }

    /// Sends `len`-byte datagrams (at least 12) instead of [`DATAGRAM_LEN`].
    pub fn with_payload_len(mut self, len: usize) -> Self {
        self.payload_len = len.max(12);
        self
    }

    /// Each client sends `datagram(i)` once to `to` (e.g. the Binding Request that makes
    /// its flow), at most `per_second` of them a second (so a relay's socket buffer, and
    /// its new-flow limits, see them as a stream, not one burst).
    pub fn send_each(
        &self,
        to: SocketAddr,
        per_second: u32,
        datagram: impl Fn(usize, SocketAddr) -> Vec<u8>,
    ) -> std::io::Result<()> {
        let start = Instant::now();
        for (i, s) in self.clients.iter().enumerate() {
            let due = start + Duration::from_secs_f64(i as f64 / f64::from(per_second.max(1)));
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            s.send_to(&datagram(i, s.local_addr()?), to)?;
        }
        Ok(())
    }

    /// Sends at `rate_pps` to `to` for `duration`, spread over the clients, then waits
    /// `settle` for stragglers and reads the sink.
    pub fn trial(
        &mut self,
        to: SocketAddr,
        rate_pps: u64,
        duration: Duration,
        settle: Duration,
        sink: &Sink,
    ) -> Trial {
        sink.reset();
        let (sent, elapsed) = self.send_paced(to, rate_pps, duration);
        std::thread::sleep(settle);
        let (received, h) = sink.take();
        Trial::from_counts(rate_pps, sent, elapsed, received, &h)
    }

    /// Sends at `rate_pps` to `to` for `duration`, spread over the clients; returns
    /// (datagrams sent, seconds it took).
    pub fn send_paced(&mut self, to: SocketAddr, rate_pps: u64, duration: Duration) -> (u64, f64) {
        let mut payload = vec![0u8; self.payload_len];
        payload[0] = 0x80;
        payload[1] = 111;
        let start = Instant::now();
        let total = (rate_pps as f64 * duration.as_secs_f64()) as u64;
        let mut sent = 0u64;
        let mut next = 0usize;
        while sent < total {
            let elapsed = start.elapsed();
            let due = ((rate_pps as f64 * elapsed.as_secs_f64()) as u64).min(total);
            // What is due goes out in bursts of up to a whole batch per client, so one
            // `sendmmsg` carries many datagrams; the clients take turns burst by burst.
            while sent < due {
                let socket = &self.clients[next];
                let burst = (due - sent).min(BATCH as u64);
                for _ in 0..burst {
                    self.seq = self.seq.wrapping_add(1);
                    payload[2..4].copy_from_slice(&self.seq.to_be_bytes());
                    let now = self.epoch.elapsed().as_nanos() as u64;
                    payload[4..12].copy_from_slice(&now.to_be_bytes());
                    let _ = self.batch.push(to, &[], &payload, ());
                }
                let flushed = self.batch.flush(socket.as_raw_fd(), |(), _| {});
                // Datagrams the generator's own socket refused were never offered.
                sent += flushed.sent as u64;
                next = (next + 1) % self.clients.len();
                if flushed.sent == 0 {
                    break; // the sender's buffer is full: let the slice end
                }
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        (sent, start.elapsed().as_secs_f64())
    }
}

/// What a search drives: one trial at a rate.
pub trait Load {
    /// Offers `rate_pps` for `duration` and counts what arrived.
    fn trial(&mut self, rate_pps: u64, duration: Duration) -> Trial;

    /// The trial whose latency the report shows (by default, an ordinary trial).
    fn latency_trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.trial(rate_pps, duration)
    }
}

/// The socket generator and sink: `sendmmsg` load to `to`, counted by a UDP socket.
#[derive(Debug)]
pub struct SocketLoad<'a> {
    /// The sender.
    pub generator: &'a mut Generator,
    /// The receiver.
    pub sink: &'a Sink,
    /// Where the load goes.
    pub to: SocketAddr,
    /// How long to wait for stragglers.
    pub settle: Duration,
}

impl Load for SocketLoad<'_> {
    fn trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.generator
            .trial(self.to, rate_pps, duration, self.settle, self.sink)
    }
}

/// The kernel's count of UDP datagrams dropped because a socket's receive buffer was
/// full (`Udp: RcvbufErrors` of `/proc/net/snmp`) in namespace `ns`; 0 if unreadable.
pub fn udp_receive_buffer_drops(ns: Option<&str>) -> u64 {
    testkit::netns::in_netns(ns, || {
        std::fs::read_to_string("/proc/thread-self/net/snmp")
            .map_or(0, |t| snmp_field(&t, "Udp:", "RcvbufErrors"))
    })
    .unwrap_or(0)
}

/// Field `field` of the `/proc/net/snmp` table whose lines start with `table` (a line
/// of names, then a line of values).
fn snmp_field(text: &str, table: &str, field: &str) -> u64 {
    let mut lines = text.lines().filter(|l| l.starts_with(table));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == field)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The CPU the load tools (generator and sink) run on; forwarders get the others.
pub const LOAD_CPU: usize = 0;

/// Pins the calling thread to the load tools' CPU.
pub fn pin_to_load_cpu() {
    let _ = core_affinity::set_for_current(core_affinity::CoreId { id: LOAD_CPU });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_snmp_field_is_read_from_its_table() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                    Udp: 10 2 7 9 5\nUdpLite: InDatagrams RcvbufErrors\nUdpLite: 0 99\n";
        assert_eq!(snmp_field(text, "Udp:", "RcvbufErrors"), 5);
        assert_eq!(snmp_field(text, "Udp:", "NoPorts"), 2);
        assert_eq!(snmp_field(text, "Udp:", "Missing"), 0);
    }

    #[test]
    fn a_flow_plan_fills_one_address_then_the_next() {
        let ip = Ipv4Addr::new(10, 77, 0, 100);
        let plan = FlowPlan::new(ip, 20_000, 40_000, 100_000).unwrap();
        assert_eq!(plan.addresses(), 3);
        assert_eq!(plan.addr(0), SocketAddr::from((ip, 20_000)));
        assert_eq!(plan.addr(39_999), SocketAddr::from((ip, 59_999)));
        assert_eq!(
            plan.addr(40_000),
            SocketAddr::from((Ipv4Addr::new(10, 77, 0, 101), 20_000))
        );
        assert_eq!(
            plan.addr(99_999),
            SocketAddr::from((Ipv4Addr::new(10, 77, 0, 102), 39_999))
        );
        let few = FlowPlan::new(ip, 20_000, 40_000, 32).unwrap();
        assert_eq!((few.addresses(), few.ports_per_addr), (1, 32));
        // IPv6 plans count up the last octet the same way.
        let v6: std::net::Ipv6Addr = "fd77::1".parse().unwrap();
        let plan6 = FlowPlan::new(v6, 20_000, 10, 15).unwrap();
        assert!(plan6.is_ipv6());
        assert_eq!(
            plan6.addr(12),
            "[fd77::2]:20002".parse::<SocketAddr>().unwrap()
        );
    }

    #[test]
    fn a_flow_plan_that_does_not_fit_is_refused() {
        let ip = Ipv4Addr::new(10, 77, 0, 250);
        assert_eq!(FlowPlan::new(ip, 20_000, 1, 0), Err(FlowPlanError::Empty));
        assert!(matches!(
            FlowPlan::new(ip, 60_000, 10_000, 10_000),
            Err(FlowPlanError::Ports { .. })
        ));
        assert!(matches!(
            FlowPlan::new(ip, 20_000, 1_000, 10_000),
            Err(FlowPlanError::Addresses { needed: 10, .. })
        ));
        assert!(FlowPlan::new(ip, 20_000, 1_000, 5_000).is_ok(), "250..=254");
    }

    #[test]
    fn loss_is_computed_from_sent_and_received() {
        let t = Trial {
            offered_pps: 1000,
            sent_pps: 1000,
            sent: 10_000,
            received: 9_990,
            latency: Latency::default(),
        };
        assert!((t.loss() - 0.001).abs() < 1e-12);
        assert!(!t.loss_free(), "0.1 % is not under 0.1 %");
    }
}
