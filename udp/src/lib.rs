//! Batched UDP socket I/O with `recvmmsg(2)` and `sendmmsg(2)`, shared by relay-mio and
//! the perf load tools (quinn-udp is the model): the only unsafe code, kept to building
//! the kernel's message arrays and reading socket addresses.
//!
//! A [`RecvBatch`] owns `BATCH` receive buffers and the `mmsghdr`/`iovec`/address arrays
//! pointing into them, all allocated once; [`RecvBatch::recv`] fills up to `BATCH`
//! datagrams in one non-blocking syscall. A [`SendBatch`] owns `BATCH` outgoing buffers;
//! [`SendBatch::push`] copies a datagram (optionally behind a header) into the next one
//! together with a caller's token, and [`SendBatch::flush`] sends them all with as few
//! `sendmmsg` calls as the kernel allows and hands every token back with its outcome.
//! Nothing here allocates after construction and nothing ever blocks: a socket that
//! cannot take more datagrams (EAGAIN) makes the rest of the batch fail.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Datagrams per syscall.
pub const BATCH: usize = 64;
/// Size of every buffer: a 1500-byte MTU's datagram plus the largest frame header, with
/// room to spare for loopback tests.
pub const BUF_LEN: usize = 2048;

/// One received datagram.
#[derive(Debug)]
pub struct Received<'a> {
    /// Its bytes.
    pub data: &'a [u8],
    /// Who sent it.
    pub source: SocketAddr,
    /// True when the datagram was longer than the buffer and was cut.
    pub truncated: bool,
}

/// Preallocated state for `recvmmsg`.
pub struct RecvBatch {
    bufs: Box<[[u8; BUF_LEN]]>,
    addrs: Box<[libc::sockaddr_storage]>,
    iovecs: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
    len: usize,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// `n` all-zero values of a plain C struct.
///
/// # Safety
/// All-zero bytes must be a valid value of `T` (true of libc's `sockaddr_storage`,
/// `iovec` and `mmsghdr`, the only types it is used with).
unsafe fn zeroed_boxed<T>(n: usize) -> Box<[T]> {
    // SAFETY: the caller guarantees that all-zero bytes are a valid T.
    (0..n).map(|_| unsafe { zeroed::<T>() }).collect()
}

// SAFETY: the raw pointers inside `iovecs` and `hdrs` point only into boxed memory that
// the same RecvBatch owns; sending the batch to another thread moves that memory's
// ownership with it, and nothing else holds those pointers.
unsafe impl Send for RecvBatch {}

// SAFETY: as for RecvBatch: every pointer points into the SendBatch's own boxed memory;
// the tokens are moved with the batch, so they must be Send themselves.
unsafe impl<T: Send> Send for SendBatch<T> {}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Allocates the buffers and wires the kernel's arrays to them, once.
    pub fn new() -> Self {
        // SAFETY: sockaddr_storage, iovec and mmsghdr are plain C structs (integers and
        // raw pointers), valid when all-zero.
        let (addrs, iovecs, hdrs) = unsafe {
            (
                zeroed_boxed(BATCH),
                zeroed_boxed(BATCH),
                zeroed_boxed(BATCH),
            )
        };
        let mut batch = RecvBatch {
            bufs: vec![[0u8; BUF_LEN]; BATCH].into_boxed_slice(),
            addrs,
            iovecs,
            hdrs,
            len: 0,
        };
        // The boxed slices never move or resize, so these pointers stay valid for the
        // batch's lifetime (moving the RecvBatch moves only the box pointers).
        for i in 0..BATCH {
            batch.iovecs[i].iov_base = batch.bufs[i].as_mut_ptr().cast();
            batch.iovecs[i].iov_len = BUF_LEN;
            let hdr = &mut batch.hdrs[i].msg_hdr;
            hdr.msg_iov = &mut batch.iovecs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_name = (&mut batch.addrs[i] as *mut libc::sockaddr_storage).cast();
        }
        batch
    }

