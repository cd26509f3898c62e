//! Load tools in BPF, so that the tools are never the limit of what they measure.
//!
//! [`XdpGenerator`] transmits one prebuilt UDP frame (IPv4 or IPv6) many times with `BPF_PROG_RUN`
//! in live-frames mode (the mechanism behind xdp-trafficgen): a small XDP program stamps
//! each copy with a flow (source port), a sequence number and the send time (keeping an
//! IPv6 frame's UDP checksum right), and returns
//! `XDP_TX`, so the frame leaves the client's veth as if a NIC had sent it: no socket, no
//! syscall per frame or batch, no IP output path; the program paces itself against
//! `bpf_ktime_get_ns` in one long run (a run per slice cost ~24 ms to tear down at
//! times on this kernel), stopped by a signal. [`XdpSink`] counts frames for one UDP
//! port in XDP on the receiving veth (per-CPU counters, `XDP_DROP`) and passes one in
//! `sample_every` to the kernel, where the socket [`crate::load::Sink`] reads its send
//! time for latency. Both speak the datagram format of [`crate::load`].

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_bpf::asm::{Asm, B, DW, H, Insn, JEQ, JGE, JGT, JLT, JNE, action, helper};
use ufrag_bpf::sys::{self as bpf, Map};

use crate::load::{FlowPlan, Load, Sink, Trial};

const ETH: usize = 14;
const IPV4: usize = 20;
const UDP: usize = 8;
const PAYLOAD: usize = ETH + IPV4 + UDP;
const IPV6: usize = 40;
const PAYLOAD_V6: usize = ETH + IPV6 + UDP;

/// An interface inside a namespace, as the BPF calls need it.
#[derive(Clone, Debug)]
pub struct Iface {
    /// Its namespace (`None`: this process's own).
    pub ns: Option<String>,
    /// Its name.
    pub name: String,
    /// Its index (in `ns`).
    pub ifindex: u32,
    /// Its MAC address.
    pub mac: [u8; 6],
}

impl Iface {
    /// Looks `name` up in namespace `ns` (`ip -o link show`).
    pub fn lookup(ns: &str, name: &str) -> io::Result<Iface> {
        Self::lookup_in(Some(ns), name)
    }

    /// Looks `name` up in namespace `ns`, or in this process's own (a lab's real NIC).
    pub fn lookup_in(ns: Option<&str>, name: &str) -> io::Result<Iface> {
        let mut ip = Command::new("ip");
        if let Some(ns) = ns {
            ip.args(["-n", ns]);
        }
        let out = ip.args(["-o", "link", "show", "dev", name]).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let bad = || io::Error::other(format!("ip link show {name} (namespace {ns:?}): {text:?}"));
        let ifindex = text
            .split(':')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(bad)?;
        let mac_text = text
            .split("link/ether ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .ok_or_else(bad)?;
        let mac = parse_mac(mac_text).ok_or_else(bad)?;
        Ok(Iface {
            ns: ns.map(str::to_string),
            name: name.to_string(),
            ifindex,
            mac,
        })
    }

    /// Attaches `prog` in native mode; the attachment lasts as long as the returned link.
    fn attach_native(&self, prog: OwnedFd) -> io::Result<Attached> {
        let ifindex = self.ifindex;
        let link = testkit::netns::in_netns(self.ns.as_deref(), move || {
            bpf::link_create_xdp(&prog, ifindex, bpf::XDP_FLAGS_DRV_MODE)
        })??;
        Ok(Attached { _link: link })
    }
}

/// A MAC address from `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> = text
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).ok().filter(|_| h.len() == 2))
        .collect::<Option<_>>()?;
    bytes.try_into().ok()
}

/// A program attached to an interface; detached on drop.
#[derive(Debug)]
struct Attached {
    _link: OwnedFd,
}

/// CLOCK_MONOTONIC now (what `bpf_ktime_get_ns` reads), in nanoseconds.
fn ktime_now() -> u64 {
    let now =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64
}

/// CLOCK_MONOTONIC at `epoch`, in nanoseconds.
fn ktime_at(epoch: Instant) -> u64 {
    ktime_now().saturating_sub(epoch.elapsed().as_nanos() as u64)
}

/// The Internet checksum of `bytes` (RFC 1071): 0 over a header that carries a
/// correct one.
pub fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The frame every generated datagram starts from: Ethernet, then IPv4 (checksummed) and
/// UDP with checksum 0 (none, which IPv4 allows, so stamping the payload needs no
/// fix-up), or IPv6 and UDP with its checksum (mandatory: the generator keeps it right),
/// and a `payload_len`-byte payload (at least 12) that starts like RTP.
pub fn template_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: impl Into<SocketAddr>,
    dst: impl Into<SocketAddr>,
    payload_len: usize,
) -> Vec<u8> {
    let mut payload = vec![0u8; payload_len.max(12)];
    payload[0] = 0x80;
    payload[1] = 111;
    frame_around(src_mac, dst_mac, src, dst, &payload)
}

