//! Carrying out a forwarding [`Verdict`]: the one place where a decision becomes I/O
//! requests and where every datagram is counted, so that both relay backends keep only
//! their I/O.
//!
//! In the spirit of quinn's `Transmit` and str0m's `poll_output`, the [`Executor`] never
//! touches a socket. It owns the [`Forwarder`] and the worker's [`WorkerCounters`], and
//! hands the backend a [`Transmit`] (send these bytes to X from Y) through the backend's
//! [`Egress`]. The backend keeps its buffers, sockets, rings and batching.
//!
//! # The counting contract
//!
//! Every datagram received ends in exactly one counter: forwarded `in`, forwarded `out`,
//! or one [`DropReason`], in datagrams and bytes alike (bytes as received). The executor
//! counts a datagram as received when it decides it ([`Executor::decide_client`],
//! [`Executor::decide_internal`], or [`Executor::drop_received`] for a backend's own drop
//! before any decision) and counts its end when it is known:
//!
//! - a drop verdict, or a route lookup (the datagram itself is dropped), at once;
//! - a transmit when the egress settles its [`Ticket`]: [`Tally::sent`] once the kernel
//!   (or the NIC ring) accepted it, [`Tally::failed`] with a reason when it did not. An
//!   egress settles each ticket exactly once, at once or in a later [`Egress::flush`];
//!   the type system makes "at most once" hold (a `Ticket` can be neither copied nor
//!   made outside this module), and a property test checks "at least once" and the
//!   sums under random egress failures.
//!
//! # The route cache
//!
//! A new flow's route (and its periodic refresh) and a lookup for a datagram without a
//! flow go to the egress as [`RouteCacheRequest`]s; a refused request is a counted cache
//! error. Answers come back through [`Executor::cache_answer`].
//!
//! While the cache is asked, the datagram that asked waits (is *parked*) when the
//! backend can send a copy of it later ([`Egress::bytes_of`]: sockets can, AF_XDP frames
//! are rewritten in place and cannot): up to [`PARKED_DATAGRAMS`] per worker and
//! [`PARKED_PER_FLOW`] per flow, each for at most [`PARK_WAIT`]. When the route comes back the parked datagrams are decided
//! again and sent, so a relay restart costs a flow no packet beyond the ones sent while
//! no process held the port; on a miss, a refused route or the deadline they are
//! dropped as `no_flow_cache_lookup`. A parked datagram counts as in flight until then.
//! While a datagram is parked for a flow, later datagrams of that flow do not ask the
//! cache again (a burst of media without a flow costs Redis one question).
//!
//! # The tick
//!
//! [`Executor::tick`] expires idle flows within a budget and publishes the counters.

use core::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::bundle::Bundle;
use crate::flow::FlowKey;
use crate::forward::{Forwarder, RestoreRefused, Route, Verdict};
use crate::frame::{FrameHeader, MAX_HEADER_LEN};
use crate::metrics::{SharedCounters, WorkerCounters};
use crate::reasons::{CacheError, Direction, DropReason, Port};

/// Datagrams one worker holds while the route cache is asked about their flows.
pub const PARKED_DATAGRAMS: usize = 64;
/// Datagrams parked for one flow at most: a burst beyond waits for nothing (dropped as
/// `no_flow_cache_lookup`), so one flow cannot take every slot.
pub const PARKED_PER_FLOW: usize = 4;
/// The longest a datagram waits for the route cache (its command timeout).
pub const PARK_WAIT: Duration = Duration::from_millis(250);
/// The largest datagram that can be parked.
const PARKED_BYTES: usize = 2048;

/// Which of the worker's sockets a datagram leaves from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The worker's internal address (towards transceivers and other relays).
    Internal,
    /// A public VIP (towards a client).
    Vip(SocketAddr),
}

/// The proof that a datagram was counted as received and has not been settled yet. Only
/// the executor makes one; only [`Tally::sent`] or [`Tally::failed`] consume it.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "every ticket is settled exactly once with Tally::sent or Tally::failed"]
pub struct Ticket {
    direction: Direction,
    bytes: u32,
}

impl Ticket {
    /// The direction the datagram is forwarded in.
    pub fn direction(&self) -> Direction {
        self.direction
    }
}

