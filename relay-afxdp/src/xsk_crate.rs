//! The worker's socket interface ([`UmemSocket`]) on the pure-Rust `xdp` crate (the
//! AF_XDP layer Quilkin uses), so the same worker can run on it and `perf compare` can
//! price it beside ours (`--xsk-layer xdp-crate`).
//!
//! The crate hands out received frames as [`Packet`]s (raw pointers into the UMEM with a
//! head and a tail) and takes them back by value to send or free. The worker names frames
//! by UMEM address, so this adapter keeps each frame it holds in a table indexed by frame
//! number, stretched to its whole buffer while the worker rewrites it, and trimmed to the
//! bytes to send when it is queued. The crate does not say where its UMEM begins; one frame
//! is spent at open to learn it (its pointer against the address the crate gives it).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

use xdp::libc::xdp::{XDP_PACKET_HEADROOM, xdp_desc};
use xdp::slab::{HeapSlab, Slab};
use xdp::socket::{SocketError, XdpSocketBuilder};
use xdp::umem::{FrameSize, UmemCfgBuilder};
use xdp::{Packet, RingConfigBuilder, Umem, WakableRings};

use crate::xsk::{RxFrame, UmemSocket, XskConfig};

/// Bytes at the start of every frame the crate never exposes (the kernel's
/// `XDP_PACKET_HEADROOM`): a frame's buffer starts this far into its chunk.
const HIDDEN: u64 = XDP_PACKET_HEADROOM;

/// One AF_XDP socket and its UMEM, opened and driven through the `xdp` crate.
///
/// Fields drop in order: the held packets and the rings go before the socket, and the
/// UMEM last, so no packet or ring outlives the memory it points into.
pub struct CrateSocket {
    /// The frames the caller holds, by frame number, each stretched to its whole buffer.
    held: Vec<Option<Packet>>,
    /// Received packets not yet handed to the caller.
    received: HeapSlab,
    /// Packets queued by `transmit`, given to the TX ring by `flush_tx`.
    outgoing: HeapSlab,
    rings: WakableRings,
    socket: xdp::socket::XdpSocket,
    umem: Umem,
    /// The process address of UMEM byte 0.
    origin: usize,
    frame_size: u64,
    frames: u32,
    ring_size: u32,
    /// Kick the kernel after filling the fill ring (zero-copy drivers need it; copy mode
    /// receives from the XDP redirect path without one).
    wake_fill: bool,
    /// Frames queued to send and not yet completed (the crate does not show its TX ring,
    /// so frames the kernel took count until their completion), and their bound.
    tx_in_flight: u32,
    tx_backlog: u32,
}

// SAFETY: every packet in `held`, `received` and `outgoing` points into `umem`, which this
// struct owns and moves with them; nothing outside refers to the UMEM or the rings, and
// the kernel side is synchronised through the rings' atomics.
unsafe impl Send for CrateSocket {}

impl std::fmt::Debug for CrateSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrateSocket")
            .field("fd", &self.socket.raw_fd())
            .field("allocatable", &self.umem.allocatable())
            .finish_non_exhaustive()
    }
}

fn crate_error(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("xdp crate: {what}: {e}"))
}

