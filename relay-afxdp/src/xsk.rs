//! One AF_XDP socket with its own UMEM: the socket and mmap plumbing (unsafe, kept
//! here), on top of the pure ring arithmetic of [`crate::ring`].
//!
//! Frames are owned by exactly one party at a time: the kernel (in the fill ring, being
//! received into, or in the TX ring, being sent), or us (just received, or free). Received
//! frames are handed to the caller by address; the caller either transmits the same frame
//! (rewritten in place: no payload copy) or recycles it to the fill ring. Completed
//! transmissions come back through the completion ring and return to the fill ring.
#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::ring::{ConsumerCursor, Indices, ProducerCursor};

/// How to open a socket.
#[derive(Clone, Copy, Debug)]
pub struct XskConfig {
    /// UMEM frames.
    pub frames: u32,
    /// Bytes per frame (2048 or 4096).
    pub frame_size: u32,
    /// Bytes kept free before received data in every frame, so headers can grow in place.
    pub headroom: u32,
    /// Entries in each ring (a power of two).
    pub ring_size: u32,
    /// Ask for zero-copy (veth refuses: EOPNOTSUPP, reported as such).
    pub zerocopy: bool,
    /// Use need_wakeup (syscalls only when the kernel asks).
    pub need_wakeup: bool,
    /// Frames waiting in the TX ring for the kernel to take them, at most: past it
    /// `transmit` refuses. A device that pushes back otherwise lets the whole TX ring
    /// fill, and its last frames leave hundreds of milliseconds late: too late for voice,
    /// so they are better dropped and counted.
    pub tx_backlog: u32,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frames: 4096,
            frame_size: 2048,
            headroom: 0,
            ring_size: 2048,
            zerocopy: false,
            need_wakeup: true,
            tx_backlog: 256,
        }
    }
}

/// An mmap'd region, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(len: usize, fd: RawFd, offset: i64) -> io::Result<Mapping> {
        let (flags, fd) = if fd < 0 {
            (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            )
        } else {
            (libc::MAP_SHARED | libc::MAP_POPULATE, fd)
        };
        // SAFETY: a fresh mapping chosen by the kernel (addr null); nothing aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).expect("mmap never returns null on success"),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `new`, which nothing uses afterwards
        // (the owning structs drop their raw pointers with it).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A ring shared with the kernel.
struct Ring {
    map: Mapping,
    producer: usize,
    consumer: usize,
    desc: usize,
    flags: usize,
    size: u32,
}

impl Indices for Ring {
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: `producer` is the kernel-given, 4-aligned offset of a u32 inside the live
        // mapping; the kernel and we access it only atomically.
        unsafe { &*self.map.ptr.as_ptr().add(self.producer).cast::<AtomicU32>() }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.map.ptr.as_ptr().add(self.consumer).cast::<AtomicU32>() }
    }
}

impl Ring {
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `producer`: the kernel-given offset of the ring's u32 flags.
        let flags = unsafe { &*self.map.ptr.as_ptr().add(self.flags).cast::<AtomicU32>() };
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
    fn addr_ptr(&self, i: usize) -> *mut u64 {
        assert!(i < self.size as usize);
        // SAFETY: `desc` is the kernel-given offset of `size` u64 entries inside the live
        // mapping and `i < size`, so the result stays inside the mapping.
        unsafe { self.map.ptr.as_ptr().add(self.desc).cast::<u64>().add(i) }
    }

    fn desc_ptr(&self, i: usize) -> *mut libc::xdp_desc {
        assert!(i < self.size as usize);
        // SAFETY: as for `addr_ptr`, with 16-byte xdp_desc entries.
        unsafe {
            self.map
                .ptr
                .as_ptr()
                .add(self.desc)
                .cast::<libc::xdp_desc>()
                .add(i)
        }
    }