/// The tickets of several datagrams that leave together (the frames of one bundle),
/// settled together: as many counts as tickets went in. Made empty with `default`, grown
/// only from real tickets ([`Tickets::add`]), consumed only by [`Tally::sent_all`] or
/// [`Tally::failed_all`].
#[derive(Debug, Default, PartialEq, Eq)]
#[must_use = "gathered tickets are settled with Tally::sent_all or Tally::failed_all"]
pub struct Tickets {
    /// Datagrams and their bytes (as received), by [`Direction`].
    datagrams: [u32; 2],
    bytes: [u64; 2],
}

impl Tickets {
    /// Takes `ticket` in: it is settled with the others.
    pub fn add(&mut self, ticket: Ticket) {
        let d = ticket.direction as usize;
        self.datagrams[d] += 1;
        self.bytes[d] += u64::from(ticket.bytes);
    }

    /// Takes in every ticket of `other`.
    pub fn merge(&mut self, other: Tickets) {
        for d in 0..2 {
            self.datagrams[d] += other.datagrams[d];
            self.bytes[d] += other.bytes[d];
        }
    }

    /// The datagrams these tickets stand for.
    pub fn len(&self) -> usize {
        self.datagrams.iter().map(|&n| n as usize).sum()
    }

    /// True when no ticket went in.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl crate::bundle::Gather for Tickets {
    fn gather(&mut self, other: Tickets) {
        self.merge(other);
    }
}

impl From<Ticket> for Tickets {
    fn from(ticket: Ticket) -> Self {
        let mut tickets = Tickets::default();
        tickets.add(ticket);
        tickets
    }
}

/// One datagram to send: `header` (if any) followed by `received[payload_at..]`, to `to`,
/// from `from`.
#[derive(Debug)]
pub struct Transmit {
    /// The destination.
    pub to: SocketAddr,
    /// The socket to send from.
    pub from: Source,
    /// A frame header to put before the payload (towards a transceiver or relay).
    pub header: Option<FrameHeader>,
    /// Where the bytes to send start in the received datagram.
    pub payload_at: usize,
    /// Settle this when the datagram's fate is known.
    pub ticket: Ticket,
}

impl Transmit {
    /// Writes the frame header (if any) into `buf` and returns its length.
    pub fn emit_header(&self, buf: &mut [u8; MAX_HEADER_LEN]) -> usize {
        // MAX_HEADER_LEN is the largest header: emit cannot run out of room.
        self.header.map_or(0, |h| h.emit(buf).unwrap_or_default())
    }
}

/// Where the counts of a datagram's end go. Handed to the egress with each call.
#[derive(Debug)]
pub struct Tally<'a> {
    counters: &'a mut WorkerCounters,
}

impl Tally<'_> {
    /// The datagram was handed to the kernel or the NIC: count it forwarded.
    pub fn sent(&mut self, ticket: Ticket) {
        self.counters
            .forwarded(ticket.direction, ticket.bytes as usize);
    }

    /// The datagram could not be sent: count it dropped for `reason`.
    pub fn failed(&mut self, ticket: Ticket, reason: DropReason) {
        self.counters.dropped(reason, ticket.bytes as usize);
    }

    /// The datagrams behind `tickets` left together: count each forwarded, and the
    /// datagram that carried them as a bundle when there were several.
    pub fn sent_all(&mut self, tickets: Tickets) {
        if tickets.len() > 1 {
            self.counters.bundles_sent += 1;
        }
        for direction in Direction::ALL {
            let d = direction as usize;
            self.counters.forwarded_many(
                direction,
                u64::from(tickets.datagrams[d]),
                tickets.bytes[d],
            );
        }
    }

    /// `sends` of the batch just sent each carried several datagrams as GSO segments
    /// (the datagrams themselves are counted by [`Tally::sent_all`]).
    pub fn gso_sends(&mut self, sends: u64) {
        self.counters.gso_sends += sends;
    }

    /// The datagrams behind `tickets` could not be sent: count each dropped for `reason`.
    pub fn failed_all(&mut self, tickets: Tickets, reason: DropReason) {
        let datagrams = tickets.datagrams.iter().map(|&n| u64::from(n)).sum();
        self.counters
            .dropped_many(reason, datagrams, tickets.bytes.iter().sum());
    }
}

/// A request for the route cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteCacheRequest {
    /// Store (or refresh) a flow's route.
    Record {
        /// The flow.
        key: FlowKey,
        /// Where it goes.
        route: Route,
    },
    /// Look a flow up; answer with [`Executor::restore`] or [`Executor::cache_miss`].
    Lookup {
        /// The flow.
        key: FlowKey,
    },
    /// Remove a flow's route: its session ended.
    Forget {
        /// The flow.
        key: FlowKey,
    },
}