impl CrateSocket {
    /// Maps the UMEM, builds the rings with need-wakeup, binds to (`ifindex`, `queue`) in
    /// copy mode (or zero-copy if asked) and fills the fill ring, as [`crate::xsk::XdpSocket::open`]
    /// does. The crate accepts 2048- and 4096-byte frames only.
    pub fn open(ifindex: u32, queue: u32, cfg: XskConfig) -> io::Result<CrateSocket> {
        let frame_size = match cfg.frame_size {
            2048 => FrameSize::TwoK,
            4096 => FrameSize::FourK,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the xdp crate takes 2048- or 4096-byte frames, not {other}"),
                ));
            }
        };
        // The kernel releases a closed socket's queue binding lazily: right after a
        // restart, bind can fail with EBUSY for a moment. A failed bind consumes the
        // crate's builder, so each attempt starts over. Retry for up to ~2 s.
        let mut attempt = 0;
        let (mut umem, rings, socket) = loop {
            let umem_cfg = UmemCfgBuilder {
                frame_size,
                head_room: cfg.headroom,
                frame_count: cfg.frames,
                ..Default::default()
            }
            .build()
            .map_err(|e| crate_error("UMEM configuration", e))?;
            let umem = Umem::map(umem_cfg)?;
            let ring_cfg = RingConfigBuilder {
                rx_count: cfg.ring_size,
                tx_count: cfg.ring_size,
                fill_count: cfg.ring_size,
                completion_count: cfg.ring_size,
            }
            .build()
            .map_err(|e| crate_error("ring configuration", e))?;
            let mut builder = XdpSocketBuilder::new().map_err(|e| crate_error("socket", e))?;
            let (rings, mut flags) = builder
                .build_wakable_rings(&umem, ring_cfg)
                .map_err(|e| crate_error("rings", e))?;
            if cfg.zerocopy {
                flags.force_zerocopy();
            } else {
                flags.force_copy();
            }
            match builder.bind(xdp::nic::NicIndex(ifindex), queue, flags) {
                Ok(socket) => break (umem, rings, socket),
                Err(SocketError::Bind(e))
                    if e.raw_os_error() == Some(libc::EBUSY) && attempt < 20 =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10 << attempt.min(4)));
                    attempt += 1;
                }
                Err(SocketError::Bind(e)) => return Err(e),
                Err(e) => return Err(crate_error("bind", e)),
            }
        };
        // SAFETY: the packet points into `umem`, which outlives it: it is turned into a
        // descriptor at once and never used again.
        let probe = unsafe { umem.alloc() }
            .ok_or_else(|| crate_error("UMEM", "no frame to learn where the UMEM begins"))?;
        let at = probe.as_ptr() as usize;
        let origin = at.wrapping_sub(xdp_desc::from(probe).addr as usize);
        let mut sock = CrateSocket {
            held: (0..cfg.frames).map(|_| None).collect(),
            received: HeapSlab::with_capacity(cfg.ring_size as usize),
            outgoing: HeapSlab::with_capacity(cfg.ring_size as usize),
            rings,
            socket,
            umem,
            origin,
            frame_size: u64::from(cfg.frame_size),
            frames: cfg.frames,
            ring_size: cfg.ring_size,
            wake_fill: cfg.zerocopy,
            tx_in_flight: 0,
            tx_backlog: cfg.tx_backlog,
        };
        sock.refill();
        Ok(sock)
    }

    /// Gives free frames to the fill ring, keeping half the UMEM back, as ours does.
    fn refill(&mut self) {
        let keep = (self.frames / 2) as usize;
        let want = self.umem.allocatable().saturating_sub(keep);
        if want > 0 {
            // SAFETY: the UMEM outlives the socket: both are fields of `self`, and the
            // socket is dropped first.
            let _ = unsafe {
                self.rings
                    .fill_ring
                    .enqueue(&mut self.umem, want, self.wake_fill)
            };
        }
    }

    /// The frame number of `addr`, if it lies in the UMEM.
    fn index(&self, addr: u64) -> Option<usize> {
        let i = usize::try_from(addr / self.frame_size).ok()?;
        (i < self.held.len()).then_some(i)
    }

    /// Bytes in a frame's buffer.
    fn capacity(&self) -> usize {
        (self.frame_size - HIDDEN) as usize
    }

    /// Takes a received packet into `held`, stretched to its whole buffer; false (and
    /// the packet is forgotten, its frame lost) for a packet outside the UMEM or for a
    /// frame already held, which only a kernel bug could produce.
    fn hold(&mut self, mut packet: Packet) -> Option<RxFrame> {
        let addr = (packet.as_ptr() as usize).checked_sub(self.origin)? as u64;
        let i = self.index(addr)?;
        if self.held[i].is_some() {
            return None;
        }
        let len = packet.len();
        let head = self.offset_in_buffer(addr);
        let tail_room = self.capacity().checked_sub(head + len)?;
        packet.adjust_head(-i32::try_from(head).ok()?).ok()?;
        packet.adjust_tail(i32::try_from(tail_room).ok()?).ok()?;
        self.held[i] = Some(packet);
        Some(RxFrame {
            addr,
            len: len as u32,
        })
    }
}

