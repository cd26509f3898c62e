//! Paced load and a measuring sink.
//!
//! Each datagram is 200 bytes and starts like RTP (first byte 0x80, so a relay forwards
//! it on an existing flow), followed by a sequence number and the send time in
//! nanoseconds since a shared epoch; the sink, in the same process, reads the time back
//! for one-way latency, against the kernel's receive time of the datagram
//! (`stamped`). The generator paces in 0.5 ms slices and sends what is due with
//! `sendmmsg`, a batch of up to 64 per client socket at a time.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};
use ufrag_common::bundle::Bundle;
use ufrag_common::frame::FrameHeader;
use ufrag_udp::{BATCH, RecvBatch, SendBatch, bind_udp};

mod flows;
mod stamped;
pub mod target;
mod trial;

pub(crate) use flows::last_octet;
pub use flows::{
    FlowPlan, FlowPlanError, checksum, ipv4_udp_packet, ipv6_udp_packet, make_flows, send_raw,
    udp_packet,
};
pub use trial::{CDF_QUANTILES, Latency, Trial};

/// Size of every generated datagram.
pub const DATAGRAM_LEN: usize = 200;
/// Loss above this fraction fails a trial.
pub const LOSS_FREE: f64 = 0.001;

/// A trial whose generator sent more than this share slower than offered did not offer
/// its load ([`Trial::generator_bound`]): the generator could not keep pace.
pub const SHORTFALL: f64 = 0.05;

/// Whether a generator that sent at `sent_pps` fell more than [`SHORTFALL`] short of
/// `offered_pps`.
pub fn fell_short(sent_pps: u64, offered_pps: u64) -> bool {
    (sent_pps as f64) < (1.0 - SHORTFALL) * offered_pps as f64
}

/// A UDP socket bound to `addr` in namespace `ns` (`None`: this one), with the relay's
/// large buffers.
pub fn bind_in(ns: Option<&str>, addr: SocketAddr) -> std::io::Result<UdpSocket> {
    ufrag_testbed::netns::in_netns(ns, move || bind_udp(addr, false))?
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
    /// Listens on `addr`. `framed`: datagrams carry a relay frame header to skip (or are
    /// a relay's bundle of frames, each counted).
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
                stamped::receive_stamped(socket, &stopping, epoch, |datagram, arrived| {
                    let mut s = shared.lock().expect("sink state");
                    let mut record = |payload: &[u8]| {
                        let Some(sent) = payload.get(4..12) else {
                            return;
                        };
                        if payload.first() != Some(&0x80) {
                            return; // a forwarded Binding Request during setup
                        }
                        let sent = u64::from_be_bytes(sent.try_into().expect("8 bytes"));
                        s.received += 1;
                        let _ = s.latency_ns.record(arrived.saturating_sub(sent).max(1_000));
                    };
                    if !framed {
                        record(datagram);
                    } else if let Ok(frames) = Bundle::parse(datagram) {
                        // A relay's bundle: each frame's datagram on its own.
                        frames
                            .filter_map(|f| FrameHeader::parse(f).ok())
                            .for_each(|(_, payload)| record(payload));
                    } else if let Ok((_, payload)) = FrameHeader::parse(datagram) {
                        record(payload);
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
    /// them if fewer), in the plan's order: dealt round every client address.
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
        let clients = ufrag_testbed::netns::in_netns(ns, move || {
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
    ufrag_testbed::netns::in_netns(ns, || {
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

/// The load tools' CPU when not [`LOAD_CPU`]: a lab agent's first `--cpus`.
static TOOLS_CPU: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Makes `cpu` this process's load tools' CPU in place of [`LOAD_CPU`] (once; a later
/// call changes nothing).
pub fn set_load_cpu(cpu: usize) {
    let _ = TOOLS_CPU.set(cpu);
}

/// The load tools' CPU: [`LOAD_CPU`], or what [`set_load_cpu`] made it.
pub fn load_cpu() -> usize {
    TOOLS_CPU.get().copied().unwrap_or(LOAD_CPU)
}

/// Pins the calling thread to the load tools' CPU.
pub fn pin_to_load_cpu() {
    let _ = core_affinity::set_for_current(core_affinity::CoreId { id: load_cpu() });
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
}
