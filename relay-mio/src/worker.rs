//! One relay worker: pinned to its core, its own `SO_REUSEPORT` socket on every VIP and
//! its own internal socket, a mio event loop, batched receive and send (frames for
//! transceivers that read bundles gathered into one datagram per peer per batch), and the
//! shared forwarding decision. Workers share nothing on the packet path: no locks, no atomics
//! (counters are published every tick), no allocation.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};
use ufrag_common::bundle::is_bundle;
use ufrag_common::config::{BundlePolicy, PollMode, TcpPolicy};
use ufrag_common::execute::{Egress, Executor, RouteCacheRequest, Source, Tally, Transmit};
use ufrag_common::flow::FlowTable;
use ufrag_common::forward::{ForwardPolicy, Forwarder};
use ufrag_common::frame::{Transport, transport_of};
use ufrag_common::metrics::{SharedCounters, TcpWorkerMetrics};
use ufrag_common::reasons::{DropReason, Port};
use ufrag_common::runtime::cache::{CacheClient, deliver_answers};
use ufrag_common::runtime::keys::KeyReader;
use ufrag_udp::{BATCH, RecvBatch, bind_udp};

use crate::outbox::{Drained, Outbox};
use crate::tcp::TcpSide;
use crate::token::Wake;

/// How often a worker expires flows and publishes its counters.
pub const TICK: Duration = Duration::from_millis(50);
/// Flows expired per tick at most (bounds the time one tick can take).
pub const EXPIRE_BUDGET: usize = 4096;
/// Receive batches drained per socket per turn before the others get a turn. A socket
/// left with data is revisited without sleeping: on this kernel (6.18) a UDP socket
/// wakes its edge-triggered epoll waiters only when its queue goes from empty to not
/// empty, so a loop that sleeps with data queued sleeps until the queue empties, which
/// under load is never (every datagram after it is dropped; measured with `perf`).
const BATCHES_PER_TURN: usize = 16;

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
    /// Sleep in epoll when idle, or spin.
    pub poll_mode: PollMode,
    /// ICE over TCP: its VIPs (none: not served) and limits.
    pub tcp: TcpPolicy,
    /// Where the TCP side counts, when TCP is served.
    pub tcp_metrics: Option<TcpWorkerMetrics>,
    /// Which transceivers get bundles, and the internal MTU.
    pub bundles: BundlePolicy,
}

/// The worker's I/O: its sockets, their send batches and its route-cache client. The
/// executor drives it through [`Egress`].
#[derive(Debug)]
struct SocketEgress {
    vips: Vec<SocketAddr>,
    /// One per VIP, in the order of `vips`.
    to_clients: Vec<Outbox>,
    internal: Outbox,
    cache: Option<CacheClient>,
}

impl Egress for SocketEgress {
    type Received<'a> = &'a [u8];

    fn bytes_of<'r>(received: Self::Received<'r>) -> Option<&'r [u8]> {
        Some(received)
    }

    fn from_bytes<'r>(bytes: &'r [u8]) -> Option<Self::Received<'r>> {
        Some(bytes)
    }

    fn transmit(&mut self, received: &[u8], tx: Transmit, tally: &mut Tally<'_>) {
        let Some(body) = received.get(tx.payload_at..) else {
            return tally.failed(tx.ticket, DropReason::TooLarge);
        };
        let outbox = match tx.from {
            Source::Internal => &mut self.internal,
            Source::Vip(vip) => match self.vips.iter().position(|v| *v == vip) {
                Some(i) => &mut self.to_clients[i],
                None => return tally.failed(tx.ticket, DropReason::ReturnUnknownVip),
            },
        };
        outbox.queue_transmit(body, tx, tally);
    }

    fn flush(&mut self, tally: &mut Tally<'_>) {
        for outbox in &mut self.to_clients {
            outbox.flush(tally);
        }
        self.internal.flush(tally);
    }

    fn route_cache(&mut self, request: RouteCacheRequest) -> bool {
        self.cache.as_ref().is_some_and(|c| c.submit(request))
    }
}

/// A worker with its sockets bound, ready to run.
#[derive(Debug)]
pub struct Worker {
    index: usize,
    poll: Poll,
    poll_mode: PollMode,
    executor: Executor,
    /// The hint keys, when they can change (set by the lifecycle before the worker runs).
    keys: Option<KeyReader>,
    shared: Arc<SharedCounters>,
    recv: RecvBatch,
    egress: SocketEgress,
    /// ICE over TCP, when TCP VIPs are configured.
    tcp: Option<TcpSide>,
}