/// Ethernet, IP and UDP around `payload` ([`crate::load::udp_packet`]).
pub fn frame_around(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: impl Into<SocketAddr>,
    dst: impl Into<SocketAddr>,
    payload: &[u8],
) -> Vec<u8> {
    let (src, dst) = (src.into(), dst.into());
    let mut f = Vec::with_capacity(PAYLOAD_V6 + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    let ethertype: u16 = if src.is_ipv6() { 0x86DD } else { 0x0800 };
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(&crate::load::udp_packet(src, dst, payload));
    f
}

/// A relay frame as a transceiver sends it towards `client` through the relay: a
/// [`template_frame`] whose payload is the frame header (`client`, `vip`) and then the
/// `datagram_len`-byte RTP-like datagram.
pub fn framed_template(
    (src_mac, dst_mac): ([u8; 6], [u8; 6]),
    (src, dst): (SocketAddrV4, SocketAddrV4),
    (client, vip): (SocketAddrV4, SocketAddrV4),
    datagram_len: usize,
) -> Vec<u8> {
    use ufrag_common::frame::FrameHeader;
    let header = FrameHeader::new(client.into(), vip.into());
    let mut payload = vec![0u8; header.encoded_len() + datagram_len.max(12)];
    let n = header.emit(&mut payload).expect("room for the header");
    payload[n] = 0x80;
    payload[n + 1] = 111;
    frame_around(src_mac, dst_mac, src, dst, &payload)
}

/// Where the live-frames generator writes what changes from frame to frame: the flow's
/// port and its address's last octet, and the datagram's count and send time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamps {
    /// The flow's port (16 bits, big endian).
    pub port_at: usize,
    /// The last octet of the flow's address (whose `addr_len` bytes end here).
    pub octet_at: usize,
    /// The address's length: 4 (IPv4) or 16 (IPv6).
    pub addr_len: usize,
    /// True when that address is in the IPv4 header (its checksum is then adjusted).
    pub in_ip_header: bool,
    /// Where the UDP checksum is, when the frame carries one (IPv6): every frame's is
    /// then adjusted for what was stamped.
    pub udp_checksum_at: Option<usize>,
    /// Where the RTP-like datagram starts: its bytes 2–3 get the count, 4–11 the time.
    pub datagram_at: usize,
}

impl Stamps {
    /// The flow is the frame's source (client → relay).
    pub const SOURCE: Stamps = Stamps {
        port_at: ETH + IPV4,
        octet_at: ETH + 15,
        addr_len: 4,
        in_ip_header: true,
        udp_checksum_at: None,
        datagram_at: PAYLOAD,
    };
    /// The flow is the frame's source, over IPv6 (client → relay).
    pub const SOURCE_V6: Stamps = Stamps {
        port_at: ETH + IPV6,
        octet_at: ETH + 8 + 15,
        addr_len: 16,
        in_ip_header: false,
        udp_checksum_at: Some(ETH + IPV6 + 6),
        datagram_at: PAYLOAD_V6,
    };
    /// The flow is the frame's destination (transceiver → client, straight or NATed).
    pub const DESTINATION: Stamps = Stamps {
        port_at: ETH + IPV4 + 2,
        octet_at: ETH + 19,
        addr_len: 4,
        in_ip_header: true,
        udp_checksum_at: None,
        datagram_at: PAYLOAD,
    };
    /// The flow is the client in the relay frame header of a [`framed_template`]
    /// (transceiver → relay; the `common::frame` layout with IPv4 client and VIP: client
    /// port at bytes 4–5, client IP at 8–11, 16 bytes in all).
    pub const FRAMED_CLIENT: Stamps = Stamps {
        port_at: PAYLOAD + 4,
        octet_at: PAYLOAD + 11,
        addr_len: 4,
        in_ip_header: false,
        udp_checksum_at: None,
        datagram_at: PAYLOAD + 16,
    };

    /// The flow is the frame's source, in `plan`'s family.
    pub fn source_of(plan: &FlowPlan) -> Stamps {
        if plan.is_ipv6() {
            Stamps::SOURCE_V6
        } else {
            Stamps::SOURCE
        }
    }

    /// The flow a frame carries where these stamps write it.
    pub fn flow_of(&self, frame: &[u8]) -> SocketAddr {
        let addr = &frame[self.octet_at + 1 - self.addr_len..=self.octet_at];
        let ip: std::net::IpAddr = match self.addr_len {
            4 => <[u8; 4]>::try_from(addr).expect("4 bytes").into(),
            _ => <[u8; 16]>::try_from(addr).expect("16 bytes").into(),
        };
        SocketAddr::new(
            ip,
            u16::from_be_bytes([frame[self.port_at], frame[self.port_at + 1]]),
        )
    }
}

/// The generator's pacing state, one array value of `u64`s (their byte offsets).
mod state {
    /// When the next frame is due (CLOCK_MONOTONIC ns).
    pub(super) const NEXT_NS: i16 = 0;
    /// Nanoseconds between frames.
    pub(super) const INTERVAL_NS: i16 = 8;
    /// Frames sent so far.
    pub(super) const SENT: i16 = 16;
    /// Frames to send.
    pub(super) const TOTAL: i16 = 24;
    /// How far behind the schedule may fall before it is reset (ns): the largest burst.
    pub(super) const BURST_NS: i16 = 32;
    /// When the first frame was due (set by the first run: the schedule starts there).
    pub(super) const FIRST_NS: i16 = 40;
    /// The value's size.
    pub(super) const LEN: usize = 48;
}