    /// Reads address slot `i` of a fill/completion ring.
    fn read_addr(&self, i: usize) -> u64 {
        // SAFETY: an in-bounds, aligned slot that the cursor protocol says the kernel
        // has finished writing (we are its consumer and it was published).
        unsafe { self.addr_ptr(i).read_volatile() }
    }

    /// Writes address slot `i` of a fill/completion ring.
    fn write_addr(&mut self, i: usize, addr: u64) {
        // SAFETY: an in-bounds, aligned slot that the cursor protocol reserved for us (we
        // are its producer and have not published it yet).
        unsafe { self.addr_ptr(i).write_volatile(addr) }
    }

    /// Reads descriptor slot `i` of an RX/TX ring.
    fn read_desc(&self, i: usize) -> libc::xdp_desc {
        // SAFETY: as for `read_addr`.
        unsafe { self.desc_ptr(i).read_volatile() }
    }

    /// Writes descriptor slot `i` of an RX/TX ring.
    fn write_desc(&mut self, i: usize, desc: libc::xdp_desc) {
        // SAFETY: as for `write_addr`.
        unsafe { self.desc_ptr(i).write_volatile(desc) }
    }
}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: passes a pointer to a live `T` and its exact size; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A received frame: where it is in the UMEM and how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxFrame {
    /// UMEM address (offset) of the frame's data.
    pub addr: u64,
    /// Its length.
    pub len: u32,
}

/// What a worker needs from an AF_XDP socket: received frames named by their UMEM
/// address, read and rewritten in place, then sent or recycled. [`XdpSocket`] (ours) and
/// `crate::xsk_crate::CrateSocket` (the pure-Rust `xdp` crate) implement it, so both run
/// the same worker and `perf compare` can price them side by side.
pub trait UmemSocket: Send + std::fmt::Debug {
    /// The socket's descriptor (for the XSKMAP and for poll).
    fn fd(&self) -> RawFd;
    /// Reaps finished transmissions and refills the fill ring.
    fn maintain(&mut self);
    /// Takes up to `out.len()` received frames, which become the caller's; returns how
    /// many.
    fn receive(&mut self, out: &mut [RxFrame]) -> usize;
    /// The whole writable buffer of the caller's frame containing `addr`; empty for a
    /// frame that is not the caller's.
    fn frame_buffer(&mut self, addr: u64) -> &mut [u8];
    /// Where `addr` lies in its frame's buffer (as [`UmemSocket::frame_buffer`] gives it).
    fn offset_in_buffer(&self, addr: u64) -> usize;
    /// The UMEM address of byte `offset` of the buffer of the frame containing `addr`.
    fn address_at(&self, addr: u64, offset: usize) -> u64;
    /// Gives the caller's frame back (it will not be sent); any other address is left
    /// alone.
    fn recycle(&mut self, addr: u64);
    /// Queues the caller's frame at `addr` (`len` bytes) for transmission; false when
    /// the TX ring or the backlog is full, the frame is not the caller's, or `len` runs
    /// past its end (the caller recycles it).
    fn transmit(&mut self, addr: u64, len: u32) -> bool;
    /// Tells the kernel to send what is queued: kicks until it has taken it all (copy
    /// mode takes at most 32 frames per kick) or pushes back.
    fn flush_tx(&mut self);
    /// Frames queued to send that the kernel has not taken yet.
    fn tx_waiting(&self) -> u32;
    /// The most frames `transmit` lets wait ([`XskConfig::tx_backlog`]).
    fn tx_backlog(&self) -> u32;
    /// Whether `transmit` would refuse for want of room in the backlog.
    fn tx_backlog_full(&self) -> bool {
        self.tx_waiting() >= self.tx_backlog()
    }
}

/// Frames the kernel sends per kick in copy mode (its `TX_BATCH_SIZE`).
const FRAMES_PER_KICK: u32 = 32;