/// What a backend does for the executor: its I/O.
pub trait Egress {
    /// The received datagram as the backend holds it: a byte slice for sockets, a frame
    /// address for AF_XDP (whose headers are rewritten in place).
    type Received<'r>: Copy;

    /// Sends (or queues) one datagram and settles `tx.ticket`, now or in a later
    /// [`Egress::flush`].
    fn transmit(&mut self, received: Self::Received<'_>, tx: Transmit, tally: &mut Tally<'_>);

    /// Sends whatever is queued and settles every ticket still held.
    fn flush(&mut self, tally: &mut Tally<'_>);

    /// Hands a request to the route cache without waiting. False when it cannot be
    /// taken (no cache, queue full): the executor counts a cache error.
    fn route_cache(&mut self, request: RouteCacheRequest) -> bool;

    /// Gives back a received datagram that is not being sent (dropped or looked up).
    /// Sockets have nothing to do; AF_XDP recycles the frame.
    fn release(&mut self, received: Self::Received<'_>) {
        let _ = received;
    }

    /// The bytes of a received datagram, when this backend can send a copy of them
    /// later ([`Egress::from_bytes`]). `None` (the default): a datagram that waits for
    /// a route lookup is dropped, not parked.
    fn bytes_of<'r>(received: Self::Received<'r>) -> Option<&'r [u8]> {
        let _ = received;
        None
    }

    /// A received datagram backed by `bytes` (a parked copy); `Some` whenever
    /// [`Egress::bytes_of`] is.
    fn from_bytes<'r>(bytes: &'r [u8]) -> Option<Self::Received<'r>> {
        let _ = bytes;
        None
    }
}

/// One parked datagram.
#[derive(Debug)]
struct ParkedSlot {
    key: Option<FlowKey>,
    since: Instant,
    /// Bytes as counted when received.
    counted: u32,
    len: usize,
    data: Box<[u8; PARKED_BYTES]>,
}

/// A datagram counted as received and decided, not yet carried out.
#[derive(Debug)]
#[must_use = "a decision is carried out with Executor::carry_out"]
pub struct Decision {
    verdict: Verdict,
    bytes: u32,
    now: Instant,
}

impl Decision {
    /// What was decided.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }
}

/// One worker's decisions, their execution, and its counters.
///
/// A backend receives, asks the executor to decide, and has it carry the decision out
/// through its [`Egress`]. The smallest backend, one blocking socket that sends at once:
///
/// ```no_run
/// use std::net::UdpSocket;
/// use std::time::Instant;
/// use ufrag_common::execute::{Egress, Executor, RouteCacheRequest, Tally, Transmit};
/// use ufrag_common::forward::Forwarder;
/// use ufrag_common::frame::MAX_HEADER_LEN;
/// use ufrag_common::reasons::DropReason;
///
/// struct OneSocket(UdpSocket);
///
/// impl Egress for OneSocket {
///     type Received<'r> = &'r [u8];
///
///     fn transmit(&mut self, received: &[u8], tx: Transmit, tally: &mut Tally<'_>) {
///         let mut datagram = [0u8; MAX_HEADER_LEN + 1500];
///         let mut header = [0u8; MAX_HEADER_LEN];
///         let at = tx.emit_header(&mut header);
///         datagram[..at].copy_from_slice(&header[..at]);
///         let payload = &received[tx.payload_at..];
///         let Some(room) = datagram.get_mut(at..at + payload.len()) else {
///             return tally.failed(tx.ticket, DropReason::SendFailed);
///         };
///         room.copy_from_slice(payload);
///         match self.0.send_to(&datagram[..at + payload.len()], tx.to) {
///             Ok(_) => tally.sent(tx.ticket),
///             Err(_) => tally.failed(tx.ticket, DropReason::SendFailed),
///         }
///     }
///
///     fn flush(&mut self, _tally: &mut Tally<'_>) {}
///
///     fn route_cache(&mut self, _request: RouteCacheRequest) -> bool {
///         false // no route cache: each request is a counted cache error
///     }
/// }
///
/// fn serve(forwarder: Forwarder, socket: UdpSocket) -> std::io::Result<()> {
///     let vip = socket.local_addr()?;
///     let mut executor = Executor::new(forwarder, Instant::now());
///     let mut egress = OneSocket(socket.try_clone()?);
///     let mut buf = [0u8; 2048];
///     loop {
///         let (len, client) = socket.recv_from(&mut buf)?;
///         let datagram = &buf[..len];
///         let decision = executor.decide_client(datagram, client, vip, Instant::now());
///         executor.carry_out(decision, datagram, &mut egress);
///     }
/// }
/// ```
#[derive(Debug)]
pub struct Executor {
    forwarder: Forwarder,
    counters: WorkerCounters,
    /// Preallocated: parking never allocates.
    parked: Vec<ParkedSlot>,
}

