//! ICE over TCP on relay-mio, for clients whose networks block UDP: passive ICE-TCP
//! (RFC 6544) on the TCP VIPs, RFC 4571 framing (a 2-byte length before each message).
//!
//! Every worker listens on every TCP VIP with `SO_REUSEPORT`, so the kernel spreads
//! connections over the workers, and owns the connections it accepts. Each message is
//! decided as a UDP datagram is, by a forwarder of its own that serves TCP
//! ([`Forwarder::serving`]): the connection's first message must be an authentic, admitted
//! Binding Request (the same hint, MESSAGE-INTEGRITY and admission checks, the same
//! limits) or the connection is closed; after it, the connection is bound to the hint's
//! transceiver and every message goes there in a frame with the TCP bit, over the
//! worker's internal UDP socket. The transceiver answers to that socket (the relay that
//! sent), framed with the TCP bit, and the reply is written to the connection the frame's
//! client address and VIP name: a connection's four-tuple is unique, so no connection id
//! is needed.
//!
//! What a connection may cost is bounded: new connections per second per source prefix
//! and per worker, and open connections per worker and per source prefix (all refused at
//! accept, counted by reason; IPv6 sources are grouped by at most a /48, so one
//! allocation cannot walk its /56s past the caps), a handshake timeout (no authentic
//! Binding Request yet), the flows' idle timeout, at most [`MAX_MESSAGE`] bytes per message (a longer length prefix closes
//! the connection), a [`INBOX`]-byte receive buffer, and a [`SEND_BUFFER`]-byte send
//! buffer allocated only once the connection is bound. A slow reader never stalls others:
//! what its send buffer cannot take is dropped and counted (`tcp_send_buffer_full`), as
//! the network would drop a datagram. Every close is counted by reason
//! ([`TcpCloseReason`]); a message counts as forwarded to the client once it is in the
//! connection's send buffer.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use ufrag_common::admission::{ArrivalRates, RateSpent};
use ufrag_common::config::TcpPolicy;
use ufrag_common::execute::{Egress, Executor, RouteCacheRequest, Source, Tally, Transmit};
use ufrag_common::flow::{FlowKey, FlowTable};
use ufrag_common::forward::{ForwardPolicy, Forwarder, Verdict};
use ufrag_common::frame::{MAX_HEADER_LEN, Transport};
use ufrag_common::metrics::{TcpConnectionCounters, TcpWorkerMetrics};
use ufrag_common::reasons::{DropReason, TcpCloseReason};
use ufrag_common::rfc4571;
use ufrag_udp::BUF_LEN;

use crate::outbox::{Drained, Outbox};
use crate::token::Wake;

/// The largest message carried: it must fit a frame in the internal socket's buffers.
pub const MAX_MESSAGE: usize = BUF_LEN - MAX_HEADER_LEN;
/// A connection's receive buffer: room for a whole message of the largest size behind
/// the partial one a read may leave.
pub const INBOX: usize = 2 * (rfc4571::PREFIX_LEN + MAX_MESSAGE);
/// A bound connection's send buffer: what the kernel has not taken yet, at most.
pub const SEND_BUFFER: usize = 16 * 1024;
/// Connections accepted per listener per turn before the other sockets get a turn.
const ACCEPTS_PER_TURN: usize = 64;
/// Reads per connection per turn before the other sockets get a turn.
const READS_PER_TURN: usize = 4;
/// Connections checked for their timeouts per tick at most.
const SCAN_PER_TICK: usize = 4096;

/// One accepted connection.
#[derive(Debug)]
struct Connection {
    stream: TcpStream,
    /// The client's address and the TCP VIP it connected to: its flow's key.
    flow: FlowKey,
    /// The source prefix it counts against.
    prefix: IpAddr,
    opened: Instant,
    last_active: Instant,
    /// Its first Binding Request was authentic and admitted: the flow exists.
    bound: bool,
    inbox: Box<[u8]>,
    inbox_len: usize,
    /// Bytes for the client the kernel has not taken; allocated when bound.
    outbox: Vec<u8>,
    /// Write interest is registered (the kernel refused part of the outbox).
    waiting_to_write: bool,
}

