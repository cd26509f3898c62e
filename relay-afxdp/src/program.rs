//! The XDP programs (`bpf/relay.bpf.c`: steering, and steering with the in-kernel fast
//! path), compiled by clang with BTF at build time and loaded from that ELF object.
//!
//! [`ufrag_bpf::object`] reads the object, creates its maps with their BTF key and value
//! types (so `bpftool map dump` prints named fields) and loads the chosen program. The
//! maps and the program are then taken over as plain descriptors
//! ([`ufrag_bpf::sys::Map`], checked against the sizes this crate's buffers have) and the
//! loader is dropped: what the relay keeps is what it uses.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use ufrag_bpf::object::ObjectLoader;
use ufrag_bpf::sys::{self as bpf, Map};

use crate::fast_path::{
    KEY_LEN, NEXT_HOP_KEY_LEN, NEXT_HOP_VALUE_LEN, NEXT_HOPS, STATS, VALUE_LEN,
};

pub use ufrag_bpf::sys::action;

/// `relay_stats` index counting frames passed to the kernel.
pub const STAT_PASSED: u32 = 0;
/// `relay_stats` index counting frames steered to AF_XDP.
pub const STAT_STEERED: u32 = 1;

/// The object clang built from `bpf/relay.bpf.c`.
static OBJECT: &[u8] =
    ufrag_bpf::object::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/relay.bpf.o"));

/// What [`load`] hands over: the program and every map it uses.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) prog: OwnedFd,
    pub(crate) dests: Map,
    pub(crate) xsks: Map,
    pub(crate) stats: Map,
    /// `fast_flows`, `fast_next_hops` and `fast_stats`, when the fast path was asked for.
    pub(crate) fast: Option<[Map; 3]>,
}

/// Loads the steering program (with the fast path when `fast_flow_entries` gives the
/// capacity of `fast_flows`), with room for `dests` destinations and `queues` queues.
pub(crate) fn load(dests: u32, queues: u32, fast_flow_entries: Option<u32>) -> io::Result<Loaded> {
    let mut object = ObjectLoader::default()
        .max_entries("relay_dests", dests.max(1))
        .max_entries("relay_xsks", queues.max(1))
        // Without the fast path its maps are still in the object: keep them tiny.
        .max_entries("fast_flows", fast_flow_entries.unwrap_or(2).max(2))
        .max_entries(
            "fast_next_hops",
            if fast_flow_entries.is_some() {
                NEXT_HOPS
            } else {
                1
            },
        )
        .load(OBJECT, "bpf/relay.bpf.c's object")?;
    let prog = object.xdp_program(if fast_flow_entries.is_some() {
        "relay_steer_fast"
    } else {
        "relay_steer"
    })?;
    let dests = object.map("relay_dests", bpf::MAP_HASH, DEST_KEY_LEN, 1)?;
    let xsks = object.map("relay_xsks", bpf::MAP_XSKMAP, 4, 4)?;
    let stats = object.map("relay_stats", bpf::MAP_ARRAY, 4, 8)?;
    let fast = match fast_flow_entries {
        None => None,
        Some(_) => Some([
            object.map("fast_flows", bpf::MAP_PERCPU_HASH, KEY_LEN, VALUE_LEN)?,
            object.map(
                "fast_next_hops",
                bpf::MAP_HASH,
                NEXT_HOP_KEY_LEN,
                NEXT_HOP_VALUE_LEN,
            )?,
            fast_stats(&object)?,
        ]),
    };
    Ok(Loaded {
        prog,
        dests,
        xsks,
        stats,
        fast,
    })
}

/// `fast_stats`, checked to hold the counters `fast_path` reads.
fn fast_stats(object: &ufrag_bpf::object::Object) -> io::Result<Map> {
    let map = object.map("fast_stats", bpf::MAP_PERCPU_ARRAY, 4, 8)?;
    let entries = map.info()?.max_entries;
    if entries != STATS {
        return Err(io::Error::other(format!(
            "fast_stats holds {entries} counters; the fast path reads {STATS}"
        )));
    }
    Ok(map)
}

/// The key of destination `addr` in the `relay_dests` map (`struct dest_key`): the
/// address as 16 bytes (IPv4 as IPv4-mapped IPv6), the port in network byte order, two
/// zero bytes.
pub fn dest_key(addr: SocketAddr) -> [u8; DEST_KEY_LEN] {
    let mut key = [0u8; DEST_KEY_LEN];
    key[..16].copy_from_slice(&ufrag_common::wire::ip16(addr.ip()));
    key[16..18].copy_from_slice(&addr.port().to_be_bytes());
    key
}