/// Kicks the kernel to send what waits in the TX ring of socket `fd`, as often as
/// `waiting` frames need, and no more once it says all went out: in copy mode each kick
/// sends at most [`FRAMES_PER_KICK`] frames and answers EAGAIN while more wait (or while
/// the device pushes back, when kicking again is pointless beyond the bound).
pub(crate) fn kick_tx(fd: RawFd, waiting: u32) {
    for _ in 0..waiting.div_ceil(FRAMES_PER_KICK).max(1) {
        // SAFETY: a zero-length, non-blocking sendto on the caller's own socket: a TX
        // kick only; no buffer is read or written.
        let sent = unsafe {
            libc::sendto(
                fd,
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if sent >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
            break;
        }
    }
}

/// Who holds a UMEM frame now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    /// In the fill or TX ring: the kernel may write or read it at any moment.
    Kernel,
    /// In our free list: nobody reads or writes it.
    Free,
    /// Received (or being rewritten) by the caller: ours to read and write.
    Caller,
}

/// Every frame's holder, so that the safe API hands out only frames the kernel is not
/// using, and a frame is never queued twice. Addresses are checked against the UMEM.
#[derive(Debug)]
struct Ledger {
    frame_size: u64,
    holders: Vec<Holder>,
}

impl Ledger {
    fn new(frames: u32, frame_size: u32) -> Self {
        Ledger {
            frame_size: u64::from(frame_size),
            holders: vec![Holder::Free; frames as usize],
        }
    }

    /// The index of the frame containing `addr`, if it lies inside the UMEM.
    fn index(&self, addr: u64) -> Option<usize> {
        let i = usize::try_from(addr / self.frame_size).ok()?;
        (i < self.holders.len()).then_some(i)
    }

    /// The start of the frame containing `addr`.
    fn base(&self, addr: u64) -> u64 {
        addr - addr % self.frame_size
    }

    /// Moves the frame containing `addr` from `from` to `to`; false (and nothing moves)
    /// when the address is outside the UMEM or the frame is not held by `from`.
    fn hand_over(&mut self, addr: u64, from: Holder, to: Holder) -> bool {
        match self.index(addr) {
            Some(i) if self.holders[i] == from => {
                self.holders[i] = to;
                true
            }
            _ => false,
        }
    }

    fn is_held_by(&self, addr: u64, holder: Holder) -> bool {
        self.index(addr).is_some_and(|i| self.holders[i] == holder)
    }
}

/// One AF_XDP socket bound to one (interface, queue), with its own UMEM.
///
/// Each frame is the kernel's (fill and TX rings), free, or the caller's (received,
/// not yet transmitted or recycled); the socket keeps that ledger, so
/// [`XdpSocket::frame_buffer`] gives out only the caller's frames, and `transmit` and
/// `recycle` accept only those: a wrong or repeated address is refused, never trusted.
pub struct XdpSocket {
    fd: OwnedFd,
    umem: Mapping,
    cfg: XskConfig,
    fill: Ring,
    fill_cur: ProducerCursor,
    comp: Ring,
    comp_cur: ConsumerCursor,
    rx: Ring,
    rx_cur: ConsumerCursor,
    tx: Ring,
    tx_cur: ProducerCursor,
    free: Vec<u64>,
    ledger: Ledger,
}

// SAFETY: every raw pointer inside (the UMEM and ring mappings) points into mappings
// this socket owns exclusively; moving the socket to another thread moves that ownership
// with it, and the kernel side is synchronised through the rings' atomics.
unsafe impl Send for XdpSocket {}

impl std::fmt::Debug for XdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpSocket")
            .field("fd", &self.fd)
            .field("free", &self.free.len())
            .finish_non_exhaustive()
    }
}