/// The worker's connections, and what replies need to find one.
#[derive(Debug)]
struct Connections {
    slots: Vec<Option<Connection>>,
    free: Vec<usize>,
    by_flow: HashMap<FlowKey, usize>,
    per_prefix: HashMap<IpAddr, u32>,
    /// Slots whose outbox has bytes to write at the next flush.
    dirty: Vec<usize>,
    /// Flows of bound connections a failed write closed, for the forwarder to end after
    /// the flush (it is busy with the flush while the write fails).
    write_failed: Vec<FlowKey>,
    registry: Registry,
    counters: Arc<TcpConnectionCounters>,
}

/// One worker's ICE-TCP side: listeners, connections, and the forwarder that decides
/// their messages.
#[derive(Debug)]
pub(crate) struct TcpSide {
    listeners: Vec<(TcpListener, SocketAddr)>,
    connections: Connections,
    executor: Executor,
    policy: TcpPolicy,
    prefix_len_v4: u8,
    prefix_len_v6: u8,
    accepts: ArrivalRates,
    idle_timeout: Duration,
    scan_at: usize,
    metrics: TcpWorkerMetrics,
}

/// The TCP side's I/O for the executor: frames to transceivers leave by the worker's
/// internal socket, replies go into their connection's send buffer.
struct TcpEgress<'a> {
    internal: &'a mut Outbox,
    connections: &'a mut Connections,
}

impl Egress for TcpEgress<'_> {
    type Received<'r> = &'r [u8];

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
        match tx.from {
            Source::Internal => self.internal.queue_transmit(body, tx, tally),
            Source::Vip(vip) => match self.connections.queue(&FlowKey::new(tx.to, vip), body) {
                Ok(()) => tally.sent(tx.ticket),
                Err(reason) => tally.failed(tx.ticket, reason),
            },
        }
    }

    fn flush(&mut self, tally: &mut Tally<'_>) {
        self.internal.flush(tally);
        self.connections.write_dirty();
    }

    fn route_cache(&mut self, _: RouteCacheRequest) -> bool {
        // A TCP flow ends with its connection: there is nothing to restore after a
        // restart, so none is cached.
        false
    }
}

impl Connections {
    fn get(&mut self, slot: usize) -> Option<&mut Connection> {
        self.slots.get_mut(slot).and_then(Option::as_mut)
    }

    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Appends one RFC 4571 message for `flow`'s client to its send buffer.
    fn queue(&mut self, flow: &FlowKey, message: &[u8]) -> Result<(), DropReason> {
        let slot = *self.by_flow.get(flow).ok_or(DropReason::ReturnNoFlow)?;
        let conn = self.get(slot).ok_or(DropReason::ReturnNoFlow)?;
        let prefix = rfc4571::prefix(message.len()).ok_or(DropReason::TooLarge)?;
        if conn.outbox.len() + prefix.len() + message.len() > SEND_BUFFER {
            return Err(DropReason::TcpSendBufferFull);
        }
        if conn.outbox.is_empty() && !conn.waiting_to_write {
            self.dirty.push(slot);
        }
        let conn = self.get(slot).ok_or(DropReason::ReturnNoFlow)?;
        conn.outbox.extend_from_slice(&prefix);
        conn.outbox.extend_from_slice(message);
        Ok(())
    }

    /// Writes what the dirty connections hold; a connection the kernel cannot take all
    /// from waits for write readiness instead.
    fn write_dirty(&mut self) {
        let now = Instant::now();
        while let Some(slot) = self.dirty.pop() {
            if let Err(reason) = self.write(slot, now) {
                if let Some(conn) = self.slots.get(slot).and_then(Option::as_ref)
                    && conn.bound
                {
                    self.write_failed.push(conn.flow);
                }
                self.close(slot, reason, None);
            }
        }
    }