impl Worker {
    /// Binds the worker's sockets and registers them. Returns the worker and a waker the
    /// route cache uses to interrupt its poll.
    pub fn bind(spec: WorkerSpec, shared: Arc<SharedCounters>) -> io::Result<(Self, Arc<Waker>)> {
        let poll = Poll::new()?;
        let mut to_clients = Vec::with_capacity(spec.vips.len());
        for (i, vip) in spec.vips.iter().enumerate() {
            let std_socket = bind_udp(*vip, true)
                .map_err(|e| io::Error::new(e.kind(), format!("binding VIP {vip}: {e}")))?;
            let mut socket = mio::net::UdpSocket::from_std(std_socket);
            poll.registry()
                .register(&mut socket, Wake::Vip(i).token(), Interest::READABLE)?;
            to_clients.push(Outbox::new(socket, vip.is_ipv6()));
        }
        let std_internal = bind_udp(spec.internal, false).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("binding internal address {}: {e}", spec.internal),
            )
        })?;
        if spec.index == 0 {
            let offloads = ufrag_udp::probe_offloads(std_internal.as_raw_fd());
            // Relay traffic is many small datagrams of unequal sizes to and from many
            // peers: GSO needs equal-size segments to one destination and GRO coalesces
            // only one 5-tuple's datagrams, so neither is enabled (see docs/architecture.md).
            tracing::info!(
                gso = offloads.gso,
                gro = offloads.gro,
                "UDP offloads available, not used for relay traffic"
            );
        }
        let mut internal = mio::net::UdpSocket::from_std(std_internal);
        poll.registry()
            .register(&mut internal, Wake::Internal.token(), Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), Wake::RouteCache.token())?);
        let started = Instant::now();
        let table = FlowTable::new(spec.flows, spec.idle_timeout, started)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let tcp = match spec.tcp_metrics {
            Some(metrics) if !spec.tcp.vips.is_empty() => Some(TcpSide::bind(
                &spec.tcp,
                &spec.policy,
                spec.idle_timeout,
                poll.registry(),
                metrics,
            )?),
            _ => None,
        };
        Ok((
            Worker {
                index: spec.index,
                poll,
                poll_mode: spec.poll_mode,
                executor: Executor::new(
                    Forwarder::new(
                        spec.policy,
                        table,
                        started,
                        ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
                    ),
                    started,
                ),
                keys: None,
                shared,
                recv: RecvBatch::new(),
                egress: SocketEgress {
                    vips: spec.vips,
                    to_clients,
                    internal: Outbox::bundling(internal, spec.internal.is_ipv6(), spec.bundles),
                    cache: None,
                },
                tcp,
            },
            waker,
        ))
    }

    /// Attaches the worker's route-cache client.
    pub fn set_cache(&mut self, cache: CacheClient) {
        self.egress.cache = Some(cache);
    }

    /// Attaches the worker's view of the hint keys, adopted on its tick when they change.
    pub fn set_keys(&mut self, keys: KeyReader) {
        self.keys = Some(keys);
    }

    /// Runs until `stop` is set, then publishes the final counters.
    pub fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(64);
        let mut next_tick = Instant::now() + TICK;
        // Sockets that still had data when their turn ended (see BATCHES_PER_TURN).
        let mut unfinished: Vec<Token> = Vec::with_capacity(self.egress.vips.len() + 1);
        let mut again: Vec<Token> = Vec::with_capacity(self.egress.vips.len() + 1);
        while !stop.load(Ordering::Relaxed) {
            // A busy-polling worker never sleeps: epoll_wait returns at once.
            let timeout = if unfinished.is_empty() && self.poll_mode == PollMode::Wakeup {
                next_tick.saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            };
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            self.adopt_new_keys();
            std::mem::swap(&mut unfinished, &mut again);
            for token in events.iter().map(|e| e.token()).chain(again.drain(..)) {
                let Some(wake) = Wake::of(token) else {
                    continue;
                };
                if wake == Wake::RouteCache {
                    self.deliver_cache_answers();
                } else if self.drain(wake) == Drained::Partly && !unfinished.contains(&token) {
                    unfinished.push(token);
                }
            }
            let now = Instant::now();
            if now >= next_tick {
                self.tick(now);
                next_tick = now + TICK;
            }
        }
        self.tick(Instant::now());
        if let Some(tcp) = &mut self.tcp {
            tcp.close_all(Instant::now());
        }
        Ok(())
    }

    /// Cache answers and failures, expiry, counter publication.
    /// Verifies first packets under the newest hint keys: an atomic load per wake-up, and
    /// a copy of the keys after a reload. Checked before each round of reads, so a
    /// datagram read after a reload was published meets the new keys.
    fn adopt_new_keys(&mut self) {
        if let Some(keys) = self.keys.as_mut().and_then(KeyReader::changed) {
            if let Some(tcp) = &mut self.tcp {
                tcp.set_hint_keys(keys.clone());
            }
            self.executor.set_hint_keys(keys);
        }
    }

    fn tick(&mut self, now: Instant) {
        self.deliver_cache_answers();
        self.executor.tick(now, EXPIRE_BUDGET, &self.shared);
        if let Some(tcp) = &mut self.tcp {
            tcp.tick(now, EXPIRE_BUDGET);
        }
    }

    fn deliver_cache_answers(&mut self) {
        deliver_answers(
            &mut self.executor,
            &mut self.egress,
            |egress| egress.cache.as_ref(),
            Instant::now(),
        );
    }

    /// Serves the socket `wake` names: receives, decides and sends up to
    /// [`BATCHES_PER_TURN`] batches from the internal socket or a VIP's, or hands a TCP
    /// listener or connection to the TCP side. Says whether it emptied the socket.
    fn drain(&mut self, wake: Wake) -> Drained {
        let (fd, port, vip) = match (wake, &mut self.tcp) {
            (Wake::Internal, _) => (self.egress.internal.fd(), Port::Internal, None),
            (Wake::Vip(i), _) => match (self.egress.to_clients.get(i), self.egress.vips.get(i)) {
                (Some(outbox), Some(&vip)) => (outbox.fd(), Port::Vip, Some(vip)),
                _ => return Drained::Empty,
            },
            (Wake::TcpListener(i), Some(tcp)) => return tcp.accept(i, Instant::now()),
            (Wake::TcpConnection(slot), Some(tcp)) => {
                return tcp.serve(slot, &mut self.egress.internal, Instant::now());
            }
            (Wake::TcpListener(_) | Wake::TcpConnection(_) | Wake::RouteCache, _) => {
                return Drained::Empty;
            }
        };
        let mut drained = Drained::Partly;
        for _ in 0..BATCHES_PER_TURN {
            let n = match self.recv.recv(fd) {
                Ok(0) => {
                    drained = Drained::Empty;
                    break;
                }
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(worker = self.index, ?vip, error = %e, "receive failed");
                    drained = Drained::Empty;
                    break;
                }
            };
            let now = Instant::now();
            for i in 0..n {
                let Some(d) = self.recv.get(i) else { continue };
                if d.truncated {
                    self.executor
                        .drop_received(port, d.data.len(), DropReason::TooLarge);
                    continue;
                }
                let Some(vip) = vip else {
                    let (executor, tcp, egress) =
                        (&mut self.executor, &mut self.tcp, &mut self.egress);
                    if !is_bundle(d.data) {
                        serve_frame(d.data, d.source, now, executor, tcp, egress);
                    } else if let Some(frames) = executor.open_bundle(d.data, d.source) {
                        for frame in frames {
                            serve_frame(frame, d.source, now, executor, tcp, egress);
                        }
                    }
                    continue;
                };
                let decision = self.executor.decide_client(d.data, d.source, vip, now);
                self.executor.carry_out(decision, d.data, &mut self.egress);
            }
            self.executor.flush(&mut self.egress);
            if vip.is_none()
                && let Some(tcp) = &mut self.tcp
            {
                tcp.flush(&mut self.egress.internal);
            }
            if n < BATCH {
                drained = Drained::Empty;
                break;
            }
        }
        drained
    }
}

/// One frame from `source` on the internal port (alone, or out of a bundle): the TCP
/// side's when it names a client on a TCP connection, the executor's otherwise.
fn serve_frame(
    frame: &[u8],
    source: SocketAddr,
    now: Instant,
    executor: &mut Executor,
    tcp: &mut Option<TcpSide>,
    egress: &mut SocketEgress,
) {
    if let Some(tcp) = tcp
        && transport_of(frame) == Some(Transport::Tcp)
    {
        tcp.return_frame(frame, source, &mut egress.internal, now);
        return;
    }
    let decision = executor.decide_internal(frame, source, now);
    executor.carry_out(decision, frame, egress);
}