/// The template's UDP checksum (at `at`) with the words the generator stamps taken out:
/// the one's-complement sum of everything else, to which the program adds each frame's
/// port, count and time (and its address's increase). The template must carry the plan's
/// first flow, count 0 and time 0 where the stamps go, or not: whatever it carries is
/// taken out.
pub fn udp_checksum_base(template: &[u8], at: usize, stamps: Stamps) -> u16 {
    let word = |i: usize| u32::from(u16::from_be_bytes([template[i], template[i + 1]]));
    let stamped = [
        stamps.port_at,
        stamps.datagram_at + 2,
        stamps.datagram_at + 4,
        stamps.datagram_at + 6,
        stamps.datagram_at + 8,
        stamps.datagram_at + 10,
    ];
    // ~checksum is the sum of all words; subtracting a word is adding its complement.
    let mut sum = u32::from(!u16::from_be_bytes([template[at], template[at + 1]]));
    for i in stamped {
        sum += 0xffff - word(i);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The generator's program. Paced in the kernel: a frame that is not yet due (by
/// `bpf_ktime_get_ns` against the state's schedule), or beyond the total, is dropped back
/// to the page pool; a due one advances the schedule (never letting it fall more than a
/// burst behind, so a stall does not turn into a flood), is counted, gets the template's
/// headers written in full (live-frame pages come back from the stack recycled, not
/// reset: a frame that was NATed or routed on the way returns with that path's addresses
/// in it), source port `base_port + sent % flows`, payload bytes 2–3 the count and 4–11
/// the time since the epoch (ns, big endian), and leaves with `XDP_TX`. Frame `n` (from 1)
/// belongs to flow `n % plan.flows` and gets that flow's source address and port; when
/// the plan has several addresses, the IPv4 checksum is adjusted for the changed last
/// octet (RFC 1624: the sum grows by the octet's increase). A frame with a UDP checksum
/// (IPv6) gets it adjusted for everything stamped: [`udp_checksum_base`] is the
/// template's sum without the stamped words, and the program adds each frame's own.
pub fn generator_program(
    state_fd: i32,
    template: &[u8],
    (plan, stamps): (&FlowPlan, Stamps),
    epoch_ktime: u64,
) -> Vec<Insn> {
    let end = stamps.datagram_at + 12;
    assert!(template.len() >= end, "a whole template frame");
    let template_sum = u16::from_be_bytes([template[ETH + 10], template[ETH + 11]]);
    let mut a = Asm::default();
    a.mov_reg(6, 1);
    a.load(ufrag_bpf::asm::W, 9, 6, 0); // data
    a.load(ufrag_bpf::asm::W, 3, 6, 4); // data_end
    a.mov_reg(4, 9);
    a.add_imm(4, end as i32);
    a.jump(JGT, 4, Ok(3), "abort");
    a.lookup_array(state_fd, 0, "abort");
    a.mov_reg(8, 0); // the state
    a.call(helper::KTIME_GET_NS);
    a.mov_reg(7, 0); // now
    a.load(DW, 1, 8, state::NEXT_NS);
    a.jump(JNE, 1, Err(0), "scheduled");
    a.mov_reg(1, 7); // the first run starts the schedule
    a.store_reg(DW, 8, state::FIRST_NS, 7);
    a.label("scheduled");
    a.jump(JLT, 7, Ok(1), "drop"); // not due yet
    a.load(DW, 2, 8, state::SENT);
    a.load(DW, 3, 8, state::TOTAL);
    a.jump(JGE, 2, Ok(3), "drop"); // all sent
    a.load(DW, 4, 8, state::INTERVAL_NS);
    a.add_reg(1, 4);
    a.load(DW, 5, 8, state::BURST_NS);
    a.mov_reg(0, 7);
    a.sub_reg(0, 5); // the earliest the schedule may be
    a.jump(JGE, 1, Ok(0), "on_schedule");
    a.mov_reg(1, 0);
    a.label("on_schedule");
    a.store_reg(DW, 8, state::NEXT_NS, 1);
    a.add_imm(2, 1);
    a.store_reg(DW, 8, state::SENT, 2);
    // Every header byte, and the datagram's first two.
    store_bytes(&mut a, 9, 0, &template[..stamps.datagram_at + 2]);
    a.mov_reg(3, 2);
    a.mod_imm(3, plan.flows as i32); // the flow
    a.mov_reg(4, 3);
    a.mod_imm(4, plan.ports_per_addr as i32);
    a.add_imm(4, i32::from(plan.first_port));
    if let Some(at) = stamps.udp_checksum_at {
        // r5: the frame's UDP sum, from the template's without the stamped words.
        a.mov_imm64(5, u64::from(udp_checksum_base(template, at, stamps)));
        a.add_reg(5, 4);
    }
    a.to_be(4, 16);
    a.store_reg(H, 9, stamps.port_at as i16, 4);
    if plan.addresses() > 1 {
        a.div_imm(3, plan.ports_per_addr as i32); // the address's index: its octet's increase
        a.mov_reg(4, 3);
        a.add_imm(4, i32::from(crate::load::last_octet(plan.first_ip)));
        a.store_reg(B, 9, stamps.octet_at as i16, 4);
        if stamps.udp_checksum_at.is_some() {
            // The octet is the low byte of its word: the word grows by the index.
            a.add_reg(5, 3);
        }
    }
    if plan.addresses() > 1 && stamps.in_ip_header {
        a.add_imm(3, i32::from(!template_sum)); // the header's sum, grown
        a.mov_reg(4, 3);
        a.rsh_imm(4, 16);
        a.and_imm(3, 0xffff);
        a.add_reg(3, 4); // folded once: below 0x1_0000 + 0xff, so once more is not needed
        a.and_imm(3, 0xffff);
        a.xor_imm(3, 0xffff);
        a.to_be(3, 16);
        a.store_reg(H, 9, (ETH + 10) as i16, 3);
    }
    a.mov_reg(3, 2);
    if stamps.udp_checksum_at.is_some() {
        a.mov_reg(4, 2);
        a.and_imm(4, 0xffff);
        a.add_reg(5, 4);
    }
    a.to_be(3, 16);
    a.store_reg(H, 9, (stamps.datagram_at + 2) as i16, 3);
    a.mov_reg(0, 7);
    a.mov_imm64(1, epoch_ktime);
    a.sub_reg(0, 1);
    if let Some(at) = stamps.udp_checksum_at {
        // The time's four words, then the sum folded to 16 bits, complemented (a sum of
        // 0 is sent as 0xffff: 0 would mean "no checksum").
        for shift in [48, 32, 16, 0] {
            a.mov_reg(4, 0);
            a.rsh_imm(4, shift);
            a.and_imm(4, 0xffff);
            a.add_reg(5, 4);
        }
        a.fold_checksum(5, 4, 3);
        a.jump(JNE, 5, Err(0), "checksummed");
        a.mov_imm(5, 0xffff);
        a.label("checksummed");
        a.to_be(5, 16);
        a.store_reg(H, 9, at as i16, 5);
    }
    a.to_be(0, 64);
    a.store_reg(DW, 9, (stamps.datagram_at + 4) as i16, 0);
    a.ret(action::TX);
    a.label("drop");
    a.ret(action::DROP);
    a.label("abort");
    a.ret(action::ABORTED);
    a.finish()
}

/// The start of the in-kernel relay's program: r2 = data, r3 = data_end, and a jump
/// to `pass` unless the frame holds a whole IPv4 header without options and a UDP
/// header (to [`PAYLOAD`]).
fn ipv4_udp_or_pass(a: &mut Asm) {
    a.load(ufrag_bpf::asm::W, 2, 1, 0);
    a.load(ufrag_bpf::asm::W, 3, 1, 4);
    a.mov_reg(4, 2);
    a.add_imm(4, PAYLOAD as i32);
    a.jump(JGT, 4, Ok(3), "pass");
    a.load(H, 5, 2, 12);
    a.jump(JNE, 5, Err(0x0008), "pass"); // IPv4, as loaded (little endian)
    a.load(B, 5, 2, ETH as i16);
    a.jump(JNE, 5, Err(0x45), "pass");
    a.load(B, 5, 2, (ETH + 9) as i16);
    a.jump(JNE, 5, Err(17), "pass");
}

/// A UDP port as a program's 16-bit load of it from the frame reads it.
fn port_as_loaded(port: u16) -> i32 {
    i32::from(u16::from_le_bytes(port.to_be_bytes()))
}

/// A `sample_every` that passes nothing on (in practice): for a sink with no latency
/// socket behind it.
pub const NEVER_SAMPLED: u32 = i32::MAX as u32;

/// Which UDP frames a sink counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Those to this destination port (a transceiver's).
    ToPort(u16),
    /// Those from this source port (a relay VIP's, towards many client ports).
    FromPort(u16),
}

/// The sink's program: a UDP frame over IPv4 (no options) or IPv6 (no extension
/// headers) that is `counted` is counted in the per-CPU `counts[0]`; one in
/// `sample_every` goes on to the kernel (for the latency socket), the rest are dropped;
/// everything else passes untouched.
pub fn sink_program(counts_fd: i32, counted: Counted, sample_every: u32) -> Vec<Insn> {
    let (port_offset, port) = match counted {
        Counted::ToPort(p) => (2, p),
        Counted::FromPort(p) => (0, p),
    };
    let mut a = Asm::default();
    a.load(ufrag_bpf::asm::W, 2, 1, 0);
    a.load(ufrag_bpf::asm::W, 3, 1, 4);
    a.mov_reg(4, 2);
    a.add_imm(4, PAYLOAD as i32);
    a.jump(JGT, 4, Ok(3), "pass"); // shorter than any IPv4 UDP frame
    a.load(H, 5, 2, 12);
    a.jump(JEQ, 5, Err(0x0008), "ipv4"); // the ethertypes as loaded (little endian)
    a.jump(JNE, 5, Err(0xDD86), "pass");
    // IPv6: a whole fixed header and a UDP header, UDP next.
    a.mov_reg(4, 2);
    a.add_imm(4, PAYLOAD_V6 as i32);
    a.jump(JGT, 4, Ok(3), "pass");
    a.load(B, 5, 2, (ETH + 6) as i16);
    a.jump(JNE, 5, Err(17), "pass");
    a.load(H, 5, 2, (ETH + IPV6 + port_offset) as i16);
    a.goto("port");
    a.label("ipv4");
    a.load(B, 5, 2, ETH as i16);
    a.jump(JNE, 5, Err(0x45), "pass");
    a.load(B, 5, 2, (ETH + 9) as i16);
    a.jump(JNE, 5, Err(17), "pass");
    a.load(H, 5, 2, (ETH + IPV4 + port_offset) as i16);
    a.label("port");
    a.jump(JNE, 5, Err(port_as_loaded(port)), "pass");
    a.lookup_array(counts_fd, 0, "pass");
    a.load(DW, 7, 0, 0);
    a.add_imm(7, 1);
    a.store_reg(DW, 0, 0, 7);
    a.mod_imm(7, sample_every.max(1) as i32);
    a.jump(JEQ, 7, Err(0), "pass");
    a.ret(action::DROP);
    a.label("pass");
    a.ret(action::PASS);
    a.finish()
}

/// Writes `bytes` at `reg + offset` with immediate stores (4 bytes at a time, then 2).
fn store_bytes(a: &mut Asm, reg: u8, offset: usize, bytes: &[u8]) {
    let mut at = 0;
    while at < bytes.len() {
        let left = bytes.len() - at;
        if left >= 4 {
            let w = i32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
            a.store_imm(ufrag_bpf::asm::W, reg, (offset + at) as i16, w);
            at += 4;
        } else {
            assert!(left >= 2, "even lengths only");
            let h = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
            a.store_imm(H, reg, (offset + at) as i16, i32::from(h));
            at += 2;
        }
    }
}

/// What the in-kernel reference relay rewrites a datagram to the VIP into.
#[derive(Clone, Copy, Debug)]
pub struct Rewrite {
    /// The relay's address and port that clients send to.
    pub vip: SocketAddrV4,
    /// The relay interface's MAC (the new source).
    pub relay_mac: [u8; 6],
    /// Where datagrams go.
    pub to: SocketAddrV4,
    /// Its MAC (the next hop: one L2 segment, as on the testbed).
    pub to_mac: [u8; 6],
}

/// The in-kernel XDP rewrite relay, the reference any relay is measured against: an
/// IPv4 UDP datagram (no options) to the VIP gets new Ethernet addresses, source
/// address the VIP, destination `to`, TTL 64, a recomputed IPv4 checksum and UDP
/// checksum 0 (none, which IPv4 allows), and leaves through the interface it came in on
/// (`XDP_TX`); everything else passes. No flow table and no hint check: the floor of
/// what forwarding costs.
pub fn relay_program(r: &Rewrite) -> Vec<Insn> {
    let le32 = |ip: std::net::Ipv4Addr| i32::from_le_bytes(ip.octets());
    let le16 = port_as_loaded;
    let mut a = Asm::default();
    ipv4_udp_or_pass(&mut a);
    a.load(ufrag_bpf::asm::W, 5, 2, (ETH + 16) as i16);
    a.jump(JNE, 5, Err(le32(*r.vip.ip())), "pass");
    a.load(H, 5, 2, (ETH + IPV4 + 2) as i16);
    a.jump(JNE, 5, Err(le16(r.vip.port())), "pass");
    let mut macs = r.to_mac.to_vec();
    macs.extend_from_slice(&r.relay_mac);
    store_bytes(&mut a, 2, 0, &macs);
    a.store_imm(B, 2, (ETH + 8) as i16, 64); // TTL
    a.store_imm(H, 2, (ETH + 10) as i16, 0); // checksum, recomputed below
    let mut addrs = r.vip.ip().octets().to_vec();
    addrs.extend_from_slice(&r.to.ip().octets());
    store_bytes(&mut a, 2, ETH + 12, &addrs);
    a.store_imm(H, 2, (ETH + IPV4 + 2) as i16, le16(r.to.port()));
    a.store_imm(H, 2, (ETH + IPV4 + 6) as i16, 0); // no UDP checksum
    // The ones' complement sum of the header's ten 16-bit words (in load order: the
    // sum is the same in either byte order), folded twice and inverted.
    a.mov_imm(5, 0);
    for word in 0..10 {
        a.load(H, 4, 2, (ETH + 2 * word) as i16);
        a.add_reg(5, 4);
    }
    a.fold_checksum(5, 4, 2);
    a.store_reg(H, 2, (ETH + 10) as i16, 5);
    a.ret(action::TX);
    a.label("pass");
    a.ret(action::PASS);
    a.finish()
}

/// The reference relay attached to the relay's interface (native XDP); detached on
/// drop. Its `XDP_TX` frames reach the veth's peer only when the peer has an XDP program
/// of its own ([`PeerPass`]): `perf compare` keeps one there for every setup alike.
#[derive(Debug)]
pub struct XdpRelay {
    _relay: Attached,
}

impl XdpRelay {
    /// Attaches to `on`.
    pub fn attach(on: &Iface, rewrite: &Rewrite) -> io::Result<Self> {
        let prog = bpf::prog_load_xdp(&relay_program(rewrite), "perf_xdp_relay")?;
        Ok(XdpRelay {
            _relay: on.attach_native(prog)?,
        })
    }

    /// Its verdict and output on one frame (`BPF_PROG_TEST_RUN`), for tests.
    pub fn run_once(rewrite: &Rewrite, frame: &[u8]) -> io::Result<(u32, Vec<u8>)> {
        let prog = bpf::prog_load_xdp(&relay_program(rewrite), "perf_xdp_relay")?;
        bpf::prog_test_run_output(&prog, frame)
    }
}

/// An `XDP_PASS` program on a veth's far end, which the veth needs before `XDP_TX` or
/// AF_XDP frames sent from its near end can arrive; detached on drop.
#[derive(Debug)]
pub struct PeerPass {
    _attached: Attached,
}

impl PeerPass {
    /// Attaches it to `peer`.
    pub fn attach(peer: &Iface) -> io::Result<Self> {
        let prog = bpf::prog_load_xdp(&pass_program(), "perf_pass")?;
        Ok(PeerPass {
            _attached: peer.attach_native(prog)?,
        })
    }
}

/// `return XDP_PASS`: what a veth needs on the far end before `XDP_TX` frames can reach it.
fn pass_program() -> Vec<Insn> {
    let mut a = Asm::default();
    a.ret(action::PASS);
    a.finish()
}

/// Live-frame transmitter on one interface.
#[derive(Debug)]
pub struct XdpGenerator {
    prog: Arc<OwnedFd>,
    state: Map,
    frame: Vec<u8>,
    from: Iface,
    _peer: Option<PeerPass>,
}

/// Frames per `BPF_PROG_RUN` batch (the kernel's NAPI budget).
const LIVE_BATCH: u32 = 64;
/// The largest burst after a stall, in frames.
const MAX_BURST: u64 = 64;

/// The signal that ends a generator's `BPF_PROG_RUN` (which returns EINTR once a signal
/// is pending); its handler does nothing else.
const STOP_SIGNAL: i32 = signal_hook::consts::SIGUSR1;

fn install_stop_handler() -> io::Result<()> {
    static INSTALLED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            signal_hook::flag::register(STOP_SIGNAL, Arc::new(AtomicBool::new(false)))
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(io::Error::other)
}

impl XdpGenerator {
    /// Copies of `frame` (a [`template_frame`] from `plan`'s first flow), one flow after
    /// another of `plan` as the frames' source, transmitted on `from`. `peer` is the far
    /// end of `from`'s veth pair; it gets an `XDP_PASS` program so that veth accepts XDP
    /// frames (a NIC has no peer: `None`).
    pub fn new(
        from: Iface,
        peer: Option<&Iface>,
        frame: Vec<u8>,
        plan: &FlowPlan,
        epoch: Instant,
    ) -> io::Result<Self> {
        Self::stamping(from, peer, frame, (plan, Stamps::source_of(plan)), epoch)
    }

    /// Like [`XdpGenerator::new`], with each flow written where `stamps` say (and
    /// `frame` carrying the plan's first flow there).
    pub fn stamping(
        from: Iface,
        peer: Option<&Iface>,
        frame: Vec<u8>,
        (plan, stamps): (&FlowPlan, Stamps),
        epoch: Instant,
    ) -> io::Result<Self> {
        if frame.len() < stamps.datagram_at + 12 || stamps.flow_of(&frame) != plan.addr(0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a template frame with the plan's first flow where the stamps go",
            ));
        }
        install_stop_handler()?;
        let peer = peer.map(PeerPass::attach).transpose()?;
        let state = Map::create(bpf::MAP_ARRAY, 4, state::LEN as u32, 1, "perf_gen_state")?;
        let insns = generator_program(state.raw_fd(), &frame, (plan, stamps), ktime_at(epoch));
        let prog = bpf::prog_load_xdp(&insns, "perf_gen")?;
        Ok(XdpGenerator {
            prog: Arc::new(prog),
            state,
            frame,
            from,
            _peer: peer,
        })
    }

    /// The first `frames` frames the program makes, as it makes them
    /// (`BPF_PROG_TEST_RUN`, nothing transmitted), for tests.
    pub fn stamp(&self, frames: u64) -> io::Result<Vec<Vec<u8>>> {
        self.write_state([0, 1, 0, frames, MAX_BURST, 0])?;
        (0..frames)
            .map(|_| bpf::prog_test_run_output(&self.prog, &self.frame).map(|(_, f)| f))
            .collect()
    }

    fn write_state(&self, fields: [u64; state::LEN / 8]) -> io::Result<()> {
        let value: Vec<u8> = fields.iter().flat_map(|f| f.to_ne_bytes()).collect();
        self.state.update(&0u32.to_ne_bytes(), &value)
    }

    fn read_state(&self, field: i16) -> io::Result<u64> {
        let mut value = [0u8; state::LEN];
        self.state.lookup(&0u32.to_ne_bytes(), &mut value)?;
        let at = field as usize;
        Ok(u64::from_ne_bytes(
            value[at..at + 8].try_into().expect("8 bytes"),
        ))
    }

    /// Transmits `rate_pps × duration` frames at `rate_pps`, paced by the program, from
    /// one `BPF_PROG_RUN` on a thread in the interface's namespace pinned to the load CPU
    /// (it busy-polls that core), stopped by a signal once all are sent or the time is
    /// well past; returns (frames sent, seconds from the first to the last).
    pub fn send(&self, rate_pps: u64, duration: Duration) -> io::Result<(u64, f64)> {
        let total = (rate_pps as f64 * duration.as_secs_f64()) as u64;
        let interval_ns = (1e9 / rate_pps.max(1) as f64).max(1.0) as u64;
        self.write_state([0, interval_ns, 0, total, MAX_BURST * interval_ns, 0])?;
        let prog = Arc::clone(&self.prog);
        let frame = self.frame.clone();
        let ifindex = self.from.ifindex;
        let thread_id = Arc::new(std::sync::Mutex::new(None));
        let done = Arc::new(AtomicBool::new(false));
        let (id_out, done_out) = (Arc::clone(&thread_id), Arc::clone(&done));
        let start = Instant::now();
        let handle = testkit::netns::spawn_in(self.from.ns.as_deref(), "xdp-gen", move || {
            crate::load::pin_to_load_cpu();
            *id_out.lock().expect("thread id") = Some(nix::sys::pthread::pthread_self());
            let result = loop {
                match bpf::prog_run_live(&prog, &frame, ifindex, 0, u32::MAX, LIVE_BATCH) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => break Ok(()),
                    Err(e) => break Err(e),
                    Ok(()) => {} // four billion runs done: go on
                }
            };
            done_out.store(true, Ordering::SeqCst);
            result
        })?;
        let deadline = duration + duration / 2 + Duration::from_millis(200);
        let mut finished = None;
        while start.elapsed() < deadline && !done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
            if self.read_state(state::SENT)? >= total {
                finished = Some(ktime_now());
                break;
            }
        }
        while !done.load(Ordering::SeqCst) {
            if let Some(id) = *thread_id.lock().expect("thread id") {
                let _ = nix::sys::pthread::pthread_kill(id, nix::sys::signal::Signal::SIGUSR1);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        handle
            .join()
            .map_err(|_| io::Error::other("generator thread panicked"))???;
        let sent = self.read_state(state::SENT)?;
        let first = self.read_state(state::FIRST_NS)?;
        let last = finished.unwrap_or_else(ktime_now);
        // The sending took from the first frame until the last was seen sent (polled each
        // millisecond), plus the interval the last frame stands for.
        let seconds = (last.saturating_sub(first) + interval_ns) as f64 / 1e9;
        Ok((sent, seconds))
    }
}

