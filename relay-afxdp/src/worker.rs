//! One AF_XDP relay worker: one socket on one (interface, queue), pinned to its core,
//! running the same `Forwarder` as relay-mio. Frames are rewritten in place in the UMEM:
//! for a client datagram the frame header goes into the frame's headroom just before the
//! datagram, then new Ethernet/IP/UDP headers before that; for a return frame the new
//! headers overwrite the end of the old ones so the client's datagram starts right after
//! them. The payload is never copied; both checksums are computed in full.
//!
//! A worker takes return frames sent to any worker's internal address: the NIC's RSS
//! puts a transceiver's reply on any queue, so a return for a flow another worker owns
//! is decided from the forwarder's shared return paths (`ufrag_common::returns`).
//!
//! Busy-poll mode spins on the rings (DPDK style) and counts empty and productive polls;
//! wakeup mode sleeps in poll(2) on the socket when the rings are empty.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_common::config::PollMode;
use ufrag_common::execute::{Egress, Executor, RouteCacheRequest, Source, Tally, Ticket, Transmit};
use ufrag_common::forward::Forwarder;
use ufrag_common::metrics::SharedCounters;
use ufrag_common::reasons::{DropReason, Port};
use ufrag_common::runtime::cache::{CacheClient, deliver_answers};
use ufrag_common::runtime::keys::KeyReader;

use crate::neighbours::Neighbours;
use crate::packet::{Rewrite, parse_udp, plan, write_udp};
use crate::xsk::{RxFrame, UmemSocket, XdpSocket};

/// How often the worker expires flows, refreshes neighbours and publishes counters.
pub const TICK: Duration = Duration::from_millis(50);
/// How long a frame may wait for its next hop's MAC before it is dropped: the kernel's
/// default ARP/ND retransmit time (`retrans_time_ms`), so one lost request or a busy
/// machine does not cost the first packets of a flow.
pub const HOLD: Duration = Duration::from_secs(1);
/// How many frames may wait for MACs at once.
pub const MAX_PENDING: usize = 256;
/// Flows expired per tick at most.
const EXPIRE_BUDGET: usize = 4096;

/// A received frame as the egress needs it to rewrite in place.
#[derive(Clone, Copy, Debug)]
pub struct UmemFrame {
    /// The frame's address in the UMEM (what the RX ring gave).
    addr: u64,
    /// Offset of the UDP payload in the frame's buffer.
    payload_at: usize,
    /// Length of the UDP payload.
    payload_len: usize,
}

/// A frame ready to send but for its destination MAC.
#[derive(Debug)]
struct Pending {
    addr: u64,
    len: usize,
    dst: IpAddr,
    since: Instant,
    ticket: Ticket,
}

/// Poll counters of a busy-polling worker (DPDK style: a busy poller is 100 % busy by
/// construction, so its useful work shows as productive polls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Polls that found frames.
    pub productive: u64,
    /// Polls that found nothing.
    pub empty: u64,
}

/// The worker's I/O: its AF_XDP socket (UMEM and rings), next-hop MACs, frames held
/// for a MAC, and its route-cache client. The executor drives it through [`Egress`].
#[derive(Debug)]
struct XskEgress<S> {
    socket: S,
    neighbours: Neighbours,
    if_mac: [u8; 6],
    internal: SocketAddr,
    pending: VecDeque<Pending>,
    cache: Option<CacheClient>,
    now: Instant,
}

impl<S: UmemSocket> XskEgress<S> {
    /// Writes Ethernet/IP/UDP headers at `start` in the frame's buffer for a datagram of
    /// `payload_len` bytes following them, then sends it, or holds it until the kernel
    /// has resolved the next hop's MAC (as the kernel itself queues packets awaiting
    /// ARP), at most [`HOLD`] and [`MAX_PENDING`] frames.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        frame: UmemFrame,
        start: usize,
        src: SocketAddr,
        dst: SocketAddr,
        payload_len: usize,
        ticket: Ticket,
        tally: &mut Tally<'_>,
    ) {
        let mac = self.neighbours.mac_for(dst.ip());
        let if_mac = self.if_mac;
        let buf = self.socket.frame_buffer(frame.addr);
        let written = buf
            .get_mut(start..)
            .and_then(|out| write_udp(out, if_mac, mac.unwrap_or([0; 6]), src, dst, payload_len));
        let Some(len) = written else {
            return self.fail(frame.addr, ticket, DropReason::TooLarge, tally);
        };
        let addr = self.socket.address_at(frame.addr, start);
        match mac {
            Some(_) => self.send(addr, len, ticket, tally),
            None if self.pending.len() < MAX_PENDING => self.pending.push_back(Pending {
                addr,
                len,
                dst: dst.ip(),
                since: self.now,
                ticket,
            }),
            None => self.fail(addr, ticket, DropReason::NeighbourUnresolved, tally),
        }
    }

    fn send(&mut self, addr: u64, len: usize, ticket: Ticket, tally: &mut Tally<'_>) {
        if self.socket.tx_backlog_full() {
            // Kicked and reaped first: only a device that pushes back leaves it full.
            self.socket.flush_tx();
            self.socket.maintain();
            if self.socket.tx_backlog_full() {
                return self.fail(addr, ticket, DropReason::TxBacklogFull, tally);
            }
        }
        if self.socket.transmit(addr, len as u32) {
            tally.sent(ticket);
        } else {
            self.fail(addr, ticket, DropReason::SendFailed, tally);
        }
    }

    fn fail(&mut self, addr: u64, ticket: Ticket, reason: DropReason, tally: &mut Tally<'_>) {
        tally.failed(ticket, reason);
        self.socket.recycle(addr);
    }

    /// Sends held frames whose next hop has been resolved; drops those held longer than
    /// [`HOLD`].
    fn flush_pending(&mut self, tally: &mut Tally<'_>) {
        let mut i = 0;
        while i < self.pending.len() {
            let (dst, since) = (self.pending[i].dst, self.pending[i].since);
            let mac = self.neighbours.mac_for(dst);
            let expired = self.now.saturating_duration_since(since) > HOLD;
            if mac.is_none() && !expired {
                i += 1;
                continue;
            }
            let Some(p) = self.pending.remove(i) else {
                break;
            };
            match mac {
                Some(mac) => {
                    let offset = self.socket.offset_in_buffer(p.addr);
                    let buf = self.socket.frame_buffer(p.addr);
                    if let Some(dst_mac) = buf.get_mut(offset..offset + 6) {
                        dst_mac.copy_from_slice(&mac);
                    }
                    self.send(p.addr, p.len, p.ticket, tally);
                }
                None => self.fail(p.addr, p.ticket, DropReason::NeighbourUnresolved, tally),
            }
        }
    }
}