impl Executor {
    /// An executor around a worker's forwarder, started at `now`.
    pub fn new(forwarder: Forwarder, now: Instant) -> Self {
        Executor {
            forwarder,
            counters: WorkerCounters::default(),
            parked: (0..PARKED_DATAGRAMS)
                .map(|_| ParkedSlot {
                    key: None,
                    since: now,
                    counted: 0,
                    len: 0,
                    data: Box::new([0; PARKED_BYTES]),
                })
                .collect(),
        }
    }

    /// The forwarder (policy and flow table).
    pub fn forwarder(&self) -> &Forwarder {
        &self.forwarder
    }

    /// The counters, with the flow table's counts brought up to date.
    pub fn counters(&mut self) -> &WorkerCounters {
        self.sync_flow_counters();
        &self.counters
    }

    fn received(&mut self, port: Port, len: usize) -> u32 {
        self.counters.received(port, len);
        u32::try_from(len).unwrap_or(u32::MAX)
    }

    /// Counts and decides a datagram that arrived from `client` on public `vip`.
    pub fn decide_client(
        &mut self,
        datagram: &[u8],
        client: SocketAddr,
        vip: SocketAddr,
        now: Instant,
    ) -> Decision {
        let bytes = self.received(Port::Vip, datagram.len());
        let verdict = self.forwarder.from_client(datagram, client, vip, now);
        Decision {
            verdict,
            bytes,
            now,
        }
    }

    /// Counts and decides a datagram that arrived from `source` on the internal port.
    pub fn decide_internal(&mut self, frame: &[u8], source: SocketAddr, now: Instant) -> Decision {
        let bytes = self.received(Port::Internal, frame.len());
        let verdict = self.forwarder.from_internal(frame, source, now);
        Decision {
            verdict,
            bytes,
            now,
        }
    }