/// A counting sink in XDP on one interface.
#[derive(Debug)]
pub struct XdpSink {
    counts: Map,
    _attached: Attached,
    base: u64,
}

impl XdpSink {
    /// Counts the `counted` UDP frames arriving on `on`, passing one in `sample_every`.
    pub fn attach(on: &Iface, counted: Counted, sample_every: u32) -> io::Result<Self> {
        let counts = Map::create(bpf::MAP_PERCPU_ARRAY, 4, 8, 1, "perf_sink")?;
        let prog = bpf::prog_load_xdp(
            &sink_program(counts.raw_fd(), counted, sample_every),
            "perf_sink",
        )?;
        let attached = on.attach_native(prog)?;
        Ok(XdpSink {
            counts,
            _attached: attached,
            base: 0,
        })
    }

    fn total(&self) -> u64 {
        self.counts.counters(0).map_or(0, |v| v.iter().sum())
    }

    /// Starts a new count.
    pub fn reset(&mut self) {
        self.base = self.total();
    }

    /// Frames counted since the last reset.
    pub fn received(&self) -> u64 {
        self.total() - self.base
    }
}

/// A paced sender: the socket generator or the live-frame one.
#[derive(Debug)]
pub enum Sender {
    /// `sendmmsg` from client sockets, to this address.
    Sockets(crate::load::Generator, std::net::SocketAddr),
    /// `BPF_PROG_RUN` live frames.
    LiveFrames(XdpGenerator),
}

