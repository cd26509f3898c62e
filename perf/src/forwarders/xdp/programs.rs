//! The load tools' BPF programs (`perf/bpf/tools.bpf.c`, compiled by clang with BTF at
//! build time), each loaded with the read-only globals that configure it: the
//! live-frames generator, the counting sink, the in-kernel reference relay and the
//! live-frames probe.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::OwnedFd;

use ufrag_bpf::object::{ObjectLoader, include_bytes_aligned};
use ufrag_bpf::sys::{self as bpf, Map};

use super::{ETH, FlowPlan, Stamps, state, udp_checksum_base};

/// The object clang built from `perf/bpf/tools.bpf.c`.
pub(super) static OBJECT: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tools.bpf.o"));
const WHAT: &str = "perf/bpf/tools.bpf.c's object";
/// `TEMPLATE_MAX` in the source: the most header bytes the generator writes.
const TEMPLATE_MAX: usize = 128;

/// A 16-bit value as the program loads it from a frame where it sits big-endian.
fn wire16(value: u16) -> u16 {
    u16::from_ne_bytes(value.to_be_bytes())
}

/// An IPv4 address as the program loads it from a frame.
fn wire32(ip: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(ip.octets())
}

/// `perf_probe` (`XDP_DROP`): one run tells whether the kernel allows live frames.
pub(super) fn probe_program() -> io::Result<OwnedFd> {
    ObjectLoader::default()
        .load(OBJECT, WHAT)?
        .xdp_program("perf_probe")
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

/// The sink (`perf_sink`) and its per-CPU count: a UDP frame over IPv4 (no options) or
/// IPv6 (no extension headers) that is `counted` is counted, as the number of frames it
/// carries when it is a relay's bundle (its payload starts 0xF2, then the count:
/// `ufrag_common::bundle`), as one otherwise; when the count passes a multiple of
/// `sample_every` it goes on to the kernel (for the latency socket, which reads every
/// frame of a bundle), otherwise it is dropped; everything else passes untouched.
pub fn sink_program(counted: Counted, sample_every: u32) -> io::Result<(OwnedFd, Map)> {
    let (by_source, port) = match counted {
        Counted::ToPort(p) => (0u8, wire16(p)),
        Counted::FromPort(p) => (1u8, wire16(p)),
    };
    let every = sample_every.max(1);
    let mut object = ObjectLoader::default()
        .global("sink_port", &port)
        .global("sink_by_source", &by_source)
        .global("sample_every", &every)
        .load(OBJECT, WHAT)?;
    let prog = object.xdp_program("perf_sink")?;
    let counts = object.map("perf_sink_counts", bpf::MAP_PERCPU_ARRAY, 4, 8)?;
    Ok((prog, counts))
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

/// The in-kernel XDP rewrite relay (`perf_xdp_relay`), the reference any relay is
/// measured against: an IPv4 UDP datagram (no options) to the VIP gets new Ethernet
/// addresses, source address the VIP, destination `to`, TTL 64, a recomputed IPv4
/// checksum and UDP checksum 0 (none, which IPv4 allows), and leaves through the
/// interface it came in on (`XDP_TX`); everything else passes. No flow table and no hint
/// check: the floor of what forwarding costs.
pub fn relay_program(r: &Rewrite) -> io::Result<OwnedFd> {
    let (vip_addr, vip_port) = (wire32(*r.vip.ip()), wire16(r.vip.port()));
    let (to_addr, to_port) = (wire32(*r.to.ip()), wire16(r.to.port()));
    let mut macs = [0u8; 12];
    macs[..6].copy_from_slice(&r.to_mac);
    macs[6..].copy_from_slice(&r.relay_mac);
    ObjectLoader::default()
        .global("relay_vip_addr", &vip_addr)
        .global("relay_vip_port", &vip_port)
        .global("relay_macs", &macs)
        .global("relay_to_addr", &to_addr)
        .global("relay_to_port", &to_port)
        .load(OBJECT, WHAT)?
        .xdp_program("perf_xdp_relay")
}

/// The generator (`perf_gen`) for copies of `template` carrying `plan`'s flows where
/// `stamps` say, and its pacing state (`perf_gen_state`). Paced in the kernel: a frame
/// that is not yet due (by `bpf_ktime_get_ns` against the state's schedule), or beyond
/// the total, is dropped back to the page pool; a due one advances the schedule (never
/// letting it fall more than a burst behind, so a stall does not turn into a flood), is
/// counted, gets the template's headers written in full (live-frame pages come back from
/// the stack recycled, not reset), the source of flow `n % plan.flows` (its port and
/// address as [`FlowPlan::addr`] deals them), payload bytes 2–3 the count and 4–11 the
/// time since `epoch_ktime` (ns, big endian), and leaves with `XDP_TX`. Frame `n`
/// (counted from 1) belongs to flow `n % plan.flows`. When the plan has several
/// addresses, the IPv4 checksum is adjusted for the changed last octet (RFC 1624); a
/// frame with a UDP checksum (IPv6) gets it adjusted for everything stamped
/// ([`udp_checksum_base`]).
pub fn generator_program(
    template: &[u8],
    (plan, stamps): (&FlowPlan, Stamps),
    epoch_ktime: u64,
) -> io::Result<(OwnedFd, Map)> {
    let header_len = stamps.datagram_at + 2;
    if template.len() < stamps.datagram_at + 12 || header_len > TEMPLATE_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a template of {} bytes with its datagram at {}: the generator needs the \
                 whole datagram stamp and at most {TEMPLATE_MAX} header bytes",
                template.len(),
                stamps.datagram_at
            ),
        ));
    }
    let mut head = [0u8; TEMPLATE_MAX];
    let copied = template.len().min(TEMPLATE_MAX);
    head[..copied].copy_from_slice(&template[..copied]);
    let as_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let template_len = as_u32(header_len);
    let (port_at, octet_at, datagram_at) = (
        as_u32(stamps.port_at),
        as_u32(stamps.octet_at),
        as_u32(stamps.datagram_at),
    );
    let udp_checksum_at = as_u32(stamps.udp_checksum_at.unwrap_or(0));
    let udp_sum_base = stamps
        .udp_checksum_at
        .map_or(0, |at| u32::from(udp_checksum_base(template, at, stamps)));
    let in_ip_header = u8::from(stamps.in_ip_header);
    let first_octet = crate::bench::load::last_octet(plan.first_ip);
    let ip_checksum = u16::from_be_bytes([template[ETH + 10], template[ETH + 11]]);
    let addresses = plan.addresses();
    let mut object = ObjectLoader::default()
        .global("gen_template", &head)
        .global("gen_template_len", &template_len)
        .global("gen_port_at", &port_at)
        .global("gen_octet_at", &octet_at)
        .global("gen_datagram_at", &datagram_at)
        .global("gen_udp_checksum_at", &udp_checksum_at)
        .global("gen_in_ip_header", &in_ip_header)
        .global("gen_flows", &plan.flows)
        .global("gen_first_port", &plan.first_port)
        .global("gen_addresses", &addresses)
        .global("gen_first_octet", &first_octet)
        .global("gen_ip_checksum", &ip_checksum)
        .global("gen_udp_sum_base", &udp_sum_base)
        .global("gen_epoch_ns", &epoch_ktime)
        .load(OBJECT, WHAT)?;
    let prog = object.xdp_program("perf_gen")?;
    let state = object.map("perf_gen_state", bpf::MAP_ARRAY, 4, state::LEN)?;
    Ok((prog, state))
}