impl<S: UmemSocket> Egress for XskEgress<S> {
    type Received<'r> = UmemFrame;

    /// Rewrites the frame in place: a frame header (if any) goes just before the bytes
    /// to send, new Ethernet/IP/UDP headers just before that; the payload never moves.
    fn transmit(&mut self, frame: UmemFrame, tx: Transmit, tally: &mut Tally<'_>) {
        let planned = plan(Rewrite {
            payload_at: frame.payload_at,
            payload_len: frame.payload_len,
            skip: tx.payload_at,
            frame_header_len: tx.header.map_or(0, |h| h.encoded_len()),
            to: tx.to,
        });
        let layout = match planned {
            Ok(layout) => layout,
            Err(reason) => return self.fail(frame.addr, tx.ticket, reason, tally),
        };
        if let (Some(header), Some(at)) = (tx.header, layout.frame_header_at) {
            let buf = self.socket.frame_buffer(frame.addr);
            let emitted = buf
                .get_mut(at..at + header.encoded_len())
                .and_then(|out| header.emit(out).ok());
            if emitted.is_none() {
                return self.fail(frame.addr, tx.ticket, DropReason::TooLarge, tally);
            }
        }
        let src = match tx.from {
            Source::Internal => self.internal,
            Source::Vip(vip) => vip,
        };
        self.emit(
            frame,
            layout.start,
            src,
            tx.to,
            layout.udp_payload_len,
            tx.ticket,
            tally,
        );
    }

    fn flush(&mut self, tally: &mut Tally<'_>) {
        if !self.pending.is_empty() {
            self.flush_pending(tally);
        }
        self.socket.flush_tx();
    }

    fn route_cache(&mut self, request: RouteCacheRequest) -> bool {
        self.cache.as_ref().is_some_and(|c| c.submit(request))
    }

    fn release(&mut self, frame: UmemFrame) {
        self.socket.recycle(frame.addr);
    }
}

/// What a worker is built from.
#[derive(Debug)]
pub struct WorkerParts<S = XdpSocket> {
    /// Worker index (also its RX queue).
    pub index: usize,
    /// Its socket, bound to the queue.
    pub socket: S,
    /// The shared decision code with this worker's flow table.
    pub forwarder: Forwarder,
    /// Where counters are published.
    pub shared: Arc<SharedCounters>,
    /// Public VIPs.
    pub vips: Vec<SocketAddr>,
    /// This worker's internal address (what it sends to transceivers from).
    pub internal: SocketAddr,
    /// Every worker's internal address: a transceiver's reply to any of them may land
    /// on this worker's queue.
    pub internals: Vec<SocketAddr>,
    /// The interface's MAC.
    pub if_mac: [u8; 6],
    /// Next-hop MACs.
    pub neighbours: Neighbours,
    /// Busy or wakeup.
    pub mode: PollMode,
    /// Frames per receive batch.
    pub batch: usize,
}

/// One worker: one AF_XDP socket on one (interface, queue), pinned to its core.
#[derive(Debug)]
pub struct AfXdpWorker<S = XdpSocket> {
    index: usize,
    executor: Executor,
    /// The hint keys, when they can change (set by the lifecycle before the worker runs).
    keys: Option<KeyReader>,
    shared: Arc<SharedCounters>,
    egress: XskEgress<S>,
    vips: Vec<SocketAddr>,
    internals: Vec<SocketAddr>,
    mode: PollMode,
    rx: Vec<RxFrame>,
    polls: PollStats,
}