impl Sender {
    fn send(&mut self, rate_pps: u64, duration: Duration) -> io::Result<(u64, f64)> {
        match self {
            Sender::Sockets(g, to) => Ok(g.send_paced(*to, rate_pps, duration)),
            Sender::LiveFrames(g) => g.send(rate_pps, duration),
        }
    }
}

/// A sender counted by the XDP sink, latency from the socket sink's sample.
#[derive(Debug)]
pub struct XdpLoad {
    /// The sender.
    pub generator: Sender,
    /// The sender of the latency trial, if not `generator`: a busy-polling generator
    /// shares its core with the latency socket and would put its own scheduling delay
    /// into the tail.
    pub latency_generator: Option<Sender>,
    /// The counter.
    pub sink: XdpSink,
    /// The socket the sink passes its sample to.
    pub sampler: Sink,
    /// How long to wait for stragglers.
    pub settle: Duration,
}

impl Load for XdpLoad {
    fn trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.sink.reset();
        self.sampler.reset();
        let (sent, seconds) = match self.generator.send(rate_pps, duration) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("  XDP generator failed: {e}");
                (0, duration.as_secs_f64())
            }
        };
        std::thread::sleep(self.settle);
        let received = self.sink.received();
        let (_, latency) = self.sampler.take();
        Trial::from_counts(rate_pps, sent, seconds, received, &latency)
    }

    fn latency_trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        let Some(mut other) = self.latency_generator.take() else {
            return self.trial(rate_pps, duration);
        };
        std::mem::swap(&mut self.generator, &mut other);
        let t = self.trial(rate_pps, duration);
        std::mem::swap(&mut self.generator, &mut other);
        self.latency_generator = Some(other);
        t
    }
}