    /// Writes as much of `slot`'s send buffer as the kernel takes now.
    fn write(&mut self, slot: usize, now: Instant) -> Result<(), TcpCloseReason> {
        let registry = &self.registry;
        let Some(conn) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        let mut written = 0;
        while written < conn.outbox.len() {
            match conn.stream.write(&conn.outbox[written..]) {
                Ok(0) => return Err(TcpCloseReason::Reset),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(TcpCloseReason::Reset),
            }
        }
        conn.outbox.drain(..written);
        if written > 0 {
            conn.last_active = now;
        }
        let waiting = !conn.outbox.is_empty();
        if waiting != conn.waiting_to_write {
            let interest = if waiting {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            registry
                .reregister(&mut conn.stream, connection_token(slot), interest)
                .map_err(|_| TcpCloseReason::Reset)?;
            conn.waiting_to_write = waiting;
        }
        Ok(())
    }

    /// Closes `slot` for `reason`, ending its flow in `executor` when given.
    fn close(&mut self, slot: usize, reason: TcpCloseReason, executor: Option<&mut Executor>) {
        let Some(mut conn) = self.slots.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let _ = self.registry.deregister(&mut conn.stream);
        self.by_flow.remove(&conn.flow);
        if let Some(count) = self.per_prefix.get_mut(&conn.prefix) {
            *count -= 1;
            if *count == 0 {
                self.per_prefix.remove(&conn.prefix);
            }
        }
        self.free.push(slot);
        self.counters.closed(reason);
        if conn.bound
            && let Some(executor) = executor
        {
            executor.end_flow(&conn.flow);
        }
    }
}

/// The longest IPv6 prefix TCP sources are grouped by: one allocation (often a /48) holds
/// 256 /56s, and would get 256 times the per-prefix caps if grouped by /56.
const TCP_PREFIX_LEN_V6_MAX: u8 = 48;

/// The listen backlog: connections the kernel completes before the worker accepts them.
const BACKLOG: i32 = 1024;

/// A non-blocking TCP listener on `addr` with `SO_REUSEPORT` (every worker binds one).
fn bind_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// The token of connection slot `slot`.
fn connection_token(slot: usize) -> Token {
    Wake::TcpConnection(slot).token()
}

impl TcpSide {
    /// Binds a listener on every TCP VIP (`SO_REUSEPORT`, shared with the other workers)
    /// and registers it with `registry`.
    pub(crate) fn bind(
        policy: &TcpPolicy,
        forward: &ForwardPolicy,
        idle_timeout: Duration,
        registry: &Registry,
        metrics: TcpWorkerMetrics,
    ) -> io::Result<Self> {
        let mut listeners = Vec::with_capacity(policy.vips.len());
        for (i, vip) in policy.vips.iter().enumerate() {
            let mut listener = bind_listener(*vip)
                .map(TcpListener::from_std)
                .map_err(|e| io::Error::new(e.kind(), format!("binding TCP VIP {vip}: {e}")))?;
            registry.register(
                &mut listener,
                Wake::TcpListener(i).token(),
                Interest::READABLE,
            )?;
            listeners.push((listener, *vip));
        }
        let started = Instant::now();
        let table = FlowTable::new(policy.connections_per_worker, idle_timeout, started)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let (prefix_len_v4, prefix_len_v6) = (
            forward.admission.prefix_len_v4,
            forward.admission.prefix_len_v6.min(TCP_PREFIX_LEN_V6_MAX),
        );
        let forward = ForwardPolicy {
            vips: policy.vips.clone(),
            route_cache: false,
            ..forward.clone()
        };
        let forwarder = Forwarder::new(
            forward,
            table,
            started,
            ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
        )
        .serving(Transport::Tcp);
        let cap = policy.connections_per_worker;
        Ok(TcpSide {
            listeners,
            connections: Connections {
                slots: Vec::with_capacity(cap),
                free: Vec::with_capacity(cap),
                by_flow: HashMap::with_capacity(cap),
                per_prefix: HashMap::with_capacity(cap),
                dirty: Vec::with_capacity(cap),
                write_failed: Vec::with_capacity(cap),
                registry: registry.try_clone()?,
                counters: Arc::clone(&metrics.connections),
            },
            executor: Executor::new(forwarder, started),
            policy: policy.clone(),
            prefix_len_v4,
            prefix_len_v6,
            accepts: ArrivalRates::new(
                policy.accepts_per_prefix,
                policy.accepts_per_worker,
                (prefix_len_v4, prefix_len_v6),
                started,
            ),
            idle_timeout,
            scan_at: 0,
            metrics,
        })
    }

