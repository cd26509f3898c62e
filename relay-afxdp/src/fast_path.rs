//! The in-kernel fast path (`--fast-path xdp`): established flows forwarded by the XDP
//! program itself, in both directions, without a trip through AF_XDP.
//!
//! # What goes where
//!
//! User space decides every flow as before. When a flow proves itself (its first DTLS or
//! media datagram, or a route restored from the route cache) the worker writes two
//! entries into the `fast_flows` map (a per-CPU hash, so its counters need no atomics):
//!
//! - **forward**: key = the client's datagram's addresses (client → VIP); value = the
//!   headers to send it with (Ethernet to the transceiver's next hop, IP and UDP from the
//!   worker's internal address to the transceiver, then the frame header naming client
//!   and VIP), built by user space with [`crate::packet::write_udp`];
//! - **return**: key = the transceiver's frame's addresses (transceiver → internal address)
//!   and its frame header (which names the client and the VIP, so only this flow's own
//!   transceiver can send to this flow's client, as in user space); value = the headers
//!   to the client (Ethernet to its next hop, IP and UDP from the VIP).
//!
//! An entry names its next hop by address; the MAC comes from a second map,
//! `fast_next_hops`, which holds the next hops that installed flows go through, with
//! their MACs from the workers' neighbour view (written on every new view): a neighbour
//! that changes its MAC (a transceiver's host replaced, a router failover) is followed by
//! every flow through it at once, and a next hop whose MAC is not known yet sends that
//! flow's frames to the worker, which has the kernel resolve it, as before the fast
//! path. A next hop leaves the map with the last flow through it, so the map holds no
//! more than the installed flows need, whatever passed through before.
//!
//! The program (`relay_steer_fast` in `bpf/relay.bpf.c`) then handles a datagram to a VIP
//! or internal address (after the steering block has matched it) like this:
//!
//! ```text
//!  IPv4 without options or IPv6 without extension headers; IP and UDP lengths that fill
//!  the frame exactly                                          else → AF_XDP (unfit)
//!  first payload byte 0..3 (STUN: consent, ICE restarts)       → AF_XDP (stun)
//!  from a client: first byte not DTLS (20..63) or RTP/RTCP (128..191)
//!  (user space drops it as unclassified)                     → AF_XDP (unfit)
//!  from a transceiver: frame header 0xF1, both addresses IPv4 (16 bytes) or both
//!  IPv6 (40)                                                  else → AF_XDP (unfit)
//!  fast_flows[key] missing                                     → AF_XDP (miss)
//!  fast_next_hops[entry's next hop] missing                    → AF_XDP (no_mac)
//!  an IPv6 output and no incoming UDP checksum to update       → AF_XDP (unfit)
//!  bpf_xdp_adjust_head(in_len − out_len); copy the entry's headers; set the lengths;
//!  IPv4: header checksum from the entry's partial sum, UDP checksum 0 (IPv4 allows it);
//!  IPv6: UDP checksum updated from the incoming one (RFC 1624) by the entry's constant
//!  and the two lengths; count the flow's packets, bytes and last-seen time → XDP_TX
//! ```
//!
//! The payload is never read beyond its first byte (and a return frame's header), never
//! copied and never summed: the UDP checksum of an IPv6 output is the incoming one,
//! corrected for what changed (addresses, ports, length, frame header). So that output
//! is only as right as the incoming checksum: complete on any wire, but a veth peer in
//! the same machine hands over a partial one (the pseudo-header sum, for an offload that
//! never happens), which this path would pass on wrong; IPv4 outputs carry none and are
//! always right. On a veth testbed, IPv6 clients therefore need their peers' TX
//! checksum offload off (`ethtool -K IF tx off`).
//!
//! User space removes both entries when the flow leaves its table or moves, reads their
//! last-seen stamps before it expires a flow (so a flow carried only by the kernel stays
//! alive) and before it lets a Binding Request move one, and sums the per-CPU counters of
//! the `fast_stats` map into `/metrics`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ufrag_bpf::sys::{self as bpf, Map};
use ufrag_common::flow::FlowKey;
use ufrag_common::forward::{FlowMirror, Route};
use ufrag_common::frame::{FrameHeader, MAX_HEADER_LEN};
use ufrag_common::metrics::FastPathTotals;
use ufrag_common::wire::{self, fold_carries};

