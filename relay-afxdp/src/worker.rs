//! One AF_XDP relay worker: one socket on one (interface, queue), pinned to its core,
//! running the same `Forwarder` as relay-mio. Frames are rewritten in place in the UMEM:
//! for a client datagram the frame header goes into the frame's headroom just before the
//! datagram, then new Ethernet/IP/UDP headers before that; for a return frame the new
//! headers overwrite the end of the old ones so the client's datagram starts right after
//! them. The payload is never copied; both checksums are computed in full.
//!
//! Busy-poll mode spins on the rings (DPDK style) and counts empty and productive polls;
//! wakeup mode sleeps in poll(2) on the socket when the rings are empty.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_common::flow::FlowKey;
use ufrag_common::forward::{Forwarder, Verdict};
use ufrag_common::metrics::{Direction, DropReason, SharedCounters};
use ufrag_common::runtime::cache::CacheClient;

use crate::neighbours::Neighbours;
use crate::packet::{headers_len, parse_udp, write_udp};
use crate::xsk::{RxFrame, XdpSocket};

/// How often the worker expires flows, refreshes neighbours and publishes counters.
pub const TICK: Duration = Duration::from_millis(50);
/// How long a frame may wait for its next hop's MAC before it is dropped.
pub const HOLD: Duration = Duration::from_millis(200);
/// How many frames may wait for MACs at once.
pub const MAX_PENDING: usize = 256;

/// Where an outgoing datagram is being built.
#[derive(Clone, Copy, Debug)]
struct Outgoing {
    /// The received frame's address (for drops).
    frame: u64,
    /// The UMEM chunk's base address.
    base: u64,
    /// Offset of the new Ethernet header in the chunk.
    start: usize,
    src: SocketAddr,
    dst: SocketAddr,
}

/// A frame ready to send but for its destination MAC.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    addr: u64,
    len: usize,
    dst: std::net::IpAddr,
    since: Instant,
    direction: Direction,
    bytes: usize,
}

/// How the worker waits when the rings are empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollMode {
    /// Spin on the rings (100 % of a core, lowest latency).
    Busy,
    /// Sleep in poll(2) until the kernel has frames.
    Wakeup,
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

/// One worker.
#[derive(Debug)]
pub struct AfXdpWorker {
    /// Worker index.
    pub index: usize,
    /// Its socket.
    pub socket: XdpSocket,
    /// The shared decision code.
    pub forwarder: Forwarder,
    /// Where counters are published.
    pub shared: Arc<SharedCounters>,
    /// Route cache, if configured.
    pub cache: Option<CacheClient>,
    /// Public VIPs.
    pub vips: Vec<SocketAddr>,
    /// This worker's internal address.
    pub internal: SocketAddr,
    /// The interface's MAC.
    pub if_mac: [u8; 6],
    /// Next-hop MACs.
    pub neighbours: Neighbours,
    /// Busy or wakeup.
    pub mode: PollMode,
    /// Frames per receive batch.
    pub batch: usize,
    /// Poll counters.
    pub polls: PollStats,
    /// Frames waiting for their next hop's MAC.
    pub pending: std::collections::VecDeque<Pending>,
}

