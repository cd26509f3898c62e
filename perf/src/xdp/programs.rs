//! The load tools' BPF programs, assembled in Rust: the live-frames generator, the
//! counting sink, the in-kernel reference relay and the pass program a veth peer needs.

use std::net::SocketAddrV4;

use ufrag_bpf::asm::{Asm, B, DW, H, Insn, JEQ, JGE, JGT, JLT, JNE, action, helper};

use super::{ETH, FlowPlan, IPV4, IPV6, PAYLOAD, PAYLOAD_V6, Stamps, state, udp_checksum_base};

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
/// headers) that is `counted` is counted in the per-CPU `counts[0]`, as the number of
/// frames it carries when it is a relay's bundle (its payload starts 0xF2, then the
/// count: `ufrag_common::bundle`), as one otherwise; when the count passes a multiple
/// of `sample_every` it goes on to the kernel (for the latency socket, which reads every
/// frame of a bundle), otherwise it is dropped; everything else passes untouched.
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
    a.mov_imm(8, PAYLOAD_V6 as i32);
    a.goto("port");
    a.label("ipv4");
    a.load(B, 5, 2, ETH as i16);
    a.jump(JNE, 5, Err(0x45), "pass");
    a.load(B, 5, 2, (ETH + 9) as i16);
    a.jump(JNE, 5, Err(17), "pass");
    a.load(H, 5, 2, (ETH + IPV4 + port_offset) as i16);
    a.mov_imm(8, PAYLOAD as i32);
    a.label("port");
    a.jump(JNE, 5, Err(port_as_loaded(port)), "pass");
    // r6: the datagrams this frame stands for (kept across the map lookup's call).
    a.mov_imm(6, 1);
    a.mov_reg(4, 2);
    a.add_reg(4, 8); // the UDP payload
    a.mov_reg(5, 4);
    a.add_imm(5, 2);
    a.jump(JGT, 5, Ok(3), "counted"); // under two bytes of payload
    a.load(B, 5, 4, 0);
    a.jump(JNE, 5, Err(0xF2), "counted");
    a.load(B, 6, 4, 1);
    a.label("counted");
    a.lookup_array(counts_fd, 0, "pass");
    // r7: the count before, r9: after. Passed on when they straddle a multiple of
    // `sample_every`: one datagram in `sample_every` frames, a bundle of many frames
    // included, so a run of bundles never floods the latency socket.
    a.load(DW, 7, 0, 0);
    a.mov_reg(9, 7);
    a.add_reg(9, 6);
    a.store_reg(DW, 0, 0, 9);
    let every = sample_every.max(1) as i32;
    a.div_imm(7, every);
    a.div_imm(9, every);
    a.jump(JNE, 7, Ok(9), "pass");
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

/// `return XDP_PASS`: what a veth needs on the far end before `XDP_TX` frames can reach it.
pub(super) fn pass_program() -> Vec<Insn> {
    let mut a = Asm::default();
    a.ret(action::PASS);
    a.finish()
}
