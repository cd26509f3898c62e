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
//! or one [`DropReason`], in packets and bytes alike (bytes as received). The executor
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
//! error. Answers come back through [`Executor::restore`] / [`Executor::cache_miss`].
//!
//! # The tick
//!
//! [`Executor::tick`] expires idle flows within a budget and publishes the counters.

use core::net::SocketAddr;
use std::time::Instant;

use crate::flow::FlowKey;
use crate::forward::{Forwarder, RestoreRefused, Route, Verdict};
use crate::frame::{FrameHeader, MAX_HEADER_LEN};
use crate::metrics::{Direction, DropReason, Port, SharedCounters, WorkerCounters};

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
}

/// A datagram counted as received and decided, not yet carried out.
#[derive(Debug)]
#[must_use = "a decision is carried out with Executor::carry_out"]
pub struct Decision {
    verdict: Verdict,
    bytes: u32,
}

impl Decision {
    /// What was decided.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }
}

/// One worker's decisions, their execution, and its counters.
#[derive(Debug)]
pub struct Executor {
    forwarder: Forwarder,
    counters: WorkerCounters,
}

impl Executor {
    /// An executor around a worker's forwarder.
    pub fn new(forwarder: Forwarder) -> Self {
        Executor {
            forwarder,
            counters: WorkerCounters::default(),
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
        Decision { verdict, bytes }
    }

    /// Counts and decides a datagram that arrived from `source` on the internal port.
    pub fn decide_internal(&mut self, frame: &[u8], source: SocketAddr, now: Instant) -> Decision {
        let bytes = self.received(Port::Internal, frame.len());
        let verdict = self.forwarder.from_internal(frame, source, now);
        Decision { verdict, bytes }
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
        let Decision { verdict, bytes } = decision;
        let ticket = |direction| Ticket { direction, bytes };
        let transmit = match verdict {
            Verdict::Forward {
                to,
                header,
                payload_at,
                record,
            } => {
                if let Some(route) = record {
                    let key = FlowKey::new(header.client, header.vip);
                    self.ask_cache(egress, RouteCacheRequest::Record { key, route });
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
            Verdict::LookupRoute { key } => {
                self.counters
                    .dropped(DropReason::NoFlowCacheLookup, bytes as usize);
                self.ask_cache(egress, RouteCacheRequest::Lookup { key });
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

    fn ask_cache<E: Egress>(&mut self, egress: &mut E, request: RouteCacheRequest) {
        if !egress.route_cache(request) {
            self.counters.cache_errors += 1;
        }
    }

    /// Has the egress send what it queued and settle every ticket it holds.
    pub fn flush<E: Egress>(&mut self, egress: &mut E) {
        let mut tally = Tally {
            counters: &mut self.counters,
        };
        egress.flush(&mut tally);
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
                self.counters.cache_errors += 1;
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
    /// answer queue full).
    pub fn cache_failures(&mut self, failures: u64) {
        self.counters.cache_errors += failures;
    }

    /// Expires up to `budget` idle flows at `now`; returns how many.
    pub fn expire(&mut self, now: Instant, budget: usize) -> usize {
        self.forwarder.expire(now, budget)
    }

    /// The periodic work: expiry within `budget`, then publication of the counters.
    pub fn tick(&mut self, now: Instant, budget: usize, shared: &SharedCounters) {
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
    }
}
