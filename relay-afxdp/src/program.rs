//! The XDP programs (`bpf/relay.bpf.c`: steering, and steering with the in-kernel fast
//! path), compiled by clang with BTF at build time and loaded from that ELF object.
//!
//! aya reads the object, creates its maps with their BTF key and value types (so
//! `bpftool map dump` prints named fields) and loads the chosen program. The maps and the
//! program are then taken over as plain descriptors ([`ufrag_bpf::sys::Map`], which
//! checks the kernel's key and value sizes against the ones this crate's buffers are
//! sized for) and the loader is dropped: what the relay keeps is what it uses.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};

use ufrag_bpf::sys::{self as bpf, Map};

use crate::fast_path::{KEY_LEN, NEXT_HOP_KEY_LEN, NEXT_HOP_VALUE_LEN, STATS, VALUE_LEN};

pub use ufrag_bpf::asm::action;

/// `relay_stats` index counting frames passed to the kernel.
pub const STAT_PASSED: u32 = 0;
/// `relay_stats` index counting frames steered to AF_XDP.
pub const STAT_STEERED: u32 = 1;

/// The object clang built from `bpf/relay.bpf.c`.
pub(crate) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/relay.bpf.o"));

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

fn load_error(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// Loads the steering program (with the fast path when `fast_flow_entries` gives the
/// capacity of `fast_flows`), with room for `dests` destinations and `queues` queues.
pub(crate) fn load(dests: u32, queues: u32, fast_flow_entries: Option<u32>) -> io::Result<Loaded> {
    let mut loader = aya::EbpfLoader::new();
    loader
        .map_max_entries("relay_dests", dests.max(1))
        .map_max_entries("relay_xsks", queues.max(1))
        // Without the fast path its maps are still in the object: keep them tiny.
        .map_max_entries("fast_flows", fast_flow_entries.unwrap_or(2).max(2));
    let mut object = loader
        .load(OBJECT)
        .map_err(|e| load_error("loading bpf/relay.bpf.c's object", e))?;
    let name = if fast_flow_entries.is_some() {
        "relay_steer_fast"
    } else {
        "relay_steer"
    };
    let program: &mut aya::programs::Xdp = object
        .program_mut(name)
        .ok_or_else(|| load_error(name, "not in the object"))?
        .try_into()
        .map_err(|e| load_error(name, e))?;
    program
        .load()
        .map_err(|e| load_error(&format!("the verifier on {name}"), verifier_log(&e)))?;
    let prog = program
        .fd()
        .map_err(|e| load_error(name, e))?
        .as_fd()
        .try_clone_to_owned()?;
    let take = |name: &str, kind: u32, key: usize, value: usize| -> io::Result<Map> {
        let map = object
            .map(name)
            .ok_or_else(|| load_error(name, "not in the object"))?;
        let fd = map_fd(map)
            .ok_or_else(|| load_error(name, "an unexpected map type"))?
            .try_clone_to_owned()?;
        Map::adopt(fd, kind, key as u32, value as u32)
            .map_err(|e| load_error(&format!("{name} against this crate's layout"), e))
    };
    let dests = take("relay_dests", bpf::MAP_HASH, DEST_KEY_LEN, 1)?;
    let xsks = take("relay_xsks", bpf::MAP_XSKMAP, 4, 4)?;
    let stats = take("relay_stats", bpf::MAP_ARRAY, 4, 8)?;
    let fast = match fast_flow_entries {
        None => None,
        Some(_) => Some([
            take("fast_flows", bpf::MAP_PERCPU_HASH, KEY_LEN, VALUE_LEN)?,
            take(
                "fast_next_hops",
                bpf::MAP_HASH,
                NEXT_HOP_KEY_LEN,
                NEXT_HOP_VALUE_LEN,
            )?,
            take("fast_stats", bpf::MAP_PERCPU_ARRAY, 4, 8)?,
        ]),
    };
    debug_assert_eq!(STATS, 8);
    Ok(Loaded {
        prog,
        dests,
        xsks,
        stats,
        fast,
    })
}

/// The descriptor of one of the map types this object declares.
fn map_fd(map: &aya::maps::Map) -> Option<std::os::fd::BorrowedFd<'_>> {
    use aya::maps::Map as M;
    match map {
        M::HashMap(data)
        | M::PerCpuHashMap(data)
        | M::Array(data)
        | M::PerCpuArray(data)
        | M::XskMap(data) => Some(data.fd().as_fd()),
        _ => None,
    }
}

/// The tail of the verifier's log when it refused the program, else the error itself.
fn verifier_log(e: &aya::programs::ProgramError) -> String {
    match e {
        aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let text = verifier_log.to_string();
            let tail: Vec<&str> = text.lines().rev().take(12).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("{io_error}; verifier says:\n{}", tail.join("\n"))
        }
        other => other.to_string(),
    }
}

/// The key of destination `addr` in the `relay_dests` map (`struct dest_key`): the
/// address as 16 bytes (IPv4 as IPv4-mapped IPv6), the port in network byte order, two
/// zero bytes.
pub fn dest_key(addr: SocketAddr) -> [u8; DEST_KEY_LEN] {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    };
    let mut key = [0u8; DEST_KEY_LEN];
    key[..16].copy_from_slice(&ip.octets());
    key[16..18].copy_from_slice(&addr.port().to_be_bytes());
    key
}

/// The length of a [`dest_key`].
pub const DEST_KEY_LEN: usize = 20;

#[cfg(test)]
mod tests {
    use super::*;

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