    /// Sets the hint keys first Binding Requests are verified under (a key rotation).
    pub(crate) fn set_hint_keys(&mut self, keys: ufrag_common::hint::HintKeys) {
        self.executor.set_hint_keys(keys);
    }

    /// Accepts what listener `index` has waiting, up to [`ACCEPTS_PER_TURN`]; refuses, counted,
    /// what the per-worker or per-prefix caps do not allow.
    pub(crate) fn accept(&mut self, index: usize, now: Instant) -> Drained {
        for _ in 0..ACCEPTS_PER_TURN {
            let Some((listener, vip)) = self.listeners.get(index) else {
                return Drained::Empty;
            };
            let vip = *vip;
            match listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer, vip, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Drained::Empty,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors or memory: the connection stays in the backlog
                    // and the next arrival wakes the listener again.
                    tracing::warn!(%vip, error = %e, "accepting a TCP connection failed");
                    return Drained::Empty;
                }
            }
        }
        Drained::Partly
    }

    fn admit(&mut self, mut stream: TcpStream, peer: SocketAddr, vip: SocketAddr, now: Instant) {
        let counters = &self.connections.counters;
        if let Err(spent) = self.accepts.take(peer.ip(), now) {
            counters.refused(match spent {
                RateSpent::Prefix => TcpCloseReason::PrefixRate,
                RateSpent::Worker => TcpCloseReason::WorkerRate,
            });
            return;
        }
        if self.connections.len() >= self.policy.connections_per_worker {
            counters.refused(TcpCloseReason::WorkerLimit);
            return;
        }
        let prefix =
            ufrag_common::wire::source_prefix(peer.ip(), self.prefix_len_v4, self.prefix_len_v6);
        let held = self
            .connections
            .per_prefix
            .get(&prefix)
            .copied()
            .unwrap_or(0);
        if held >= self.policy.connections_per_prefix {
            counters.refused(TcpCloseReason::PrefixLimit);
            return;
        }
        let flow = FlowKey::new(peer, vip);
        let slot = self
            .connections
            .free
            .pop()
            .unwrap_or(self.connections.slots.len());
        // Media: each message leaves at once, not after the next one.
        let _ = stream.set_nodelay(true);
        if self
            .connections
            .registry
            .register(&mut stream, connection_token(slot), Interest::READABLE)
            .is_err()
        {
            if slot < self.connections.slots.len() {
                self.connections.free.push(slot);
            }
            counters.refused(TcpCloseReason::Reset);
            return;
        }
        let conn = Connection {
            stream,
            flow,
            prefix,
            opened: now,
            last_active: now,
            bound: false,
            inbox: vec![0u8; INBOX].into_boxed_slice(),
            inbox_len: 0,
            outbox: Vec::new(),
            waiting_to_write: false,
        };
        if slot == self.connections.slots.len() {
            self.connections.slots.push(Some(conn));
        } else {
            self.connections.slots[slot] = Some(conn);
        }
        self.connections.by_flow.insert(flow, slot);
        *self.connections.per_prefix.entry(prefix).or_insert(0) += 1;
        self.connections.counters.opened();
    }

    /// A connection's readiness: writes what waits for it, then reads and carries out up to
    /// [`READS_PER_TURN`] reads' worth of messages.
    pub(crate) fn serve(&mut self, slot: usize, internal: &mut Outbox, now: Instant) -> Drained {
        if self
            .connections
            .get(slot)
            .is_some_and(|c| c.waiting_to_write)
            && let Err(reason) = self.connections.write(slot, now)
        {
            self.close(slot, reason);
            return Drained::Empty;
        }
        for _ in 0..READS_PER_TURN {
            let Some(conn) = self.connections.get(slot) else {
                return Drained::Empty;
            };
            let len = conn.inbox_len;
            match conn.stream.read(&mut conn.inbox[len..]) {
                Ok(0) => {
                    self.close(slot, TcpCloseReason::PeerClosed);
                    return Drained::Empty;
                }
                Ok(n) => {
                    conn.inbox_len += n;
                    conn.last_active = now;
                    if let Err(reason) = self.take_messages(slot, internal, now) {
                        self.close(slot, reason);
                        return Drained::Empty;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Drained::Empty,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close(slot, TcpCloseReason::Reset);
                    return Drained::Empty;
                }
            }
        }
        Drained::Partly
    }

    /// Decides every whole message in `slot`'s receive buffer and keeps the partial rest.
    fn take_messages(
        &mut self,
        slot: usize,
        internal: &mut Outbox,
        now: Instant,
    ) -> Result<(), TcpCloseReason> {
        let Some(conn) = self.connections.get(slot) else {
            return Ok(());
        };
        // Taken out while its messages are decided (the egress needs the connections);
        // an empty box allocates nothing.
        let inbox = std::mem::take(&mut conn.inbox);
        let len = conn.inbox_len;
        let mut at = 0;
        let outcome = loop {
            let (message, taken) = match rfc4571::next_message(&inbox[at..len], MAX_MESSAGE) {
                Ok(Some(whole)) => whole,
                Ok(None) => break Ok(()),
                Err(_) => break Err(TcpCloseReason::MessageTooLarge),
            };
            at += taken;
            if let Err(reason) = self.decide(slot, message, internal, now) {
                break Err(reason);
            }
        };
        let mut egress = TcpEgress {
            internal,
            connections: &mut self.connections,
        };
        self.executor.flush(&mut egress);
        let mut inbox = inbox;
        inbox.copy_within(at..len, 0);
        if let Some(conn) = self.connections.get(slot) {
            conn.inbox = inbox;
            conn.inbox_len = len - at;
        }
        outcome
    }

    /// Decides one message from `slot`'s client and carries the verdict out. Before the
    /// connection is bound only a forwarded (authentic, admitted) Binding Request binds
    /// it; anything else closes it. A bound connection whose flow has left the table is
    /// closed too.
    fn decide(
        &mut self,
        slot: usize,
        message: &[u8],
        internal: &mut Outbox,
        now: Instant,
    ) -> Result<(), TcpCloseReason> {
        let Some(conn) = self.connections.get(slot) else {
            return Ok(());
        };
        let (flow, bound) = (conn.flow, conn.bound);
        let decision = self
            .executor
            .decide_client(message, flow.client, flow.vip, now);
        let verdict = decision.verdict();
        let mut egress = TcpEgress {
            internal,
            connections: &mut self.connections,
        };
        self.executor.carry_out(decision, message, &mut egress);
        match verdict {
            Verdict::Forward { .. } if !bound => {
                if let Some(conn) = self.connections.get(slot) {
                    conn.bound = true;
                    conn.outbox = Vec::with_capacity(SEND_BUFFER);
                }
                Ok(())
            }
            Verdict::Forward { .. } => Ok(()),
            _ if !bound => Err(TcpCloseReason::FirstMessageRefused),
            Verdict::Drop(DropReason::NoFlow) => Err(TcpCloseReason::FlowEnded),
            // A bad message on a bound connection is dropped (counted); the session lives.
            _ => Ok(()),
        }
    }

    /// A return frame with the TCP bit from the internal socket: decided by the TCP
    /// forwarder and written to its connection.
    pub(crate) fn return_frame(
        &mut self,
        frame: &[u8],
        source: SocketAddr,
        internal: &mut Outbox,
        now: Instant,
    ) {
        let decision = self.executor.decide_internal(frame, source, now);
        let mut egress = TcpEgress {
            internal,
            connections: &mut self.connections,
        };
        self.executor.carry_out(decision, frame, &mut egress);
    }

    /// Writes what the internal batch queued for connections (and sends the internal
    /// socket's batch).
    pub(crate) fn flush(&mut self, internal: &mut Outbox) {
        let mut egress = TcpEgress {
            internal,
            connections: &mut self.connections,
        };
        self.executor.flush(&mut egress);
        // A connection a write failure closed ends its flow too: its flow must not outlive it and take returns for nobody.
        for flow in self.connections.write_failed.drain(..) {
            self.executor.end_flow(&flow);
        }
    }

    fn close(&mut self, slot: usize, reason: TcpCloseReason) {
        self.connections
            .close(slot, reason, Some(&mut self.executor));
    }

    /// The periodic work: up to [`SCAN_PER_TICK`] connections checked for the handshake
    /// and idle timeouts and for a flow that left the table, idle flows expired, counters
    /// published.
    pub(crate) fn tick(&mut self, now: Instant, expire_budget: usize) {
        let slots = self.connections.slots.len();
        for _ in 0..slots.min(SCAN_PER_TICK) {
            self.scan_at = if self.scan_at + 1 >= slots {
                0
            } else {
                self.scan_at + 1
            };
            let slot = self.scan_at;
            let Some(conn) = self.connections.get(slot) else {
                continue;
            };
            let reason = if !conn.bound {
                (now.saturating_duration_since(conn.opened) >= self.policy.handshake_timeout)
                    .then_some(TcpCloseReason::HandshakeTimeout)
            } else if now.saturating_duration_since(conn.last_active) >= self.idle_timeout {
                Some(TcpCloseReason::IdleTimeout)
            } else if self.executor.forwarder().table().peek(&conn.flow).is_none() {
                Some(TcpCloseReason::FlowEnded)
            } else {
                None
            };
            if let Some(reason) = reason {
                self.close(slot, reason);
            }
        }
        self.executor
            .tick(now, expire_budget, &self.metrics.messages);
    }

    /// Closes every connection (the relay is stopping) and publishes the counters.
    pub(crate) fn close_all(&mut self, now: Instant) {
        for slot in 0..self.connections.slots.len() {
            self.close(slot, TcpCloseReason::Stopping);
        }
        self.executor.tick(now, 0, &self.metrics.messages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_grouped_by_their_prefix() {
        let p = |s: &str, v4, v6| {
            ufrag_common::wire::source_prefix(s.parse().unwrap(), v4, v6).to_string()
        };
        assert_eq!(p("198.51.100.77", 24, 56), "198.51.100.0");
        assert_eq!(p("::ffff:198.51.100.77", 24, 56), "198.51.100.0");
        assert_eq!(p("198.51.100.77", 32, 56), "198.51.100.77");
        assert_eq!(p("198.51.100.77", 0, 56), "0.0.0.0");
        assert_eq!(p("2001:db8:1:2:3::9", 24, 56), "2001:db8:1::");
        assert_eq!(p("2001:db8:1:2:3::9", 24, 128), "2001:db8:1:2:3::9");
    }

    #[test]
    fn tcp_groups_ipv6_by_at_most_a_48_so_one_allocation_is_one_prefix() {
        let v6_len = 56.min(TCP_PREFIX_LEN_V6_MAX);
        let p =
            |s: &str| ufrag_common::wire::source_prefix(s.parse().unwrap(), 24, v6_len).to_string();
        // 256 /56s of one /48 are one group.
        assert_eq!(p("2001:db8:7:100::1"), "2001:db8:7::");
        assert_eq!(p("2001:db8:7:ff00::1"), "2001:db8:7::");
        assert_eq!(p("2001:db8:8::1"), "2001:db8:8::");
    }
}