impl XdpSocket {
    /// Opens, registers the UMEM, maps the rings, binds to (`ifindex`, `queue`) in copy
    /// mode (or zero-copy if asked), and gives the kernel half the frames to receive into.
    pub fn open(ifindex: u32, queue: u32, cfg: XskConfig) -> io::Result<XdpSocket> {
        if !cfg.ring_size.is_power_of_two() || cfg.frames < cfg.ring_size || cfg.frame_size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AF_XDP: the ring size must be a power of two no larger than the frame count, \
                 and frames must have a size",
            ));
        }
        // SAFETY: plain socket(2); the returned descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = cfg.frames as usize * cfg.frame_size as usize;
        let umem = Mapping::new(len, -1, 0)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr.as_ptr() as u64,
            len: len as u64,
            chunk_size: cfg.frame_size,
            headroom: cfg.headroom,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(fd.as_raw_fd(), libc::XDP_UMEM_REG, &reg).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOBUFS) {
                // The kernel charges a UMEM to the user's locked memory unless the process
                // holds CAP_IPC_LOCK.
                io::Error::new(
                    e.kind(),
                    format!(
                        "registering a {} MiB UMEM: {e}: over the locked-memory limit \
                         (RLIMIT_MEMLOCK, shared by every process of this uid); grant \
                         CAP_IPC_LOCK or raise the limit",
                        len >> 20
                    ),
                )
            } else {
                e
            }
        })?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(fd.as_raw_fd(), opt, &cfg.ring_size)?;
        }
        // SAFETY: zeroed is a valid xdp_mmap_offsets (plain integers).
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut optlen = size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: the kernel writes at most `optlen` bytes into `off`, which is that large.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                &mut optlen,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let map_ring = |o: &libc::xdp_ring_offset, entry: usize, pgoff: u64| -> io::Result<Ring> {
            let len = o.desc as usize + cfg.ring_size as usize * entry;
            Ok(Ring {
                map: Mapping::new(len, fd.as_raw_fd(), pgoff as i64)?,
                producer: o.producer as usize,
                consumer: o.consumer as usize,
                desc: o.desc as usize,
                flags: o.flags as usize,
                size: cfg.ring_size,
            })
        };
        let fill = map_ring(&off.fr, 8, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = map_ring(&off.cr, 8, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx = map_ring(&off.rx, 16, libc::XDP_PGOFF_RX_RING as u64)?;
        let tx = map_ring(&off.tx, 16, libc::XDP_PGOFF_TX_RING as u64)?;

        let mut flags = if cfg.zerocopy {
            libc::XDP_ZEROCOPY
        } else {
            libc::XDP_COPY
        };
        if cfg.need_wakeup {
            flags |= libc::XDP_USE_NEED_WAKEUP;
        }
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // The kernel releases a closed socket's queue binding lazily: right after a
        // restart, bind can fail with EBUSY for a moment. Retry for up to ~2 s.
        let mut failure = None;
        for attempt in 0..20 {
            // SAFETY: binds with a pointer to a live sockaddr_xdp and its exact size.
            let r = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_xdp).cast(),
                    size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if r == 0 {
                failure = None;
                break;
            }
            let e = io::Error::last_os_error();
            let busy = e.raw_os_error() == Some(libc::EBUSY);
            failure = Some(e);
            if !busy {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10 << attempt.min(4)));
        }
        if let Some(e) = failure {
            if cfg.zerocopy && e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                return Err(io::Error::new(
                    e.kind(),
                    "the driver refuses zero-copy AF_XDP (veth supports copy mode only)",
                ));
            }
            return Err(e);
        }
        let start = |r: &Ring| r.producer().load(Ordering::Relaxed);
        let mut sock = XdpSocket {
            fill_cur: ProducerCursor::new(cfg.ring_size, start(&fill)),
            comp_cur: ConsumerCursor::new(cfg.ring_size, start(&comp)),
            rx_cur: ConsumerCursor::new(cfg.ring_size, start(&rx)),
            tx_cur: ProducerCursor::new(cfg.ring_size, start(&tx)),
            free: (0..cfg.frames)
                .rev()
                .map(|i| u64::from(i) * u64::from(cfg.frame_size))
                .collect(),
            ledger: Ledger::new(cfg.frames, cfg.frame_size),
            fd,
            umem,
            cfg,
            fill,
            comp,
            rx,
            tx,
        };
        sock.refill();
        Ok(sock)
    }

    /// Gives free frames to the fill ring, keeping half the UMEM for transmit.
    fn refill(&mut self) {
        let keep = (self.cfg.frames / 2) as usize;
        let want = self.free.len().saturating_sub(keep) as u32;
        let n = self
            .fill_cur
            .reserve(&self.fill, want.min(self.cfg.ring_size));
        for k in 0..n {
            let addr = self.free.pop().expect("counted above");
            self.ledger.hand_over(addr, Holder::Free, Holder::Kernel);
            let slot = self.fill_cur.slot(k);
            self.fill.write_addr(slot, addr);
        }
        if n > 0 {
            self.fill_cur.submit(&self.fill, n);
        }
    }

    /// The bytes of the caller's frame at `addr`, `len` long (cut at the end of its
    /// frame); empty for a frame that is not the caller's.
    pub fn frame_mut(&mut self, addr: u64, len: usize) -> &mut [u8] {
        let at = (addr - self.ledger.base(addr)) as usize;
        let buf = self.frame_buffer(addr);
        let end = at.saturating_add(len).min(buf.len());
        buf.get_mut(at..end).unwrap_or_default()
    }

    /// Bytes per UMEM frame.
    pub fn frame_size(&self) -> u32 {
        self.cfg.frame_size
    }
}