/// The length of a [`dest_key`].
pub const DEST_KEY_LEN: usize = 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast_path::{
        KEY_DIR, KEY_DST, KEY_DST_PORT, KEY_FRAME, KEY_SRC, KEY_SRC_PORT, TEMPLATE_MAX, V_BYTES,
        V_IN_LEN, V_IP_SUM, V_LAST_SEEN, V_NEXT_HOP, V_OUT_LEN, V_OUT_V6, V_PACKETS, V_TEMPLATE,
        V_UDP_SUM_DELTA,
    };
    use ufrag_bpf::btf::struct_members;

    fn offset(members: &[(String, usize)], name: &str) -> usize {
        members
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no member {name} in {members:?}"))
            .1
    }

    /// The value the C source gives `name`, as `#define NAME value` or `NAME = value,` (an
    /// enum member): the constants the program and this crate must agree on.
    fn c_constant(name: &str) -> u64 {
        const SOURCE: &str = include_str!("../bpf/relay.bpf.c");
        let value = SOURCE
            .lines()
            .map(str::trim)
            .find_map(|line| {
                let rest = line
                    .strip_prefix("#define ")
                    .and_then(|l| l.strip_prefix(name))
                    .map(str::trim_start)
                    .or_else(|| line.strip_prefix(name)?.trim_start().strip_prefix('='))?;
                let token = rest.split_whitespace().next()?;
                Some(token.trim_end_matches(',').to_string())
            })
            .unwrap_or_else(|| panic!("{name} is not defined in bpf/relay.bpf.c"));
        match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => value.parse(),
        }
        .unwrap_or_else(|e| panic!("{name} = {value}: {e}"))
    }

    #[test]
    fn the_programs_constants_are_this_crates() {
        use crate::fast_path::*;
        use ufrag_common::frame::{FLAG_VERIFIED_PATH, FrameHeader, MAX_HEADER_LEN};
        let v4_header = FrameHeader::new(
            "192.0.2.1:1".parse().unwrap(),
            "192.0.2.2:2".parse().unwrap(),
        );
        let mut first = [0u8; MAX_HEADER_LEN];
        v4_header.emit(&mut first).unwrap();
        for (name, ours) in [
            ("FRAME_MAGIC", u64::from(first[0])),
            ("FRAME_VERIFIED_PATH", u64::from(FLAG_VERIFIED_PATH)),
            ("FRAME_V4_LEN", v4_header.encoded_len() as u64),
            ("FRAME_V6_LEN", MAX_HEADER_LEN as u64),
            ("KIND_VIP", u64::from(KIND_VIP)),
            ("KIND_INTERNAL", u64::from(KIND_INTERNAL)),
            ("STEER_PASSED", u64::from(STAT_PASSED)),
            ("STEER_STEERED", u64::from(STAT_STEERED)),
            ("FAST_FORWARD_PACKETS", u64::from(STAT_FORWARD_PACKETS)),
            ("FAST_FORWARD_BYTES", u64::from(STAT_FORWARD_BYTES)),
            ("FAST_RETURN_PACKETS", u64::from(STAT_RETURN_PACKETS)),
            ("FAST_RETURN_BYTES", u64::from(STAT_RETURN_BYTES)),
            ("FAST_STUN", u64::from(STAT_STUN)),
            ("FAST_MISS", u64::from(STAT_MISS)),
            ("FAST_UNFIT", u64::from(STAT_UNFIT)),
            ("FAST_NO_MAC", u64::from(STAT_NO_MAC)),
            ("FAST_STATS", u64::from(STATS)),
        ] {
            assert_eq!(c_constant(name), ours, "{name}");
        }
    }

    #[test]
    fn the_key_and_entry_offsets_are_the_ones_clang_laid_out() {
        let object = OBJECT;
        let key = struct_members(object, "flow_key").expect("struct flow_key");
        for (name, at) in [
            ("src", KEY_SRC),
            ("dst", KEY_DST),
            ("src_port", KEY_SRC_PORT),
            ("dst_port", KEY_DST_PORT),
            ("direction", KEY_DIR),
            ("frame", KEY_FRAME),
        ] {
            assert_eq!(offset(&key, name), at, "flow_key.{name}");
        }
        let entry = struct_members(object, "flow_entry").expect("struct flow_entry");
        for (name, at) in [
            ("packets", V_PACKETS),
            ("bytes", V_BYTES),
            ("last_seen_ns", V_LAST_SEEN),
            ("in_len", V_IN_LEN),
            ("out_len", V_OUT_LEN),
            ("out_v6", V_OUT_V6),
            ("ip_sum", V_IP_SUM),
            ("udp_sum_delta", V_UDP_SUM_DELTA),
            ("next_hop", V_NEXT_HOP),
            ("headers", V_TEMPLATE),
        ] {
            assert_eq!(offset(&entry, name), at, "flow_entry.{name}");
        }
        // The last member ends the struct: its padding to 8 bytes.
        assert_eq!(offset(&entry, "zero3"), V_TEMPLATE + TEMPLATE_MAX);
        let dest = struct_members(object, "dest_key").expect("struct dest_key");
        assert_eq!(offset(&dest, "port"), 16);
        assert!(struct_members(object, "no_such_struct").is_err());
    }

    #[test]
    fn destination_keys_are_the_wire_bytes_with_ipv4_mapped() {
        let v4 = dest_key("10.77.0.2:3478".parse().unwrap());
        assert_eq!(&v4[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&v4[12..], &[10, 77, 0, 2, 0x0D, 0x96, 0, 0]);
        let v6 = dest_key("[fd77::2]:40000".parse().unwrap());
        assert_eq!(&v6[..2], &[0xfd, 0x77]);
        assert_eq!(&v6[16..], &[0x9c, 0x40, 0, 0]);
    }
}
