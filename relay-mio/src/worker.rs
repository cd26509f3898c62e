//! One relay worker: pinned to its core, its own `SO_REUSEPORT` socket on every VIP and
//! its own internal socket, a mio event loop, batched receive and send, and the shared
//! forwarding decision. Workers share nothing on the packet path: no locks, no atomics
//! (counters are published every tick), no allocation.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};
use socket2::{Domain, Protocol, Socket, Type};
use ufrag_common::flow::{FlowKey, FlowTable};
use ufrag_common::forward::{ForwardPolicy, Forwarder, Verdict};
use ufrag_common::metrics::{Direction, DropReason, SharedCounters};
use ufrag_common::runtime::cache::CacheClient;

use crate::mmsg::{RecvBatch, SendBatch};

/// How often a worker expires flows and publishes its counters.
pub const TICK: Duration = Duration::from_millis(50);
/// Flows expired per tick at most (bounds the time one tick can take).
pub const EXPIRE_BUDGET: usize = 4096;
/// Receive batches drained per socket per wakeup before the others get a turn.
const BATCHES_PER_WAKEUP: usize = 16;
/// Socket buffers: room for bursts on a 2-core machine.
const SOCKET_BUFFER: usize = 4 << 20;

const INTERNAL: Token = Token(usize::MAX - 1);
const WAKE: Token = Token(usize::MAX - 2);

/// Everything a worker needs, built by `main` before the thread starts.
#[derive(Debug)]
pub struct WorkerSpec {
    /// Worker number (0-based).
    pub index: usize,
    /// CPU to pin to.
    pub cpu: usize,
    /// Public VIPs.
    pub vips: Vec<SocketAddr>,
    /// This worker's internal address.
    pub internal: SocketAddr,
    /// Forwarding policy.
    pub policy: ForwardPolicy,
    /// Flow capacity.
    pub flows: usize,
    /// Idle timeout.
    pub idle_timeout: Duration,
}

/// Creates a non-blocking UDP socket bound to `addr`, with `SO_REUSEPORT` when shared by
/// all workers.
pub fn bind_udp(addr: SocketAddr, reuse_port: bool) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        // Dual-stack when bound to [::]: IPv4 clients arrive as mapped addresses.
        socket.set_only_v6(false)?;
    }
    // Best effort: the kernel caps these at net.core.{r,w}mem_max.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// A worker with its sockets bound, ready to run.
#[derive(Debug)]
pub struct Worker {
    index: usize,
    poll: Poll,
    vips: Vec<SocketAddr>,
    vip_sockets: Vec<mio::net::UdpSocket>,
    internal: mio::net::UdpSocket,
    forwarder: Forwarder,
    shared: Arc<SharedCounters>,
    cache: Option<CacheClient>,
    recv: RecvBatch,
    to_internal: SendBatch,
    to_clients: Vec<SendBatch>,
}