    /// Opens a bundle of frames ([`crate::bundle`]) that arrived from `source` on the
    /// internal port. Each frame it yields is then a datagram of its own for
    /// [`Executor::decide_internal`] (or the backend's own path for frames it serves, like
    /// ICE-TCP), so the counting contract counts frames. A bundle from a source that may
    /// send no frames, or one that is not well-formed, is one datagram received and
    /// dropped whole (`frame_source_not_allowed`, `frame_bad_bundle`): `None`.
    pub fn open_bundle<'d>(
        &mut self,
        datagram: &'d [u8],
        source: SocketAddr,
    ) -> Option<Bundle<'d>> {
        let reason = if !self.forwarder.accepts_frames_from(source) {
            DropReason::FrameSourceNotAllowed
        } else {
            match Bundle::parse(datagram) {
                Ok(frames) => {
                    self.counters.bundles_received += 1;
                    return Some(frames);
                }
                Err(_) => DropReason::FrameBadBundle,
            }
        };
        self.drop_received(Port::Internal, datagram.len(), reason);
        None
    }

    /// Counts a datagram the backend dropped before any decision (truncated, not for the
    /// relay, unparsable headers).
    pub fn drop_received(&mut self, port: Port, len: usize, reason: DropReason) {
        self.counters.received(port, len);
        self.counters.dropped(reason, len);
    }

    /// Carries out a decision through `egress` and returns its verdict.
    pub fn carry_out<E: Egress>(
        &mut self,
        decision: Decision,
        received: E::Received<'_>,
        egress: &mut E,
    ) -> Verdict {
        let Decision {
            verdict,
            bytes,
            now,
        } = decision;
        let ticket = |direction| Ticket { direction, bytes };
        if let Some((key, write)) = self.forwarder.take_pending_cache_write() {
            let request = match write {
                Some(route) => RouteCacheRequest::Record { key, route },
                None => RouteCacheRequest::Forget { key },
            };
            let _ = self.ask_cache(egress, request);
        }
        let transmit = match verdict {
            Verdict::Forward {
                to,
                header,
                payload_at,
                record,
            } => {
                if let Some(route) = record {
                    let key = FlowKey::new(header.client, header.vip);
                    let _ = self.ask_cache(egress, RouteCacheRequest::Record { key, route });
                }
                // From a client, or framed by a global relay (`payload_at` > 0): either
                // way the client's datagram goes in.
                Transmit {
                    to,
                    from: Source::Internal,
                    header: Some(header),
                    payload_at,
                    ticket: ticket(Direction::In),
                }
            }
            Verdict::Return {
                client,
                vip,
                payload_at,
            } => Transmit {
                to: client,
                from: Source::Vip(vip),
                header: None,
                payload_at,
                ticket: ticket(Direction::Out),
            },
            Verdict::Relay { to } => Transmit {
                to,
                from: Source::Internal,
                header: None,
                payload_at: 0,
                ticket: ticket(Direction::Out),
            },
            Verdict::LookupRoute { key, question_out } => {
                // One question per flow at a time: the forwarder remembers one is out (or
                // a datagram parked for this key means its lookup is on its way).
                let asked = question_out || self.parked.iter().any(|slot| slot.key == Some(key));
                if !asked && !self.ask_cache(egress, RouteCacheRequest::Lookup { key }) {
                    // Not asked after all: the flow's next datagram may ask.
                    self.forwarder.route_question_lost(&key);
                }
                let parked =
                    E::bytes_of(received).is_some_and(|data| self.park(key, data, bytes, now));
                if !parked {
                    self.counters
                        .dropped(DropReason::NoFlowCacheLookup, bytes as usize);
                }
                egress.release(received);
                return verdict;
            }
            Verdict::Drop(reason) => {
                self.counters.dropped(reason, bytes as usize);
                egress.release(received);
                return verdict;
            }
        };
        let mut tally = Tally {
            counters: &mut self.counters,
        };
        egress.transmit(received, transmit, &mut tally);
        verdict
    }

    /// Hands `request` to the egress; false (counted) if its queue is full.
    fn ask_cache<E: Egress>(&mut self, egress: &mut E, request: RouteCacheRequest) -> bool {
        let queued = egress.route_cache(request);
        if !queued {
            self.counters.cache_failed(CacheError::RequestQueueFull, 1);
        }
        queued
    }

    /// Has the egress send what it queued and settle every ticket it holds.
    pub fn flush<E: Egress>(&mut self, egress: &mut E) {
        let mut tally = Tally {
            counters: &mut self.counters,
        };
        egress.flush(&mut tally);
    }

    /// Keeps a copy of `data` (counted as `counted` bytes) until the cache answers for
    /// `key`; false when every slot is taken or it is too large (it is dropped then).
    fn park(&mut self, key: FlowKey, data: &[u8], counted: u32, now: Instant) -> bool {
        if data.len() > PARKED_BYTES {
            return false;
        }
        // One flow (a spoofed one, say) may not take the slots restarts need for others.
        let parked_for_key = self.parked.iter().filter(|s| s.key == Some(key)).count();
        if parked_for_key >= PARKED_PER_FLOW {
            return false;
        }
        let Some(slot) = self.parked.iter_mut().find(|s| s.key.is_none()) else {
            return false;
        };
        slot.key = Some(key);
        slot.since = now;
        slot.counted = counted;
        slot.len = data.len();
        slot.data[..data.len()].copy_from_slice(data);
        true
    }

    /// Drops the parked datagrams for which `which` holds, as `no_flow_cache_lookup`.
    fn discard_parked(&mut self, which: impl Fn(&ParkedSlot) -> bool) {
        for slot in &mut self.parked {
            if slot.key.is_some() && which(slot) {
                slot.key = None;
                self.counters
                    .dropped(DropReason::NoFlowCacheLookup, slot.counted as usize);
            }
        }
    }

    /// The cache's answer for `key`: a route restores the flow and sends what was parked
    /// for it; no route is a miss, and what was parked is dropped.
    pub fn cache_answer<E: Egress>(
        &mut self,
        key: &FlowKey,
        route: Option<Route>,
        now: Instant,
        egress: &mut E,
    ) {
        let restored = match route {
            Some(route) => self.restore(key, route, now),
            None => {
                self.cache_miss();
                self.forwarder.route_missing(key, now);
                false
            }
        };
        if !restored {
            self.discard_parked(|slot| slot.key == Some(*key));
            return;
        }
        for i in 0..self.parked.len() {
            if self.parked[i].key != Some(*key) {
                continue;
            }
            self.parked[i].key = None;
            let slot = &self.parked[i];
            let data = &slot.data[..slot.len];
            let verdict = self.forwarder.from_client(data, key.client, key.vip, now);
            let ticket = Ticket {
                direction: Direction::In,
                bytes: slot.counted,
            };
            match (verdict, E::from_bytes(data)) {
                (
                    Verdict::Forward {
                        to,
                        header,
                        payload_at,
                        record,
                    },
                    Some(received),
                ) => {
                    if let Some(route) = record
                        && !egress.route_cache(RouteCacheRequest::Record { key: *key, route })
                    {
                        self.counters.cache_failed(CacheError::RequestQueueFull, 1);
                    }
                    let transmit = Transmit {
                        to,
                        from: Source::Internal,
                        header: Some(header),
                        payload_at,
                        ticket,
                    };
                    let mut tally = Tally {
                        counters: &mut self.counters,
                    };
                    egress.transmit(received, transmit, &mut tally);
                }
                (Verdict::Drop(reason), _) => {
                    self.counters.dropped(reason, ticket.bytes as usize);
                }
                _ => self
                    .counters
                    .dropped(DropReason::NoFlowCacheLookup, ticket.bytes as usize),
            }
        }
    }

    /// Installs a route the cache returned for `key`. A cached next hop outside the
    /// allowed destinations is refused and counted as a cache error (the cache may hold
    /// what an older configuration allowed); a full table is counted by the table.
    pub fn restore(&mut self, key: &FlowKey, route: Route, now: Instant) -> bool {
        match self.forwarder.restore(key, route, now) {
            Ok(()) => {
                self.counters.cache_hits += 1;
                true
            }
            Err(RestoreRefused::DestinationNotAllowed) => {
                self.counters.cache_failed(CacheError::RouteNotAllowed, 1);
                false
            }
            Err(RestoreRefused::TableFull) => false,
        }
    }

    /// Counts a lookup the cache had no route for.
    pub fn cache_miss(&mut self) {
        self.counters.cache_misses += 1;
    }

    /// Counts route-cache requests that failed after they were taken (Redis down, slow,
    /// answer queue full), by reason ([`CacheError::index`]).
    pub fn cache_failures(&mut self, failures: &[u64; CacheError::COUNT]) {
        for (reason, count) in CacheError::ALL.iter().zip(failures) {
            self.counters.cache_failed(*reason, *count);
        }
    }

    /// Ends `key`'s flow now (its TCP connection closed); whether it was held.
    pub fn end_flow(&mut self, key: &FlowKey) -> bool {
        self.forwarder.end_flow(key)
    }

    /// Expires up to `budget` idle flows at `now`; returns how many.
    pub fn expire(&mut self, now: Instant, budget: usize) -> usize {
        self.forwarder.expire(now, budget)
    }

    /// Verifies first packets under `keys` from now on (a key rotation).
    pub fn set_hint_keys(&mut self, keys: crate::hint::HintKeys) {
        self.forwarder.set_hint_keys(keys);
    }

    /// The periodic work: parked datagrams past [`PARK_WAIT`] dropped, expiry within
    /// `budget`, then publication of the counters.
    pub fn tick(&mut self, now: Instant, budget: usize, shared: &SharedCounters) {
        self.discard_parked(|slot| now.saturating_duration_since(slot.since) >= PARK_WAIT);
        self.expire(now, budget);
        shared.publish(self.counters());
    }

    fn sync_flow_counters(&mut self) {
        let table = self.forwarder.table();
        let c = table.counters();
        self.counters.flows_active = table.len() as u64;
        self.counters.flows_created = c.created;
        self.counters.flows_expired = c.expired;
        self.counters.flows_refused = c.refused;
        self.counters.flows_shed = c.shed;
        let f = self.forwarder.counters();
        self.counters.shared_returns = f.shared_returns;
        self.counters.flows_unshared = f.flows_unshared;
        self.counters.flows_over_prefix_cap = f.flows_over_prefix_cap;
        self.counters.replay_overwrites = f.replay_overwrites;
    }
}