/// Uplink and downlink at once, as in a conversation: a trial offers `downlink_share` of
/// the rate downlink and the rest uplink (half each way in a conversation, more downlink
/// while the model speaks), the downlink's generator on a thread of its own beside the
/// uplink's (both on the tools' CPU), and counts both ways together. The latency is the
/// uplink's sample.
#[derive(Debug)]
pub struct Conversation {
    /// Client → transceiver.
    pub up: XdpLoad,
    /// Transceiver → client.
    pub down: XdpLoad,
    /// The share of each trial's rate offered downlink (0.5: a conversation).
    pub downlink_share: f64,
}

impl Conversation {
    /// Runs `up` on the uplink and a plain trial on the downlink, side by side, each at
    /// its share of `rate_pps`; the two trials summed.
    fn both(
        &mut self,
        rate_pps: u64,
        duration: Duration,
        up: fn(&mut XdpLoad, u64, Duration) -> Trial,
    ) -> Trial {
        let down_pps = (rate_pps as f64 * self.downlink_share).round() as u64;
        let (up_way, down_way) = (&mut self.up, &mut self.down);
        let (u, d) = std::thread::scope(|scope| {
            let d = scope.spawn(move || down_way.trial(down_pps, duration));
            let u = up(up_way, rate_pps - down_pps, duration);
            (u, d.join().expect("the downlink trial"))
        });
        Trial {
            offered_pps: rate_pps,
            sent_pps: u.sent_pps + d.sent_pps,
            sent: u.sent + d.sent,
            received: u.received + d.received,
            latency: u.latency,
        }
    }
}