impl Worker {
    /// Binds the worker's sockets and registers them. Returns the worker and a waker the
    /// route cache uses to interrupt its poll.
    pub fn bind(spec: WorkerSpec, shared: Arc<SharedCounters>) -> io::Result<(Self, Arc<Waker>)> {
        let poll = Poll::new()?;
        let mut vip_sockets = Vec::with_capacity(spec.vips.len());
        let mut to_clients = Vec::with_capacity(spec.vips.len());
        for (i, vip) in spec.vips.iter().enumerate() {
            let std_socket = bind_udp(*vip, true)
                .map_err(|e| io::Error::new(e.kind(), format!("binding VIP {vip}: {e}")))?;
            let mut socket = mio::net::UdpSocket::from_std(std_socket);
            poll.registry()
                .register(&mut socket, Token(i), Interest::READABLE)?;
            to_clients.push(SendBatch::new(vip.is_ipv6()));
            vip_sockets.push(socket);
        }
        let std_internal = bind_udp(spec.internal, false).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("binding internal address {}: {e}", spec.internal),
            )
        })?;
        if spec.index == 0 {
            let offloads = crate::mmsg::probe_offloads(std_internal.as_raw_fd());
            // Relay traffic is many small datagrams of unequal sizes to and from many
            // peers: GSO needs equal-size segments to one destination and GRO coalesces
            // only one 5-tuple's datagrams, so neither is enabled (see README).
            tracing::info!(
                gso = offloads.gso,
                gro = offloads.gro,
                "UDP offloads available, not used for relay traffic"
            );
        }
        let mut internal = mio::net::UdpSocket::from_std(std_internal);
        poll.registry()
            .register(&mut internal, INTERNAL, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let started = Instant::now();
        let table = FlowTable::new(spec.flows, spec.idle_timeout, started)
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok((
            Worker {
                index: spec.index,
                poll,
                vips: spec.vips,
                vip_sockets,
                to_internal: SendBatch::new(spec.internal.is_ipv6()),
                internal,
                forwarder: Forwarder::new(spec.policy, table, started),
                shared,
                cache: None,
                recv: RecvBatch::new(),
                to_clients,
            },
            waker,
        ))
    }

    /// Attaches the worker's route-cache client.
    pub fn set_cache(&mut self, cache: CacheClient) {
        self.cache = Some(cache);
    }

    /// Runs until `stop` is set, then publishes the final counters.
    pub fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(64);
        let mut next_tick = Instant::now() + TICK;
        while !stop.load(Ordering::Relaxed) {
            let timeout = next_tick.saturating_duration_since(Instant::now());
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    INTERNAL => self.drain_internal(),
                    WAKE => self.drain_cache_answers(),
                    Token(vip) => self.drain_vip(vip),
                }
            }
            let now = Instant::now();
            if now >= next_tick {
                self.tick(now);
                next_tick = now + TICK;
            }
        }
        self.tick(Instant::now());
        Ok(())
    }

    /// Expiry, cache answers and failures, counter publication.
    fn tick(&mut self, now: Instant) {
        self.forwarder.expire(now, EXPIRE_BUDGET);
        self.drain_cache_answers();
        if let Some(cache) = &self.cache {
            let failures = cache.take_failures();
            self.forwarder.counters_mut().cache_errors += failures;
        }
        self.shared.publish(self.forwarder.counters());
    }

    fn drain_cache_answers(&mut self) {
        let Some(cache) = &self.cache else {
            return;
        };
        let now = Instant::now();
        while let Some(answer) = cache.try_answer() {
            match answer.route {
                Some(route) => {
                    self.forwarder.restore(&answer.key, route, now);
                }
                None => self.forwarder.counters_mut().cache_misses += 1,
            }
        }
    }

    fn ask_cache(&mut self, key: FlowKey) {
        let asked = self.cache.as_ref().is_some_and(|c| c.lookup(key));
        if !asked {
            self.forwarder.counters_mut().cache_errors += 1;
        }
    }

    fn record_in_cache(&mut self, key: FlowKey, route: ufrag_common::forward::Route) {
        let recorded = self.cache.as_ref().is_some_and(|c| c.record(key, route));
        if !recorded && self.cache.is_some() {
            self.forwarder.counters_mut().cache_errors += 1;
        }
    }

    fn drain_vip(&mut self, vip_index: usize) {
        let Some(vip) = self.vips.get(vip_index).copied() else {
            return;
        };
        let fd = self.vip_sockets[vip_index].as_raw_fd();
        for _ in 0..BATCHES_PER_WAKEUP {
            let n = match self.recv.recv(fd) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(worker = self.index, %vip, error = %e, "receive failed");
                    break;
                }
            };
            let now = Instant::now();
            for i in 0..n {
                let Some(d) = self.recv.get(i) else { continue };
                if d.truncated {
                    self.forwarder.counters_mut().dropped(DropReason::TooLarge);
                    continue;
                }
                match self.forwarder.from_client(d.data, d.source, vip, now) {
                    Verdict::Forward {
                        to,
                        header,
                        record,
                        payload_at,
                    } => {
                        let mut head = [0u8; ufrag_common::frame::MAX_HEADER_LEN];
                        let len = header.emit(&mut head).unwrap_or(0);
                        queue(
                            &mut self.to_internal,
                            self.internal.as_raw_fd(),
                            &mut self.forwarder,
                            Direction::In,
                            to,
                            &head[..len],
                            &d.data[payload_at..],
                        );
                        if let Some(route) = record {
                            let key = FlowKey::new(d.source, vip);
                            self.record_in_cache(key, route);
                        }
                    }
                    Verdict::LookupRoute { key } => self.ask_cache(key),
                    Verdict::Drop(_) | Verdict::Return { .. } | Verdict::Relay { .. } => {}
                }
            }
            flush(
                &mut self.to_internal,
                self.internal.as_raw_fd(),
                &mut self.forwarder,
                Direction::In,
            );
            if n < crate::mmsg::BATCH {
                break;
            }
        }
    }

    fn drain_internal(&mut self) {
        let fd = self.internal.as_raw_fd();
        for _ in 0..BATCHES_PER_WAKEUP {
            let n = match self.recv.recv(fd) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(worker = self.index, error = %e, "internal receive failed");
                    break;
                }
            };
            let now = Instant::now();
            for i in 0..n {
                let Some(d) = self.recv.get(i) else { continue };
                if d.truncated {
                    self.forwarder.counters_mut().dropped(DropReason::TooLarge);
                    continue;
                }
                match self.forwarder.from_internal(d.data, d.source, now) {
                    Verdict::Return {
                        client,
                        vip,
                        payload_at,
                    } => {
                        let Some(j) = self.vips.iter().position(|v| *v == vip) else {
                            continue;
                        };
                        queue(
                            &mut self.to_clients[j],
                            self.vip_sockets[j].as_raw_fd(),
                            &mut self.forwarder,
                            Direction::Out,
                            client,
                            &[],
                            &d.data[payload_at..],
                        );
                    }
                    Verdict::Relay { to } => {
                        queue(
                            &mut self.to_internal,
                            fd,
                            &mut self.forwarder,
                            Direction::Out,
                            to,
                            &[],
                            d.data,
                        );
                    }
                    Verdict::Forward {
                        to,
                        header,
                        record,
                        payload_at,
                    } => {
                        let mut head = [0u8; ufrag_common::frame::MAX_HEADER_LEN];
                        let len = header.emit(&mut head).unwrap_or(0);
                        queue(
                            &mut self.to_internal,
                            fd,
                            &mut self.forwarder,
                            Direction::In,
                            to,
                            &head[..len],
                            &d.data[payload_at..],
                        );
                        if let Some(route) = record {
                            self.record_in_cache(FlowKey::new(header.client, header.vip), route);
                        }
                    }
                    Verdict::LookupRoute { key } => self.ask_cache(key),
                    Verdict::Drop(_) => {}
                }
            }
            for j in 0..self.to_clients.len() {
                flush(
                    &mut self.to_clients[j],
                    self.vip_sockets[j].as_raw_fd(),
                    &mut self.forwarder,
                    Direction::Out,
                );
            }
            flush(
                &mut self.to_internal,
                fd,
                &mut self.forwarder,
                Direction::Out,
            );
            if n < crate::mmsg::BATCH {
                break;
            }
        }
    }
}

/// Sends a batch; datagrams the kernel refused are counted as `send_failed` and taken
/// back out of the forwarded count of `direction`.
/// Queues `head` + `body` for `to`, flushing the batch first when it is full; a datagram
/// too large for a buffer is counted as `too_large`.
#[allow(clippy::too_many_arguments)]
fn queue(
    batch: &mut SendBatch,
    fd: std::os::fd::RawFd,
    forwarder: &mut Forwarder,
    direction: Direction,
    to: SocketAddr,
    head: &[u8],
    body: &[u8],
) {
    if batch.is_full() {
        flush(batch, fd, forwarder, direction);
    }
    if !batch.push(to, head, body) {
        forwarder.counters_mut().dropped(DropReason::TooLarge);
    }
}

fn flush(
    batch: &mut SendBatch,
    fd: std::os::fd::RawFd,
    forwarder: &mut Forwarder,
    direction: Direction,
) {
    if batch.is_empty() {
        return;
    }
    let result = batch.flush(fd);
    if result.failed > 0 {
        let counters = forwarder.counters_mut();
        counters.drops[DropReason::SendFailed.index()] += result.failed as u64;
        let d = direction as usize;
        counters.packets[d] = counters.packets[d].saturating_sub(result.failed as u64);
    }
}