    /// Receives up to [`BATCH`] datagrams without blocking; `Ok(0)` when none is waiting.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        for hdr in self.hdrs.iter_mut() {
            hdr.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_hdr.msg_flags = 0;
            hdr.msg_len = 0;
        }
        // SAFETY: `hdrs` holds BATCH initialised mmsghdr whose name and iovec pointers
        // point into `addrs`, `iovecs` and `bufs`, all owned by `self` and alive for the
        // call; the kernel writes at most msg_namelen / iov_len bytes into them.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.len = 0;
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(err),
            };
        }
        self.len = n as usize;
        Ok(self.len)
    }

    /// The `i`-th datagram of the last [`RecvBatch::recv`], or `None` past its count or
    /// for a source address of an unknown family.
    pub fn get(&self, i: usize) -> Option<Received<'_>> {
        if i >= self.len {
            return None;
        }
        let hdr = &self.hdrs[i];
        let len = (hdr.msg_len as usize).min(BUF_LEN);
        let source = sockaddr_to_std(&self.addrs[i], hdr.msg_hdr.msg_namelen)?;
        Some(Received {
            data: &self.bufs[i][..len],
            source,
            truncated: hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        })
    }
}

/// Converts a kernel socket address to a `SocketAddr`.
fn sockaddr_to_std(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match i32::from(storage.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, sockaddr_storage is
            // large enough and suitably aligned for it, and the kernel wrote `len` bytes.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Writes `addr` into `storage` for the socket family `ipv6`; returns the address length,
/// or `None` when an IPv6 address cannot be sent from an IPv4 socket.
fn std_to_sockaddr(
    addr: SocketAddr,
    ipv6_socket: bool,
    storage: &mut libc::sockaddr_storage,
) -> Option<libc::socklen_t> {
    match (addr, ipv6_socket) {
        (SocketAddr::V4(v4), false) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large enough and aligned for a sockaddr_in, and
            // we write a complete value of that type.
            unsafe { std::ptr::write((storage as *mut libc::sockaddr_storage).cast(), sin) };
            Some(size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        (SocketAddr::V6(_), false) => None,
        (addr, true) => {
            let (ip, port, flowinfo, scope) = match addr {
                SocketAddr::V4(v4) => (v4.ip().to_ipv6_mapped(), v4.port(), 0, 0),
                SocketAddr::V6(v6) => (*v6.ip(), v6.port(), v6.flowinfo(), v6.scope_id()),
            };
            // SAFETY: zeroed is a valid sockaddr_in6; every field is then set.
            let mut sin6: libc::sockaddr_in6 = unsafe { zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = port.to_be();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: ip.octets(),
            };
            sin6.sin6_flowinfo = flowinfo;
            sin6.sin6_scope_id = scope;
            // SAFETY: as above, for a complete sockaddr_in6.
            unsafe { std::ptr::write((storage as *mut libc::sockaddr_storage).cast(), sin6) };
            Some(size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// The outcome of a flush.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Datagrams the kernel accepted.
    pub sent: usize,
    /// Datagrams the kernel refused: socket buffer full, unreachable, permission.
    pub failed: usize,
    /// Bytes of the datagrams the kernel accepted.
    pub bytes: usize,
    /// UDP sends the kernel accepted: one per datagram, or one per run of datagrams
    /// carried as segments of one send ([`SendBatch::segmenting`]).
    pub sends: usize,
}

/// Why [`SendBatch::push`] queued nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// The batch is full: flush first.
    Full,
    /// Header and body together exceed [`BUF_LEN`].
    TooLarge,
    /// An IPv6 destination on an IPv4 socket.
    WrongFamily,
}

/// Preallocated state for `sendmmsg` on one socket, with one caller's token `T` per
/// queued datagram (e.g. what to count when its send succeeds or fails).
pub struct SendBatch<T = ()> {
    ipv6_socket: bool,
    bufs: Box<[[u8; BUF_LEN]]>,
    addrs: Box<[libc::sockaddr_storage]>,
    iovecs: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
    /// Each queued datagram's destination, to find runs that can be one GSO send.
    dests: Box<[SocketAddr]>,
    /// Present when runs are sent as one GSO send each.
    segments: Option<Segments>,
    /// Sends so far that carried several datagrams as GSO segments.
    segmented_sends: u64,
    tokens: Vec<T>,
}

/// Most datagrams one GSO send carries (the kernel's limit is 64 or more).
const MAX_SEGMENTS: usize = 64;
/// Most payload bytes one GSO send carries (a UDP datagram holds at most 65,507).
const MAX_SEGMENTED_BYTES: usize = 65_000;
/// Room for one `UDP_SEGMENT` control message (a `cmsghdr` and a `u16`), 8-aligned.
type SegmentControl = [u64; 4];
// SAFETY: CMSG_SPACE only computes a length from its argument; it touches no memory.
const SEGMENT_CONTROL_LEN: usize = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
const _: () = assert!(SEGMENT_CONTROL_LEN <= size_of::<SegmentControl>());

/// The messages of a flush that sends runs as GSO sends: for each message its header
/// (pointing at the run's first address and iovecs), its control message and how many
/// queued datagrams it carries.
struct Segments {
    hdrs: Box<[libc::mmsghdr]>,
    controls: Box<[SegmentControl]>,
    slots: Box<[usize]>,
    /// The longest datagram that may lead a run.
    max_segment: usize,
}

impl<T> std::fmt::Debug for SendBatch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("len", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

impl<T> SendBatch<T> {
    /// A batch for a socket of the given family (IPv6 sockets also carry IPv4 as mapped
    /// addresses).
    pub fn new(ipv6_socket: bool) -> Self {
        // SAFETY: sockaddr_storage, iovec and mmsghdr are plain C structs (integers and
        // raw pointers), valid when all-zero.
        let (addrs, iovecs, hdrs) = unsafe {
            (
                zeroed_boxed(BATCH),
                zeroed_boxed(BATCH),
                zeroed_boxed(BATCH),
            )
        };
        let mut batch = SendBatch {
            ipv6_socket,
            bufs: vec![[0u8; BUF_LEN]; BATCH].into_boxed_slice(),
            addrs,
            iovecs,
            hdrs,
            dests: vec![SocketAddr::from(([0, 0, 0, 0], 0)); BATCH].into_boxed_slice(),
            segments: None,
            segmented_sends: 0,
            tokens: Vec::with_capacity(BATCH),
        };
        for i in 0..BATCH {
            batch.iovecs[i].iov_base = batch.bufs[i].as_mut_ptr().cast();
            let hdr = &mut batch.hdrs[i].msg_hdr;
            hdr.msg_iov = &mut batch.iovecs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_name = (&mut batch.addrs[i] as *mut libc::sockaddr_storage).cast();
        }
        batch
    }

    /// Like [`SendBatch::new`], but a flush sends each run of queued datagrams to one
    /// destination, all the length of the first (the last may be shorter), as one send
    /// with `UDP_SEGMENT` (GSO): the kernel builds and routes one datagram and cuts it
    /// into the run's datagrams at the device, or the NIC does. Each datagram still gets
    /// its own token and outcome. A datagram longer than `max_segment` (the path's MTU
    /// less the IP and UDP headers) is sent alone, as without GSO: the kernel refuses a
    /// run whose segments the path cannot carry whole, where it fragments a datagram.
    pub fn segmenting(ipv6_socket: bool, max_segment: usize) -> Self {
        let mut batch = Self::new(ipv6_socket);
        // SAFETY: mmsghdr is a plain C struct (integers and raw pointers), valid when
        // all-zero.
        let hdrs = unsafe { zeroed_boxed(BATCH) };
        batch.segments = Some(Segments {
            hdrs,
            controls: vec![[0u64; 4]; BATCH].into_boxed_slice(),
            slots: vec![0; BATCH].into_boxed_slice(),
            max_segment,
        });
        batch
    }

    /// Sends so far, over every flush, that carried several datagrams as GSO segments
    /// (0 unless [`SendBatch::segmenting`]).
    pub fn segmented_sends(&self) -> u64 {
        self.segmented_sends
    }

    /// True when no more datagrams fit before a flush.
    pub fn is_full(&self) -> bool {
        self.tokens.len() == BATCH
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Queues `head` followed by `body` for `dest`, with `token`. On error nothing is
    /// queued and the token comes back with the reason.
    pub fn push(
        &mut self,
        dest: SocketAddr,
        head: &[u8],
        body: &[u8],
        token: T,
    ) -> Result<(), (T, PushError)> {
        let total = head.len() + body.len();
        let i = self.tokens.len();
        if i == BATCH {
            return Err((token, PushError::Full));
        }
        if total > BUF_LEN {
            return Err((token, PushError::TooLarge));
        }
        let Some(name_len) = std_to_sockaddr(dest, self.ipv6_socket, &mut self.addrs[i]) else {
            return Err((token, PushError::WrongFamily));
        };
        self.bufs[i][..head.len()].copy_from_slice(head);
        self.bufs[i][head.len()..total].copy_from_slice(body);
        self.iovecs[i].iov_len = total;
        self.hdrs[i].msg_hdr.msg_namelen = name_len;
        self.dests[i] = dest;
        self.tokens.push(token);
        Ok(())
    }

    /// Queues like [`SendBatch::push`], but first sends what is queued when the batch is
    /// full (settling each of those datagrams with `settle`, as [`SendBatch::flush`]
    /// does), so only [`PushError::TooLarge`] or [`PushError::WrongFamily`] comes back.
    pub fn push_flushing(
        &mut self,
        fd: RawFd,
        (dest, head, body): (SocketAddr, &[u8], &[u8]),
        token: T,
        settle: impl FnMut(T, bool),
    ) -> Result<(), (T, PushError)> {
        if self.is_full() {
            self.flush(fd, settle);
        }
        self.push(dest, head, body, token)
    }

    /// Sends everything queued and calls `settle(token, sent)` once per datagram, in
    /// queue order. Never blocks: on EAGAIN the remainder fails; a datagram the kernel
    /// rejects (unreachable, permission) fails alone and the rest still go out.
    pub fn flush(&mut self, fd: RawFd, mut settle: impl FnMut(T, bool)) -> Flushed {
        let len = self.tokens.len();
        // The messages to send: one per datagram, or one per run with GSO.
        let (hdrs, slots): (&mut [libc::mmsghdr], Option<&[usize]>) = match &mut self.segments {
            None => (&mut self.hdrs[..len], None),
            Some(segments) => {
                let messages = segments.gather(&self.hdrs[..len], &self.iovecs, &self.dests);
                (
                    &mut segments.hdrs[..messages],
                    Some(&segments.slots[..messages]),
                )
            }
        };
        let slots_of = |m: usize| slots.map_or(1, |s| s[m]);
        let messages = hdrs.len();
        let mut out = Flushed::default();
        let mut outcomes = self.tokens.drain(..);
        let (mut start, mut slot) = (0, 0);
        while start < messages {
            let remaining = messages - start;
            // SAFETY: hdrs[start..] are initialised mmsghdr whose name, iovec and control
            // pointers point into buffers owned by `self`, alive for the call, with
            // lengths set by `push` (and by `Segments::gather`).
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs[start..].as_mut_ptr(),
                    remaining as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                let n = n as usize;
                let carried: usize = (start..start + n).map(slots_of).sum();
                out.sends += n;
                self.segmented_sends +=
                    (start..start + n).filter(|&m| slots_of(m) > 1).count() as u64;
                out.sent += carried;
                out.bytes += self.iovecs[slot..slot + carried]
                    .iter()
                    .map(|v| v.iov_len)
                    .sum::<usize>();
                outcomes
                    .by_ref()
                    .take(carried)
                    .for_each(|t| settle(t, true));
                start += n;
                slot += carried;
                continue;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    out.failed += len - slot;
                    outcomes.by_ref().for_each(|t| settle(t, false));
                    break;
                }
                // The first message was refused (e.g. ECONNREFUSED from an earlier ICMP,
                // ENETUNREACH, or a run of segments over the path's MTU): its datagrams
                // fail, the rest carry on.
                _ => {
                    let refused = slots_of(start);
                    out.failed += refused;
                    outcomes
                        .by_ref()
                        .take(refused)
                        .for_each(|t| settle(t, false));
                    start += 1;
                    slot += refused;
                }
            }
        }
        out
    }
}

impl Segments {
    /// Groups the queued datagrams (`hdrs`, `iovecs`, `dests`, in queue order) into runs
    /// to one destination, each as long as its first but the last (and the first at most
    /// `max_segment`), at most [`MAX_SEGMENTS`] and [`MAX_SEGMENTED_BYTES`]; writes one message per run (with a
    /// `UDP_SEGMENT` control message when it carries more than one datagram). Returns
    /// the number of messages.
    fn gather(
        &mut self,
        hdrs: &[libc::mmsghdr],
        iovecs: &[libc::iovec],
        dests: &[SocketAddr],
    ) -> usize {
        let len = hdrs.len();
        let (mut messages, mut first) = (0, 0);
        while first < len {
            let segment = iovecs[first].iov_len;
            let (mut end, mut bytes) = (first + 1, segment);
            // An empty datagram cannot lead a run (a segment size of 0 means no GSO), nor
            // one the path cannot carry whole.
            while (1..=self.max_segment).contains(&segment)
                && end < len
                && end - first < MAX_SEGMENTS
                && dests[end] == dests[first]
                // (An empty datagram joins no run: it would be no segment at all.)
                && (1..=segment).contains(&iovecs[end].iov_len)
                && bytes + iovecs[end].iov_len <= MAX_SEGMENTED_BYTES
            {
                bytes += iovecs[end].iov_len;
                end += 1;
                if iovecs[end - 1].iov_len < segment {
                    break; // a shorter datagram ends its run
                }
            }
            // The run's first datagram's header already names its address and points at
            // its iovec; the run's iovecs follow it in the same array.
            let hdr = &mut self.hdrs[messages].msg_hdr;
            hdr.msg_name = hdrs[first].msg_hdr.msg_name;
            hdr.msg_namelen = hdrs[first].msg_hdr.msg_namelen;
            hdr.msg_iov = hdrs[first].msg_hdr.msg_iov;
            hdr.msg_iovlen = end - first;
            if end - first > 1 {
                let control = &mut self.controls[messages];
                let cmsg = control.as_mut_ptr().cast::<libc::cmsghdr>();
                // SAFETY: `control` is 32 bytes aligned to 8: room for a cmsghdr and the
                // u16 that CMSG_DATA points at after it (checked at compile time above).
                unsafe {
                    (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = libc::UDP_SEGMENT;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment as u16);
                }
                hdr.msg_control = control.as_mut_ptr().cast();
                hdr.msg_controllen = SEGMENT_CONTROL_LEN;
            } else {
                hdr.msg_control = std::ptr::null_mut();
                hdr.msg_controllen = 0;
            }
            self.slots[messages] = end - first;
            messages += 1;
            first = end;
        }
        messages
    }
}

/// Creates a non-blocking UDP socket bound to `addr` with large buffers, and
/// `SO_REUSEPORT` when several sockets share the address (one per worker).
pub fn bind_udp(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
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

/// Socket buffers [`bind_udp`] asks for: room for bursts on a small machine.
pub const SOCKET_BUFFER: usize = 4 << 20;

/// Which UDP offloads the kernel accepts on a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offloads {
    /// UDP_SEGMENT (GSO): one send of equal-size segments to one destination.
    pub gso: bool,
    /// UDP_GRO: one receive of coalesced equal-size datagrams from one source.
    pub gro: bool,
}

/// Probes GSO and GRO by setting each option to its neutral value (0: off), which the
/// kernel accepts only when it supports the option.
pub fn probe_offloads(fd: RawFd) -> Offloads {
    let try_set = |option: libc::c_int| {
        let off: libc::c_int = 0;
        // SAFETY: passes a pointer to a live c_int and its exact size; the kernel only
        // reads it.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_UDP,
                option,
                (&off as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    };
    Offloads {
        gso: try_set(libc::UDP_SEGMENT),
        gro: try_set(libc::UDP_GRO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small xorshift generator: the same cases on every run.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Over many random batches (three destinations, lengths from a few sizes, some
    /// empty or past the longest segment): every queued datagram is in exactly one
    /// message, in order; a message of several is one destination, all the length of its
    /// first but a shorter last, within the limits, and carries a `UDP_SEGMENT` of that
    /// length; a lone datagram carries no control message.
    #[test]
    fn runs_cover_the_batch_once_and_keep_the_rules() {
        let dests: [SocketAddr; 3] = [
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
            "127.0.0.2:1".parse().unwrap(),
        ];
        let sizes = [0usize, 40, 200, 200, 200, 1200, 1500, 2000];
        let max_segment = 1452;
        let mut state = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..500 {
            let mut batch: SendBatch<()> = SendBatch::segmenting(false, max_segment);
            let len = 1 + (next(&mut state) % BATCH as u64) as usize;
            let mut queued = vec![];
            for _ in 0..len {
                let to = dests[(next(&mut state) % 2 + next(&mut state) % 2) as usize];
                let size = sizes[(next(&mut state) % sizes.len() as u64) as usize];
                batch.push(to, &[], &vec![0; size], ()).unwrap();
                queued.push((to, size));
            }
            let segments = batch.segments.as_mut().unwrap();
            let messages = segments.gather(&batch.hdrs[..len], &batch.iovecs, &batch.dests);
            let mut first = 0;
            for m in 0..messages {
                let count = segments.slots[m];
                let hdr = &segments.hdrs[m].msg_hdr;
                assert!(count >= 1 && hdr.msg_iovlen == count);
                assert_eq!(
                    hdr.msg_iov, batch.hdrs[first].msg_hdr.msg_iov,
                    "starts at its first"
                );
                let run = &queued[first..first + count];
                let segment = run[0].1;
                if count == 1 {
                    assert!(hdr.msg_control.is_null() && hdr.msg_controllen == 0);
                } else {
                    assert!(run.iter().all(|d| d.0 == run[0].0), "one destination");
                    assert!((1..=max_segment).contains(&segment), "{run:?}");
                    assert!(run[..count - 1].iter().all(|d| d.1 == segment), "{run:?}");
                    assert!((1..=segment).contains(&run[count - 1].1), "{run:?}");
                    assert!(count <= MAX_SEGMENTS);
                    assert!(run.iter().map(|d| d.1).sum::<usize>() <= MAX_SEGMENTED_BYTES);
                    // SAFETY: the control buffer holds a cmsghdr written by `gather`.
                    let cmsg = unsafe { &*(hdr.msg_control as *const libc::cmsghdr) };
                    assert_eq!(
                        (cmsg.cmsg_level, cmsg.cmsg_type),
                        (libc::SOL_UDP, libc::UDP_SEGMENT)
                    );
                    // SAFETY: CMSG_DATA of that cmsghdr is the u16 `gather` wrote.
                    let written =
                        unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>()) };
                    assert_eq!(usize::from(written), segment);
                }
                // A run ends only where the next datagram could not join it.
                if let Some(next) = queued.get(first + count) {
                    let ends_short = run[count - 1].1 < segment;
                    let could_join = count > 1 || (1..=max_segment).contains(&segment);
                    assert!(
                        !could_join
                            || ends_short
                            || next.0 != run[0].0
                            || !(1..=segment).contains(&next.1)
                            || count == MAX_SEGMENTS
                            || run.iter().map(|d| d.1).sum::<usize>() + next.1
                                > MAX_SEGMENTED_BYTES,
                        "a run stopped early: {run:?} then {next:?}"
                    );
                }
                first += count;
            }
            assert_eq!(first, len, "every datagram in exactly one message");
        }
    }
}