use crate::neighbours::Neighbours;
use crate::packet::{ETH_LEN, IPV4_LEN, IPV6_LEN, UDP_LEN, write_udp};

/// The `dests` value of a VIP.
pub const KIND_VIP: u8 = 1;
/// The `dests` value of an internal address.
pub const KIND_INTERNAL: u8 = 2;

/// The key's length: source address (16, IPv4 mapped), destination address (16), source
/// port, destination port (as on the wire), direction (0 forward, 1 return), 3 zero
/// bytes, then a return frame's header (40, zero-padded; zeros for a forward key).
pub const KEY_LEN: usize = 80;
// The offsets of `struct flow_key`'s fields.
pub(crate) const KEY_SRC: usize = 0;
pub(crate) const KEY_DST: usize = 16;
pub(crate) const KEY_SRC_PORT: usize = 32;
pub(crate) const KEY_DST_PORT: usize = 34;
pub(crate) const KEY_DIR: usize = 36;
pub(crate) const KEY_FRAME: usize = 40;

/// The value's length (`struct flow_entry`): the counters (packets, bytes, last seen in
/// `bpf_ktime_get_ns`), the lengths and checksum parts, the next hop's address (16
/// bytes, IPv4 mapped: the key of its MAC in `fast_next_hops`), the headers to send, and
/// padding to the struct's 8-byte alignment.
pub const VALUE_LEN: usize = (56 + TEMPLATE_MAX).next_multiple_of(8);
/// `fast_next_hops`' key: a next hop's address, 16 bytes, IPv4 mapped.
pub const NEXT_HOP_KEY_LEN: usize = 16;
/// `fast_next_hops`' value (`struct mac`): the MAC and two zero bytes.
pub const NEXT_HOP_VALUE_LEN: usize = 8;
/// How many next hops (neighbours: transceivers, clients on the link, gateways) the fast
/// path keeps a MAC for.
pub const NEXT_HOPS: u32 = 4096;
// The offsets of `struct flow_entry`'s fields (bpf/relay.bpf.c), as user space writes
// and reads them; a test checks them against the object's BTF.
pub(crate) const V_PACKETS: usize = 0;
pub(crate) const V_BYTES: usize = 8;
pub(crate) const V_LAST_SEEN: usize = 16;
pub(crate) const V_IN_LEN: usize = 24;
pub(crate) const V_OUT_LEN: usize = 26;
pub(crate) const V_OUT_V6: usize = 28;
pub(crate) const V_IP_SUM: usize = 30;
pub(crate) const V_UDP_SUM_DELTA: usize = 32;
pub(crate) const V_NEXT_HOP: usize = 40;
pub(crate) const V_TEMPLATE: usize = 56;
/// The longest headers sent: Ethernet, IPv6, UDP and a frame header of two IPv6
/// addresses.
pub(crate) const TEMPLATE_MAX: usize = ETH_LEN + IPV6_LEN + UDP_LEN + MAX_HEADER_LEN;

/// `fast_stats` indexes (per-CPU `u64`s).
pub const STAT_FORWARD_PACKETS: u32 = 0;
/// Bytes sent towards transceivers.
pub const STAT_FORWARD_BYTES: u32 = 1;
/// Datagrams sent to clients.
pub const STAT_RETURN_PACKETS: u32 = 2;
/// Bytes sent to clients.
pub const STAT_RETURN_BYTES: u32 = 3;
/// STUN left to user space.
pub const STAT_STUN: u32 = 4;
/// No entry: left to user space.
pub const STAT_MISS: u32 = 5;
/// A frame this path does not take (options, lengths, no checksum): left to user space.
pub const STAT_UNFIT: u32 = 6;
/// The entry's next hop has no MAC in `fast_next_hops` yet: left to user space.
pub const STAT_NO_MAC: u32 = 7;
/// How many `fast_stats` counters there are.
pub const STATS: u32 = 8;