impl UmemSocket for XdpSocket {
    /// The socket's descriptor (for the XSKMAP and for poll).
    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reaps finished transmissions and refills the fill ring; kicks the kernel when it
    /// asks for a wakeup.
    fn maintain(&mut self) {
        let n = self.comp_cur.peek(&self.comp, self.cfg.ring_size);
        for k in 0..n {
            let addr = self.comp.read_addr(self.comp_cur.slot(k));
            if self.ledger.hand_over(addr, Holder::Kernel, Holder::Free) {
                self.free.push(self.ledger.base(addr));
            }
        }
        if n > 0 {
            self.comp_cur.release(&self.comp, n);
        }
        self.refill();
        if self.cfg.need_wakeup && self.fill.needs_wakeup() {
            // SAFETY: a zero-length, non-blocking recvfrom on our own socket: a wakeup only.
            unsafe {
                libc::recvfrom(
                    self.fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
    }

    /// Takes up to `out.len()` received frames, which become the caller's; returns how
    /// many. A descriptor for a frame the kernel did not hold is skipped.
    fn receive(&mut self, out: &mut [RxFrame]) -> usize {
        let n = self.rx_cur.peek(&self.rx, out.len() as u32);
        let mut taken = 0;
        for k in 0..n {
            let d = self.rx.read_desc(self.rx_cur.slot(k));
            if self
                .ledger
                .hand_over(d.addr, Holder::Kernel, Holder::Caller)
            {
                out[taken] = RxFrame {
                    addr: d.addr,
                    len: d.len,
                };
                taken += 1;
            }
        }
        if n > 0 {
            self.rx_cur.release(&self.rx, n);
        }
        taken
    }

    /// The whole buffer of the caller's frame containing `addr`; empty for a frame that
    /// is not the caller's (in a ring, free, or outside the UMEM).
    fn frame_buffer(&mut self, addr: u64) -> &mut [u8] {
        if !self.ledger.is_held_by(addr, Holder::Caller) {
            return &mut [];
        }
        let start = self.ledger.base(addr) as usize;
        let size = self.cfg.frame_size as usize;
        // SAFETY: the ledger says the frame is inside the UMEM (its index is below the
        // frame count, and the mapping is frames * frame_size long) and is the caller's:
        // not in any ring, so the kernel neither reads nor writes it; `&mut self` keeps
        // any other slice of the UMEM from living as long as this one.
        unsafe { std::slice::from_raw_parts_mut(self.umem.ptr.as_ptr().add(start), size) }
    }

    fn offset_in_buffer(&self, addr: u64) -> usize {
        (addr - self.ledger.base(addr)) as usize
    }

    fn address_at(&self, addr: u64, offset: usize) -> u64 {
        self.ledger.base(addr) + offset as u64
    }

    /// Gives the caller's frame back to the free list (it will not be sent); a frame
    /// that is not the caller's is left alone.
    fn recycle(&mut self, addr: u64) {
        if self.ledger.hand_over(addr, Holder::Caller, Holder::Free) {
            self.free.push(self.ledger.base(addr));
        }
    }

    /// Queues the caller's frame at `addr` (`len` bytes, inside the frame) for
    /// transmission; false when the TX ring is full or the frame is not the caller's
    /// (the caller recycles it and counts the drop).
    fn transmit(&mut self, addr: u64, len: u32) -> bool {
        let inside = (addr - self.ledger.base(addr)).saturating_add(u64::from(len))
            <= u64::from(self.cfg.frame_size);
        if !inside || !self.ledger.is_held_by(addr, Holder::Caller) || self.tx_backlog_full() {
            return false;
        }
        if self.tx_cur.reserve(&self.tx, 1) == 0 {
            return false;
        }
        self.ledger.hand_over(addr, Holder::Caller, Holder::Kernel);
        let slot = self.tx_cur.slot(0);
        self.tx.write_desc(
            slot,
            libc::xdp_desc {
                addr,
                len,
                options: 0,
            },
        );
        self.tx_cur.submit(&self.tx, 1);
        true
    }

    fn tx_waiting(&self) -> u32 {
        self.tx_cur.pending(&self.tx)
    }

    fn tx_backlog(&self) -> u32 {
        self.cfg.tx_backlog
    }

    fn flush_tx(&mut self) {
        let waiting = self.tx_waiting();
        if waiting > 0 && (!self.cfg.need_wakeup || self.tx.needs_wakeup()) {
            kick_tx(self.fd(), waiting);
        }
    }
}

/// Waits up to `timeout_ms` for the socket to have frames (wakeup mode).
pub fn poll_readable(fd: RawFd, timeout_ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd, count 1; the kernel writes only `revents`.
    unsafe { libc::poll(&mut p, 1, timeout_ms) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_moves_only_from_its_holder() {
        let mut ledger = Ledger::new(4, 2048);
        // Free → kernel (fill) → caller (received) → kernel (transmit) → free (completed).
        assert!(ledger.hand_over(2048, Holder::Free, Holder::Kernel));
        assert!(!ledger.is_held_by(2048 + 100, Holder::Caller));
        assert!(ledger.hand_over(2048 + 256, Holder::Kernel, Holder::Caller));
        assert!(ledger.is_held_by(2048 + 4000 % 2048, Holder::Caller));
        assert!(ledger.hand_over(2048, Holder::Caller, Holder::Kernel));
        assert!(ledger.hand_over(2048, Holder::Kernel, Holder::Free));
        // A second completion (or recycle) of the same frame moves nothing: the free list
        // can never hold one frame twice.
        assert!(!ledger.hand_over(2048, Holder::Kernel, Holder::Free));
        assert!(!ledger.hand_over(2048, Holder::Caller, Holder::Free));
    }

    #[test]
    fn addresses_outside_the_umem_belong_to_nobody() {
        let mut ledger = Ledger::new(4, 2048);
        assert_eq!(ledger.index(4 * 2048 - 1), Some(3));
        assert_eq!(ledger.index(4 * 2048), None);
        assert_eq!(ledger.index(u64::MAX), None);
        assert!(!ledger.hand_over(4 * 2048, Holder::Free, Holder::Kernel));
        assert!(!ledger.is_held_by(u64::MAX, Holder::Free));
        assert_eq!(ledger.base(3 * 2048 + 17), 3 * 2048);
    }
}