impl<S: UmemSocket> AfXdpWorker<S> {
    /// A worker with everything its loop needs allocated up front (the receive batch,
    /// room for every held frame).
    pub fn new(parts: WorkerParts<S>) -> Self {
        AfXdpWorker {
            index: parts.index,
            executor: Executor::new(parts.forwarder, std::time::Instant::now()),
            keys: None,
            shared: parts.shared,
            egress: XskEgress {
                socket: parts.socket,
                neighbours: parts.neighbours,
                if_mac: parts.if_mac,
                internal: parts.internal,
                pending: VecDeque::with_capacity(MAX_PENDING),
                cache: None,
                now: Instant::now(),
            },
            vips: parts.vips,
            internals: parts.internals,
            mode: parts.mode,
            rx: vec![RxFrame { addr: 0, len: 0 }; parts.batch.max(1)],
            polls: PollStats::default(),
        }
    }

    /// The worker's index (and RX queue).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Attaches the worker's route-cache client.
    pub fn set_cache(&mut self, cache: CacheClient) {
        self.egress.cache = Some(cache);
    }

    /// Attaches the worker's view of the hint keys, adopted on its tick when they change.
    pub fn set_keys(&mut self, keys: KeyReader) {
        self.keys = Some(keys);
    }

    /// Runs until `stop`; returns the poll counters.
    pub fn run(mut self, stop: &AtomicBool) -> PollStats {
        let mut next_tick = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            self.egress.now = now;
            if now >= next_tick {
                self.tick(now);
                next_tick = now + TICK;
            }
            self.egress.socket.maintain();
            if !self.egress.pending.is_empty() {
                self.executor.flush(&mut self.egress);
            }
            let n = self.egress.socket.receive(&mut self.rx);
            if n == 0 {
                self.polls.empty += 1;
                match self.mode {
                    PollMode::Busy => {
                        // Nothing else would kick the kernel to send a backlog.
                        if self.egress.socket.tx_waiting() > 0 {
                            self.egress.socket.flush_tx();
                        }
                        std::hint::spin_loop();
                    }
                    PollMode::Wakeup => self.wait(next_tick),
                }
                continue;
            }
            self.polls.productive += 1;
            self.adopt_new_keys();
            for i in 0..n {
                let frame = self.rx[i];
                self.handle(frame, now);
            }
            self.executor.flush(&mut self.egress);
        }
        self.tick(Instant::now());
        self.polls
    }

    /// Sleeps in poll(2) until a frame arrives or the next tick, at most 1 ms while frames
    /// wait to be sent: in copy mode each poll also sends up to 32 of them, so a backlog
    /// drains while the worker is idle instead of leaving with the next traffic.
    fn wait(&self, until: Instant) {
        let longest = if self.egress.socket.tx_waiting() > 0 {
            1
        } else {
            50
        };
        let timeout = until
            .saturating_duration_since(Instant::now())
            .as_millis()
            .min(longest) as i32;
        crate::xsk::poll_readable(self.egress.socket.fd(), timeout.max(1));
    }

    /// Verifies first packets under the newest hint keys: an atomic load per batch, and
    /// a copy of the keys after a reload. Checked before each batch is handled, so a frame
    /// read after a reload was published meets the new keys.
    fn adopt_new_keys(&mut self) {
        if let Some(keys) = self.keys.as_mut().and_then(KeyReader::changed) {
            self.executor.set_hint_keys(keys);
        }
    }

    fn tick(&mut self, now: Instant) {
        self.egress.neighbours.refresh();
        deliver_answers(
            &mut self.executor,
            &mut self.egress,
            |egress| egress.cache.as_ref(),
            now,
        );
        self.executor.tick(now, EXPIRE_BUDGET, &self.shared);
    }

    fn handle(&mut self, f: RxFrame, now: Instant) {
        let data_off = self.egress.socket.offset_in_buffer(f.addr);
        let len = f.len as usize;
        let decision = {
            let buf = self.egress.socket.frame_buffer(f.addr);
            let Some(frame) = buf.get(data_off..data_off + len) else {
                self.executor
                    .drop_received(Port::Vip, len, DropReason::TooLarge);
                return self.egress.socket.recycle(f.addr);
            };
            let Some(u) = parse_udp(frame) else {
                self.executor
                    .drop_received(Port::Vip, len, DropReason::Unclassified);
                return self.egress.socket.recycle(f.addr);
            };
            let payload = &frame[u.payload_at..u.payload_at + u.payload_len];
            let umem = UmemFrame {
                addr: f.addr,
                payload_at: data_off + u.payload_at,
                payload_len: u.payload_len,
            };
            if self.vips.contains(&u.dst) {
                (
                    self.executor.decide_client(payload, u.src, u.dst, now),
                    umem,
                )
            } else if self.internals.contains(&u.dst) {
                (self.executor.decide_internal(payload, u.src, now), umem)
            } else {
                self.executor
                    .drop_received(Port::Vip, u.payload_len, DropReason::NotForRelay);
                return self.egress.socket.recycle(f.addr);
            }
        };
        let (decision, umem) = decision;
        self.executor.carry_out(decision, umem, &mut self.egress);
    }
}