impl UmemSocket for CrateSocket {
    fn fd(&self) -> RawFd {
        self.socket.raw_fd()
    }

    fn maintain(&mut self) {
        let completed = self
            .rings
            .completion_ring
            .dequeue(&mut self.umem, self.ring_size as usize);
        self.tx_in_flight = self.tx_in_flight.saturating_sub(completed as u32);
        self.refill();
    }

    fn receive(&mut self, out: &mut [RxFrame]) -> usize {
        if self.received.is_empty()
            && let Some(rx) = self.rings.rx_ring.as_mut()
        {
            // SAFETY: the received packets point into `self.umem`; they live in
            // `received` and `held`, which are dropped before it.
            unsafe { rx.recv(&self.umem, &mut self.received) };
        }
        let mut taken = 0;
        while taken < out.len() {
            let Some(packet) = self.received.pop_back() else {
                break;
            };
            if let Some(frame) = self.hold(packet) {
                out[taken] = frame;
                taken += 1;
            }
        }
        taken
    }

    fn frame_buffer(&mut self, addr: u64) -> &mut [u8] {
        match self.index(addr).and_then(|i| self.held[i].as_mut()) {
            Some(packet) => packet,
            None => &mut [],
        }
    }

    fn offset_in_buffer(&self, addr: u64) -> usize {
        (addr % self.frame_size).saturating_sub(HIDDEN) as usize
    }

    fn address_at(&self, addr: u64, offset: usize) -> u64 {
        addr - addr % self.frame_size + HIDDEN + offset as u64
    }

    fn recycle(&mut self, addr: u64) {
        if let Some(packet) = self.index(addr).and_then(|i| self.held[i].take()) {
            self.umem.free_packet(packet);
        }
    }

    fn transmit(&mut self, addr: u64, len: u32) -> bool {
        let head = self.offset_in_buffer(addr);
        let Some(tail_cut) = self.capacity().checked_sub(head + len as usize) else {
            return false;
        };
        if self.outgoing.available() == 0 || self.tx_backlog_full() {
            return false;
        }
        let Some(mut packet) = self.index(addr).and_then(|i| self.held[i].take()) else {
            return false;
        };
        let trimmed = i32::try_from(head)
            .ok()
            .and_then(|h| packet.adjust_head(h).ok())
            .and_then(|()| i32::try_from(tail_cut).ok())
            .and_then(|t| packet.adjust_tail(-t).ok());
        if trimmed.is_none() {
            self.umem.free_packet(packet);
            return false;
        }
        match self.outgoing.push_front(packet) {
            None => {
                self.tx_in_flight += 1;
                true
            }
            Some(refused) => {
                self.umem.free_packet(refused);
                false
            }
        }
    }

    fn flush_tx(&mut self) {
        if let Some(tx) = self.rings.tx_ring.as_mut()
            && !self.outgoing.is_empty()
        {
            // SAFETY: the packets point into `self.umem`, which outlives the socket (it is
            // dropped after it).
            let _ = unsafe { tx.send(&mut self.outgoing, false) };
        }
        if self.tx_in_flight > 0 {
            crate::xsk::kick_tx(self.socket.raw_fd(), self.tx_in_flight);
        }
    }

    fn tx_waiting(&self) -> u32 {
        self.tx_in_flight
    }

    fn tx_backlog(&self) -> u32 {
        self.tx_backlog
    }
}