impl AfXdpWorker {
    /// Runs until `stop`.
    pub fn run(mut self, stop: &AtomicBool) {
        let mut rx = vec![RxFrame { addr: 0, len: 0 }; self.batch.max(1)];
        let mut next_tick = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next_tick {
                self.tick(now);
                next_tick = now + TICK;
            }
            self.socket.maintain();
            if !self.pending.is_empty() {
                self.flush_pending(now);
                self.socket.flush_tx();
            }
            let n = self.socket.receive(&mut rx);
            if n == 0 {
                self.polls.empty += 1;
                match self.mode {
                    PollMode::Busy => std::hint::spin_loop(),
                    PollMode::Wakeup => self.wait(next_tick),
                }
                continue;
            }
            self.polls.productive += 1;
            for f in &rx[..n] {
                self.handle(*f, now);
            }
            self.socket.flush_tx();
        }
        self.tick(Instant::now());
    }

    fn wait(&self, until: Instant) {
        let timeout = until
            .saturating_duration_since(Instant::now())
            .as_millis()
            .min(50) as i32;
        crate::xsk::poll_readable(self.socket.fd(), timeout.max(1));
    }

    fn tick(&mut self, now: Instant) {
        self.forwarder.expire(now, 4096);
        self.neighbours.refresh();
        if let Some(cache) = &self.cache {
            let failures = cache.take_failures();
            let mut answers = vec![];
            while let Some(a) = cache.try_answer() {
                answers.push(a);
            }
            self.forwarder.counters_mut().cache_errors += failures;
            for a in answers {
                match a.route {
                    Some(route) => {
                        self.forwarder.restore(&a.key, route, now);
                    }
                    None => self.forwarder.counters_mut().cache_misses += 1,
                }
            }
        }
        self.shared.publish(self.forwarder.counters());
    }

    fn drop_frame(&mut self, addr: u64, reason: DropReason) {
        self.forwarder.counters_mut().dropped(reason);
        self.socket.recycle(addr);
    }

    /// Drops a frame the forwarder had already counted as forwarded in `direction`.
    fn drop_forwarded(
        &mut self,
        addr: u64,
        reason: DropReason,
        direction: Direction,
        bytes: usize,
    ) {
        let c = self.forwarder.counters_mut();
        c.packets[direction as usize] = c.packets[direction as usize].saturating_sub(1);
        c.bytes[direction as usize] = c.bytes[direction as usize].saturating_sub(bytes as u64);
        self.drop_frame(addr, reason);
    }

    fn handle(&mut self, f: RxFrame, now: Instant) {
        let frame_size = u64::from(self.socket.frame_size());
        let base = f.addr - f.addr % frame_size;
        let data_off = (f.addr - base) as usize;
        let len = f.len as usize;
        let verdict = {
            let buf = self.socket.frame_buffer(f.addr);
            let Some(frame) = buf.get(data_off..data_off + len) else {
                return self.drop_frame(f.addr, DropReason::TooLarge);
            };
            let Some(u) = parse_udp(frame) else {
                return self.drop_frame(f.addr, DropReason::Unclassified);
            };
            let payload = &frame[u.payload_at..u.payload_at + u.payload_len];
            let at = data_off + u.payload_at;
            if self.vips.contains(&u.dst) {
                (
                    self.forwarder.from_client(payload, u.src, u.dst, now),
                    at,
                    u.payload_len,
                )
            } else if u.dst == self.internal {
                (
                    self.forwarder.from_internal(payload, u.src, now),
                    at,
                    u.payload_len,
                )
            } else {
                return self.drop_frame(f.addr, DropReason::NotForRelay);
            }
        };
        let (verdict, payload_at, payload_len) = verdict;
        match verdict {
            Verdict::Forward {
                to,
                header,
                payload_at: inner,
                record,
            } => {
                let inner_at = payload_at + inner;
                let inner_len = payload_len - inner;
                let hlen = header.encoded_len();
                let Some(start) = inner_at.checked_sub(hlen + headers_len(&to)) else {
                    return self.drop_forwarded(
                        f.addr,
                        DropReason::TooLarge,
                        Direction::In,
                        inner_len,
                    );
                };
                let internal = self.internal;
                let buf = self.socket.frame_buffer(f.addr);
                let _ = header.emit(&mut buf[inner_at - hlen..inner_at]);
                let out = Outgoing {
                    frame: f.addr,
                    base,
                    start,
                    src: internal,
                    dst: to,
                };
                self.emit(out, hlen + inner_len, Direction::In, inner_len, now);
                if let Some(route) = record {
                    let key = FlowKey::new(header.client, header.vip);
                    let ok = self.cache.as_ref().is_some_and(|c| c.record(key, route));
                    if !ok && self.cache.is_some() {
                        self.forwarder.counters_mut().cache_errors += 1;
                    }
                }
            }
            Verdict::Return {
                client,
                vip,
                payload_at: inner,
            } => {
                let inner_at = payload_at + inner;
                let out_len = payload_len - inner;
                let Some(start) = inner_at.checked_sub(headers_len(&client)) else {
                    return self.drop_forwarded(
                        f.addr,
                        DropReason::TooLarge,
                        Direction::Out,
                        out_len,
                    );
                };
                let out = Outgoing {
                    frame: f.addr,
                    base,
                    start,
                    src: vip,
                    dst: client,
                };
                self.emit(out, out_len, Direction::Out, out_len, now);
            }
            Verdict::Relay { to } => {
                let Some(start) = payload_at.checked_sub(headers_len(&to)) else {
                    return self.drop_forwarded(
                        f.addr,
                        DropReason::TooLarge,
                        Direction::Out,
                        payload_len,
                    );
                };
                let out = Outgoing {
                    frame: f.addr,
                    base,
                    start,
                    src: self.internal,
                    dst: to,
                };
                self.emit(out, payload_len, Direction::Out, payload_len, now);
            }
            Verdict::LookupRoute { key } => {
                let asked = self.cache.as_ref().is_some_and(|c| c.lookup(key));
                if !asked {
                    self.forwarder.counters_mut().cache_errors += 1;
                }
                self.socket.recycle(f.addr);
            }
            Verdict::Drop(_) => self.socket.recycle(f.addr),
        }
    }

    /// Writes the headers of an outgoing datagram and sends it, or holds it until the
    /// kernel has resolved the next hop's MAC (as the kernel itself queues packets
    /// awaiting ARP), at most [`HOLD`] and [`MAX_PENDING`] frames.
    fn emit(
        &mut self,
        out: Outgoing,
        payload_len: usize,
        direction: Direction,
        bytes: usize,
        now: Instant,
    ) {
        let mac = self.neighbours.mac_for(out.dst.ip(), now);
        let if_mac = self.if_mac;
        let buf = self.socket.frame_buffer(out.frame);
        let Some(n) = write_udp(
            &mut buf[out.start..],
            if_mac,
            mac.unwrap_or([0; 6]),
            out.src,
            out.dst,
            payload_len,
        ) else {
            return self.drop_forwarded(out.frame, DropReason::TooLarge, direction, bytes);
        };
        let addr = out.base + out.start as u64;
        match mac {
            Some(_) => self.send(addr, n),
            None if self.pending.len() < MAX_PENDING => self.pending.push_back(Pending {
                addr,
                len: n,
                dst: out.dst.ip(),
                since: now,
                direction,
                bytes,
            }),
            None => self.drop_forwarded(addr, DropReason::NeighbourUnresolved, direction, bytes),
        }
    }

    /// Sends held frames whose next hop has been resolved; drops (and counts) those held
    /// longer than [`HOLD`].
    fn flush_pending(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.pending.len() {
            let p = self.pending[i];
            match self.neighbours.mac_for(p.dst, now) {
                Some(mac) => {
                    let offset = (p.addr % u64::from(self.socket.frame_size())) as usize;
                    self.socket.frame_buffer(p.addr)[offset..offset + 6].copy_from_slice(&mac);
                    self.pending.remove(i);
                    self.send(p.addr, p.len);
                }
                None if now.saturating_duration_since(p.since) > HOLD => {
                    self.pending.remove(i);
                    self.drop_forwarded(
                        p.addr,
                        DropReason::NeighbourUnresolved,
                        p.direction,
                        p.bytes,
                    );
                }
                None => i += 1,
            }
        }
    }

    fn send(&mut self, addr: u64, len: usize) {
        if !self.socket.transmit(addr, len as u32) {
            self.forwarder
                .counters_mut()
                .dropped(DropReason::SendFailed);
            self.socket.recycle(addr);
        }
    }
}