impl Load for Conversation {
    fn trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.both(rate_pps, duration, |l, r, d| l.trial(r, d))
    }

    fn latency_trial(&mut self, rate_pps: u64, duration: Duration) -> Trial {
        self.both(rate_pps, duration, |l, r, d| l.latency_trial(r, d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::DATAGRAM_LEN;

    #[test]
    fn a_mac_is_six_hex_pairs() {
        assert_eq!(
            parse_mac("02:0a:ff:00:10:9B"),
            Some([2, 10, 255, 0, 16, 155])
        );
        assert_eq!(parse_mac("02:0a:ff:00:10"), None);
        assert_eq!(parse_mac("02:0a:ff:00:10:9b:01"), None);
        assert_eq!(parse_mac("2:0a:ff:00:10:9b"), None);
        assert_eq!(parse_mac("zz:0a:ff:00:10:9b"), None);
    }

    fn sample_plan() -> FlowPlan {
        FlowPlan::new(
            "10.77.0.1".parse::<std::net::Ipv4Addr>().unwrap(),
            20_000,
            1000,
            2500,
        )
        .unwrap()
    }

    fn sample_template() -> Vec<u8> {
        template_frame(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            "10.77.0.1:20000".parse::<SocketAddrV4>().unwrap(),
            "10.77.0.2:3478".parse::<SocketAddrV4>().unwrap(),
            DATAGRAM_LEN,
        )
    }

    #[test]
    fn the_checksum_base_plus_the_templates_own_words_is_its_checksum() {
        let f = template_frame(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            "[fd77::1]:20000".parse::<SocketAddr>().unwrap(),
            "[fd77::2]:3478".parse::<SocketAddr>().unwrap(),
            DATAGRAM_LEN,
        );
        let stamps = Stamps::SOURCE_V6;
        let at = stamps.udp_checksum_at.unwrap();
        let word = |i: usize| u32::from(u16::from_be_bytes([f[i], f[i + 1]]));
        let mut sum = u32::from(udp_checksum_base(&f, at, stamps));
        for i in [stamps.port_at, stamps.datagram_at + 2]
            .into_iter()
            .chain((4..12).step_by(2).map(|k| stamps.datagram_at + k))
        {
            sum += word(i);
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(!(sum as u16), u16::from_be_bytes([f[at], f[at + 1]]));
        assert_eq!(stamps.flow_of(&f), "[fd77::1]:20000".parse().unwrap());
    }

    #[test]
    fn the_template_is_a_valid_ipv4_udp_frame() {
        let f = sample_template();
        assert_eq!(f.len(), PAYLOAD + DATAGRAM_LEN);
        assert_eq!(
            checksum(&f[ETH..ETH + IPV4]),
            0,
            "the IPv4 header sums to 0"
        );
        assert_eq!(&f[ETH + IPV4 + 2..ETH + IPV4 + 4], &3478u16.to_be_bytes());
        assert_eq!(f[PAYLOAD], 0x80, "starts like RTP, so a relay forwards it");
    }

    #[test]
    fn the_programs_end_in_exit_and_jump_inside_themselves() {
        let template = sample_template();
        let rewrite = Rewrite {
            vip: "10.77.0.2:3478".parse().unwrap(),
            relay_mac: [2; 6],
            to: "10.77.0.3:41000".parse().unwrap(),
            to_mac: [3; 6],
        };
        for p in [
            generator_program(3, &template, (&sample_plan(), Stamps::SOURCE), 1),
            generator_program(3, &template, (&sample_plan(), Stamps::DESTINATION), 1),
            sink_program(4, Counted::ToPort(41_000), 64),
            sink_program(4, Counted::FromPort(3478), 64),
            relay_program(&rewrite),
        ] {
            assert_eq!(ufrag_bpf::asm::check_jumps(&p), Ok(()));
        }
    }
}