/// The ones' complement sum of `bytes` as 16-bit words in the order a BPF load reads
/// them (native), not folded.
fn word_sum(bytes: &[u8]) -> u64 {
    bytes
        .chunks(2)
        .map(|w| u64::from(u16::from_ne_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum()
}

/// Subtracting `words` words whose sum is `sum`, in ones' complement: adding each
/// word's complement.
fn complement((sum, words): (u64, u64)) -> u64 {
    0xffff * words - sum
}

/// What a UDP checksum covers of one end: its address (4 or 16 bytes, as in the
/// pseudo-header) and its port, as (ones' complement sum not folded, 16-bit words).
fn end_words(end: SocketAddr) -> (u64, u64) {
    let port = word_sum(&end.port().to_be_bytes());
    match end.ip() {
        IpAddr::V4(v4) => (word_sum(&v4.octets()) + port, 3),
        IpAddr::V6(v6) => (word_sum(&v6.octets()) + port, 9),
    }
}

/// A direction of a flow as the fast path sees it: what arrives (from → to, with a
/// frame header for a return) and what leaves (out_from → out_to, with a frame header
/// for a forward).
#[derive(Clone, Copy, Debug)]
struct Leg {
    from: SocketAddr,
    to: SocketAddr,
    frame_in: Option<FrameHeader>,
    out_from: SocketAddr,
    out_to: SocketAddr,
    frame_out: Option<FrameHeader>,
}

/// A frame header's bytes (none: an empty slice), in a buffer of the longest one.
fn frame_bytes(header: Option<FrameHeader>) -> ([u8; MAX_HEADER_LEN], usize) {
    let mut out = [0u8; MAX_HEADER_LEN];
    let len = header.map_or(0, |h| h.emit(&mut out).expect("sized for the longest"));
    (out, len)
}

impl Leg {
    fn key(&self) -> [u8; KEY_LEN] {
        let mut key = [0u8; KEY_LEN];
        key[KEY_SRC..KEY_SRC + 16].copy_from_slice(&wire::ip16(self.from.ip()));
        key[KEY_DST..KEY_DST + 16].copy_from_slice(&wire::ip16(self.to.ip()));
        key[KEY_SRC_PORT..KEY_SRC_PORT + 2].copy_from_slice(&self.from.port().to_be_bytes());
        key[KEY_DST_PORT..KEY_DST_PORT + 2].copy_from_slice(&self.to.port().to_be_bytes());
        let (frame, len) = frame_bytes(self.frame_in);
        key[KEY_DIR] = u8::from(self.frame_in.is_some());
        key[KEY_FRAME..KEY_FRAME + len].copy_from_slice(&frame[..len]);
        key
    }

    /// The entry (counters zero) for sending through `next_hop`, or `None` for a shape
    /// this path does not carry (mixed families on the way out, or a mixed frame header).
    fn value(&self, src_mac: [u8; 6], next_hop: IpAddr) -> Option<[u8; VALUE_LEN]> {
        let mixed =
            |h: Option<FrameHeader>| h.is_some_and(|h| h.client.is_ipv4() != h.vip.is_ipv4());
        if mixed(self.frame_in) || mixed(self.frame_out) {
            return None;
        }
        let ip_in = if self.from.is_ipv4() {
            IPV4_LEN
        } else {
            IPV6_LEN
        };
        let (frame_in, frame_in_len) = frame_bytes(self.frame_in);
        let (frame_out, frame_out_len) = frame_bytes(self.frame_out);
        let (frame_in, frame_out) = (&frame_in[..frame_in_len], &frame_out[..frame_out_len]);
        let in_len = ETH_LEN + ip_in + UDP_LEN + frame_in.len();
        let mut template = [0u8; TEMPLATE_MAX];
        // The destination MAC is the program's to write, from `fast_next_hops`.
        let headers = write_udp(
            &mut template,
            src_mac,
            [0; 6],
            self.out_from,
            self.out_to,
            0,
        )?;
        template[headers..headers + frame_out.len()].copy_from_slice(frame_out);
        let out_len = headers + frame_out.len();
        let out_v6 = self.out_to.is_ipv6();
        // Lengths and checksums are the program's to write: zero them in the template.
        let udp = headers - UDP_LEN;
        template[udp + 4..udp + 8].fill(0);
        let ip_sum = if out_v6 {
            template[ETH_LEN + 4..ETH_LEN + 6].fill(0);
            0
        } else {
            template[ETH_LEN + 2..ETH_LEN + 4].fill(0);
            template[ETH_LEN + 10..ETH_LEN + 12].fill(0);
            fold_carries(word_sum(&template[ETH_LEN..ETH_LEN + IPV4_LEN]))
        };
        // What changes in the UDP checksum besides the lengths: addresses, ports, and the
        // frame header added or removed (the protocol number is in both).
        let frame_words = |f: &[u8]| (word_sum(f), f.len() as u64 / 2);
        let added = end_words(self.out_from).0 + end_words(self.out_to).0 + word_sum(frame_out);
        let removed = complement(end_words(self.from))
            + complement(end_words(self.to))
            + complement(frame_words(frame_in));
        let csum_k = fold_carries(added + removed);
        let mut value = [0u8; VALUE_LEN];
        let put16 = |v: &mut [u8; VALUE_LEN], at: usize, x: u16| {
            v[at..at + 2].copy_from_slice(&x.to_ne_bytes());
        };
        put16(&mut value, V_IN_LEN, in_len as u16);
        put16(&mut value, V_OUT_LEN, out_len as u16);
        value[V_OUT_V6] = u8::from(out_v6);
        put16(&mut value, V_IP_SUM, ip_sum);
        value[V_UDP_SUM_DELTA..V_UDP_SUM_DELTA + 4]
            .copy_from_slice(&u32::from(csum_k).to_ne_bytes());
        value[V_NEXT_HOP..V_TEMPLATE].copy_from_slice(&wire::ip16(next_hop));
        value[V_TEMPLATE..V_TEMPLATE + TEMPLATE_MAX].copy_from_slice(&template);
        Some(value)
    }
}

/// One flow's two directions, as the worker that owns it sees them.
#[derive(Clone, Copy, Debug)]
pub struct FastFlow {
    /// The client and the VIP it sends to.
    pub key: FlowKey,
    /// The transceiver.
    pub transceiver: SocketAddr,
    /// The internal address the owning worker sends from (the transceiver answers it).
    pub internal: SocketAddr,
}

impl FastFlow {
    fn forward(&self) -> Leg {
        Leg {
            from: self.key.client,
            to: self.key.vip,
            frame_in: None,
            out_from: self.internal,
            out_to: self.transceiver,
            frame_out: Some(FrameHeader::new(self.key.client, self.key.vip)),
        }
    }

    fn back(&self) -> Leg {
        Leg {
            from: self.transceiver,
            to: self.internal,
            // The transceiver marks what it sends on a proven flow: a path that answered
            // its probe.
            frame_in: Some(FrameHeader::new(self.key.client, self.key.vip).on_verified_path(true)),
            out_from: self.key.vip,
            out_to: self.key.client,
            frame_out: None,
        }
    }

    /// The forward entry's key and value (towards the transceiver through `next_hop`).
    pub fn forward_entry(
        &self,
        if_mac: [u8; 6],
        next_hop: IpAddr,
    ) -> Option<([u8; KEY_LEN], [u8; VALUE_LEN])> {
        let leg = self.forward();
        Some((leg.key(), leg.value(if_mac, next_hop)?))
    }

    /// The return entry's key and value (towards the client through `next_hop`).
    pub fn return_entry(
        &self,
        if_mac: [u8; 6],
        next_hop: IpAddr,
    ) -> Option<([u8; KEY_LEN], [u8; VALUE_LEN])> {
        let leg = self.back();
        Some((leg.key(), leg.value(if_mac, next_hop)?))
    }
}

/// Totals of the `fast_stats` map, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastStats {
    /// Datagrams and bytes sent towards transceivers.
    pub forward: (u64, u64),
    /// Datagrams and bytes sent to clients.
    pub back: (u64, u64),
    /// Left to user space: STUN.
    pub stun: u64,
    /// No entry.
    pub miss: u64,
    /// Not taken (options, lengths, no checksum for an IPv6 output, mixed families, a
    /// client datagram that is neither DTLS nor RTP/RTCP).
    pub unfit: u64,
    /// The entry's next hop had no MAC yet.
    pub no_mac: u64,
}

/// The fast path's maps, shared by the program and every worker.
#[derive(Debug)]
pub struct FastPathMaps {
    flows: Map,
    next_hops: Map,
    stats: Map,
    /// Proven flows no worker could install (see [`FastPathTotals::flows_not_installed`]).
    not_installed: AtomicU64,
    /// Which next hops the installed flows go through.
    hops: Mutex<HopsInUse>,
}

/// The next hops installed flows go through: each flow's two (by its forward entry's key)
/// and how many flows go through each, so a hop leaves `fast_next_hops` with its last flow.
#[derive(Debug, Default)]
struct HopsInUse {
    per_flow: HashMap<[u8; KEY_LEN], [IpAddr; 2]>,
    per_hop: HashMap<IpAddr, u32>,
}

impl FastPathMaps {
    /// Takes over the loaded object's `fast_flows`, `fast_next_hops` and `fast_stats`.
    pub(crate) fn from_maps([flows, next_hops, stats]: [Map; 3]) -> Self {
        FastPathMaps {
            flows,
            next_hops,
            stats,
            not_installed: AtomicU64::new(0),
            hops: Mutex::default(),
        }
    }

    /// The kernel's description of `fast_flows`.
    pub fn flows_map_info(&self) -> io::Result<bpf::MapInfo> {
        self.flows.info()
    }

    /// The entries `fast_flows` needs for `flows` flows: two each.
    pub fn entries_for(flows: usize) -> u32 {
        u32::try_from(flows.saturating_mul(2).max(2)).unwrap_or(u32::MAX)
    }

    /// The totals.
    pub fn stats(&self) -> io::Result<FastStats> {
        let read = |index: u32| -> io::Result<u64> { Ok(self.stats.counters(index)?.iter().sum()) };
        Ok(FastStats {
            forward: (read(STAT_FORWARD_PACKETS)?, read(STAT_FORWARD_BYTES)?),
            back: (read(STAT_RETURN_PACKETS)?, read(STAT_RETURN_BYTES)?),
            stun: read(STAT_STUN)?,
            miss: read(STAT_MISS)?,
            unfit: read(STAT_UNFIT)?,
            no_mac: read(STAT_NO_MAC)?,
        })
    }

    /// The totals as `/metrics` shows them (zeros if the map cannot be read).
    pub fn totals(&self) -> FastPathTotals {
        let stats = self.stats().unwrap_or_default();
        FastPathTotals {
            forward: stats.forward,
            back: stats.back,
            left: [stats.stun, stats.miss, stats.unfit, stats.no_mac],
            flows_not_installed: self.not_installed.load(Ordering::Relaxed),
        }
    }

    /// A buffer for one key's values, one per possible CPU.
    pub fn value_buffer(&self) -> io::Result<Vec<u8>> {
        Ok(vec![0u8; self.flows.value_buffer_len()?])
    }

    fn write(
        &self,
        key: &[u8; KEY_LEN],
        value: &[u8; VALUE_LEN],
        buf: &mut [u8],
    ) -> io::Result<()> {
        for cpu in buf.chunks_mut(self.flows.value_stride()) {
            cpu[..VALUE_LEN].copy_from_slice(value);
        }
        self.flows.update(key, buf)
    }

    /// Sets the MAC frames to `next_hop` leave with (every entry through it follows).
    pub fn set_next_hop(&self, next_hop: IpAddr, mac: [u8; 6]) -> io::Result<()> {
        let mut value = [0u8; 8];
        value[..6].copy_from_slice(&mac);
        self.next_hops.update(&wire::ip16(next_hop), &value)
    }

    /// Sets `next_hop`'s MAC if an installed flow goes through it; false if none does.
    pub fn set_next_hop_in_use(&self, next_hop: IpAddr, mac: [u8; 6]) -> io::Result<bool> {
        let hops = self.hops_in_use();
        if !hops.per_hop.contains_key(&next_hop) {
            return Ok(false);
        }
        self.set_next_hop(next_hop, mac).map(|()| true)
    }

    /// The MAC `fast_next_hops` holds for `next_hop`, if any.
    pub fn next_hop_mac(&self, next_hop: IpAddr) -> Option<[u8; 6]> {
        let mut value = [0u8; 8];
        self.next_hops
            .lookup(&wire::ip16(next_hop), &mut value)
            .ok()?;
        value[..6].try_into().ok()
    }

    /// How many next hops installed flows go through.
    pub fn next_hops_in_use(&self) -> usize {
        self.hops_in_use().per_hop.len()
    }

    fn hops_in_use(&self) -> std::sync::MutexGuard<'_, HopsInUse> {
        self.hops.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that the flow with forward key `flow` goes through `hops` (replacing what
    /// it went through before, if it was installed).
    fn hold_hops(&self, flow: [u8; KEY_LEN], hops: [IpAddr; 2]) {
        let mut in_use = self.hops_in_use();
        // The new hops are counted before the old are let go: a hop in both stays.
        for hop in hops {
            *in_use.per_hop.entry(hop).or_default() += 1;
        }
        if let Some(old) = in_use.per_flow.insert(flow, hops) {
            self.let_go(&mut in_use, old);
        }
    }

    /// Forgets the hops the flow with forward key `flow` went through, if it was installed.
    fn release_hops(&self, flow: &[u8; KEY_LEN]) {
        let mut in_use = self.hops_in_use();
        if let Some(old) = in_use.per_flow.remove(flow) {
            self.let_go(&mut in_use, old);
        }
    }

    /// One flow fewer goes through each of `hops`; a hop no flow goes through leaves
    /// `fast_next_hops`.
    fn let_go(&self, in_use: &mut HopsInUse, hops: [IpAddr; 2]) {
        for hop in hops {
            let Some(count) = in_use.per_hop.get_mut(&hop) else {
                continue;
            };
            *count -= 1;
            if *count == 0 {
                in_use.per_hop.remove(&hop);
                let _ = self.next_hops.delete(&wire::ip16(hop));
            }
        }
    }

    /// Writes both entries of `flow` (the return entry first, so a forwarded datagram's
    /// answer cannot miss it), through the next hops towards the transceiver and the
    /// client (whose MACs [`Self::set_next_hop`] gives); `buf` is a
    /// [`Self::value_buffer`]. False for a flow this path does not carry (mixed address
    /// families).
    pub fn install(
        &self,
        flow: &FastFlow,
        if_mac: [u8; 6],
        (to_transceiver, to_client): (IpAddr, IpAddr),
        buf: &mut [u8],
    ) -> io::Result<bool> {
        let entries = (
            flow.forward_entry(if_mac, to_transceiver),
            flow.return_entry(if_mac, to_client),
        );
        let (Some((fk, fv)), Some((rk, rv))) = entries else {
            return Ok(false);
        };
        self.write(&rk, &rv, buf)?;
        if let Err(e) = self.write(&fk, &fv, buf) {
            let _ = self.flows.delete(&rk);
            return Err(e);
        }
        self.hold_hops(fk, [to_transceiver, to_client]);
        Ok(true)
    }

    /// Removes both entries of `flow` (either may be missing), and the MAC of each next
    /// hop no other flow goes through.
    pub fn remove(&self, flow: &FastFlow) {
        for leg in [flow.forward(), flow.back()] {
            let _ = self.flows.delete(&leg.key());
        }
        self.release_hops(&flow.forward().key());
    }

    /// The flow's counters over both directions and every CPU: packets, bytes, and the
    /// latest last-seen stamp (`bpf_ktime_get_ns`; `None` if it never carried one).
    pub fn flow_counters(&self, flow: &FastFlow, buf: &mut [u8]) -> (u64, u64, Option<u64>) {
        let field = |cpu: &[u8], at: usize| {
            u64::from_ne_bytes(cpu[at..at + 8].try_into().expect("8 bytes"))
        };
        let (mut packets, mut bytes, mut last) = (0, 0, 0);
        for leg in [flow.forward(), flow.back()] {
            if self.flows.lookup(&leg.key(), buf).is_err() {
                continue;
            }
            for cpu in buf.chunks(self.flows.value_stride()) {
                packets += field(cpu, V_PACKETS);
                bytes += field(cpu, V_BYTES);
                last = last.max(field(cpu, V_LAST_SEEN));
            }
        }
        (packets, bytes, (last > 0).then_some(last))
    }
}

/// One worker's side of the fast path: writes its proven flows' entries, removes them,
/// reads their last-seen stamps. It is the worker's [`FlowMirror`]. Every buffer it
/// needs is allocated here, once.
#[derive(Debug)]
pub struct FastPathWriter {
    maps: Arc<FastPathMaps>,
    neighbours: Neighbours,
    if_mac: [u8; 6],
    internal: SocketAddr,
    /// One value per possible CPU, written at once.
    per_cpu: Vec<u8>,
    /// The neighbour view whose MACs are in `fast_next_hops`.
    written_generation: Option<u64>,
}

impl FastPathWriter {
    /// A writer for the worker sending from `internal`.
    pub fn new(
        maps: Arc<FastPathMaps>,
        neighbours: Neighbours,
        if_mac: [u8; 6],
        internal: SocketAddr,
    ) -> io::Result<Self> {
        let per_cpu = maps.value_buffer()?;
        Ok(FastPathWriter {
            maps,
            neighbours,
            if_mac,
            internal,
            per_cpu,
            written_generation: None,
        })
    }

    fn not_installed(&self) {
        self.maps.not_installed.fetch_add(1, Ordering::Relaxed);
    }

    fn flow(&self, key: &FlowKey, route: Route) -> FastFlow {
        FastFlow {
            key: *key,
            transceiver: route.next_hop,
            internal: self.internal,
        }
    }
}

impl FlowMirror for FastPathWriter {
    fn proven(&mut self, key: &FlowKey, route: Route, _now: Instant) {
        // A flow through a global relay returns through it: user space keeps it.
        if route.return_via.is_some() {
            return self.not_installed();
        }
        let flow = self.flow(key, route);
        let hops = (
            self.neighbours.next_hop(route.next_hop.ip()),
            self.neighbours.next_hop(key.client.ip()),
        );
        let (Some(to_transceiver), Some(to_client)) = hops else {
            return self.not_installed(); // no route out of this interface
        };
        let installed = self.maps.install(
            &flow,
            self.if_mac,
            (to_transceiver, to_client),
            &mut self.per_cpu,
        );
        if !matches!(installed, Ok(true)) {
            return self.not_installed();
        }
        // A MAC not known yet: the frames go to the worker (which has the kernel resolve
        // it) until `maintain` writes the new neighbour view.
        for (dst, hop) in [
            (route.next_hop.ip(), to_transceiver),
            (key.client.ip(), to_client),
        ] {
            if let Some(mac) = self.neighbours.mac_for(dst) {
                let _ = self.maps.set_next_hop_in_use(hop, mac);
            }
        }
    }

    /// Writes the MAC of every next hop in use from a new neighbour view into
    /// `fast_next_hops`: a neighbour that changed its MAC is followed by every flow
    /// through it at once. (A neighbour that left the kernel's table keeps its last MAC
    /// here while flows go through it.)
    fn maintain(&mut self) {
        self.neighbours.refresh();
        let generation = self.neighbours.generation();
        if self.written_generation == Some(generation) {
            return;
        }
        let maps = &self.maps;
        let mut failed = false;
        self.neighbours.each_mac(|hop, mac| {
            failed |= maps.set_next_hop_in_use(hop, mac).is_err();
        });
        if !failed {
            self.written_generation = Some(generation);
        }
    }

    fn gone(&mut self, key: &FlowKey, route: Route) {
        self.maps.remove(&self.flow(key, route));
    }

    fn last_seen(&mut self, key: &FlowKey, route: Route, now: Instant) -> Option<Instant> {
        let flow = self.flow(key, route);
        let (_, _, latest) = self.maps.flow_counters(&flow, &mut self.per_cpu);
        Some(stamp_to_instant(latest?, bpf::ktime_now(), now))
    }
}

/// A `bpf_ktime_get_ns` stamp as an [`Instant`], given the two clocks now.
pub fn stamp_to_instant(stamp_ns: u64, ktime_now_ns: u64, now: Instant) -> Instant {
    now.checked_sub(Duration::from_nanos(ktime_now_ns.saturating_sub(stamp_ns)))
        .unwrap_or(now)
}
