//! The XDP steering program as it was before `bpf/relay.bpf.c`: assembled in Rust, kept
//! only so the two can be measured side by side (`examples/program_cost.rs`).
//!
//! It sends to the AF_XDP socket of the receiving queue only IPv4 and IPv6 UDP datagrams
//! whose destination address and port are one of the relay's (its VIPs and internal
//! addresses, set in the `dests` hash map); everything else (ARP, ICMP, TCP, UDP to other
//! addresses or ports, IPv4 fragments, IPv6 with extension headers, truncated frames) is
//! passed to the kernel untouched. If the queue has no socket, `bpf_redirect_map` falls
//! back to `XDP_PASS`. Each decision is counted in the `stats` map (index
//! [`STAT_PASSED`] or [`STAT_STEERED`]).
//!
//! ```text
//!  eth (14) ─┬─ 0x0800 IPv4: proto 17, no fragment, IHL ≥ 5 → key ::ffff:dst ip, dst port
//!            ├─ 0x86DD IPv6: next header 17 (no extension headers) → key dst ip, dst port
//!            └─ anything else → pass
//!  dests[key] present → redirect to xsks[rx_queue_index] (else pass)
//! ```
//!
//! The key ([`dest_key`], 20 bytes on the stack at r10 - 24) is the destination address
//! as 16 bytes (IPv4 mapped into IPv6), the port as on the wire, two zero bytes; its
//! value says whether it is a VIP or an internal address.
//!
//! With the in-kernel fast path ([`crate::fast_path`]), a matched frame goes through the
//! fast-path block first, which sends an established flow's datagrams itself and hands
//! everything else to the redirect above, untouched.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::fast_path::{FastMaps, FastPathMaps};
use crate::program::{DEST_KEY_LEN, STAT_PASSED, STAT_STEERED, dest_key};
use crate::steering::{Steering, destinations};
use ufrag_bpf::asm::{Asm, B, DW, H, Insn, JEQ, JGT, JLT, JNE, W, action, helper};
use ufrag_bpf::sys::{self as bpf, Map};

/// [`Steering::load_with`] with the assembled program and maps created without BTF.
pub fn load(
    vips: &[SocketAddr],
    internals: &[SocketAddr],
    queues: u32,
    fast_path_flows: Option<usize>,
) -> io::Result<Steering> {
    let dests = destinations(vips, internals)?;
    let entries = u32::try_from(dests.len().max(1)).unwrap_or(u32::MAX);
    let dest_map = Map::create(
        bpf::MAP_HASH,
        DEST_KEY_LEN as u32,
        1,
        entries,
        "relay_dests",
    )?;
    let xsks = Map::create(bpf::MAP_XSKMAP, 4, 4, queues.max(1), "relay_xsks")?;
    let stats = Map::create(bpf::MAP_ARRAY, 4, 8, 2, "relay_stats")?;
    let fast = fast_path_flows.map(FastPathMaps::create).transpose()?;
    let insns = steering(
        dest_map.raw_fd(),
        xsks.raw_fd(),
        stats.raw_fd(),
        fast.as_ref().map(FastPathMaps::fds),
    );
    let prog = bpf::prog_load_xdp(&insns, "relay_steer")?;
    for (dest, kind) in &dests {
        dest_map.update(&dest_key(*dest), &[*kind])?;
    }
    Ok(Steering {
        prog,
        dests: dest_map,
        xsks,
        stats,
        fast_path: fast.map(Arc::new),
    })
}

/// Where the key is built on the stack (20 bytes, 8-byte aligned).
const KEY_AT: i16 = -24;

/// Builds the steering program for the given map file descriptors, with the fast-path
/// block when `fast` names its maps.
pub fn steering(dests_fd: i32, xsks_fd: i32, stats_fd: i32, fast: Option<FastMaps>) -> Vec<Insn> {
    // Registers: r1 ctx / args, r2 data, r3 data_end, r4 cursor, r5 scratch, r6 ctx (saved),
    // r7 scratch, r10 frame pointer.
    let mut a = Asm::default();
    a.mov_reg(6, 1);
    a.load(W, 2, 1, 0); // data
    a.load(W, 3, 1, 4); // data_end
    a.mov_reg(4, 2);
    a.add_imm(4, 14);
    a.jump(JGT, 4, Ok(3), "pass");
    a.load(H, 5, 2, 12); // ethertype, as loaded (little endian)
    a.jump(JEQ, 5, Err(0x0008), "ipv4");
    a.jump(JEQ, 5, Err(0xDD86), "ipv6");
    a.goto("pass");

    a.label("ipv4");
    a.mov_reg(4, 2);
    a.add_imm(4, 34);
    a.jump(JGT, 4, Ok(3), "pass");
    a.load(B, 5, 2, 23); // protocol
    a.jump(JNE, 5, Err(17), "pass");
    a.load(H, 5, 2, 20); // flags + fragment offset
    a.and_imm(5, 0xff3f); // MF or any offset: a fragment, leave it to the kernel
    a.jump(JNE, 5, Err(0), "pass");
    a.load(B, 5, 2, 14); // version | IHL
    a.and_imm(5, 0x0f);
    a.lsh_imm(5, 2);
    a.jump(JLT, 5, Err(20), "pass");
    a.mov_reg(4, 2);
    a.add_imm(4, 14);
    a.add_reg(4, 5); // UDP header
    a.mov_reg(7, 4);
    a.add_imm(7, 8);
    a.jump(JGT, 7, Ok(3), "pass");
    // Key: ::ffff:<destination address>, then the destination port, then zeros.
    a.store_imm(DW, 10, KEY_AT, 0);
    a.store_imm(W, 10, KEY_AT + 8, 0xffff_0000_u32 as i32); // bytes 00 00 ff ff
    a.load(W, 5, 2, 30); // destination address, bytes as on the wire
    a.store_reg(W, 10, KEY_AT + 12, 5);
    a.load(H, 5, 4, 2); // destination port, as on the wire
    a.goto("port");

    a.label("ipv6");
    a.mov_reg(4, 2);
    a.add_imm(4, 62);
    a.jump(JGT, 4, Ok(3), "pass");
    a.load(B, 5, 2, 20); // next header
    a.jump(JNE, 5, Err(17), "pass");
    for word in 0..4 {
        a.load(W, 5, 2, 38 + 4 * word); // destination address
        a.store_reg(W, 10, KEY_AT + 4 * word, 5);
    }
    a.load(H, 5, 2, 56); // destination port

    a.label("port");
    a.store_reg(H, 10, KEY_AT + 16, 5);
    a.store_imm(H, 10, KEY_AT + 18, 0);
    a.mov_reg(2, 10);
    a.add_imm(2, i32::from(KEY_AT));
    a.map_fd(1, dests_fd);
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jump(JEQ, 0, Err(0), "pass");
    if let Some(maps) = fast {
        crate::fast_path::emit(&mut a, maps, "steer");
    }
    a.label("steer");
    a.count(stats_fd, STAT_STEERED, "redirect");
    a.load(W, 2, 6, 16); // rx_queue_index
    a.map_fd(1, xsks_fd);
    a.mov_imm(3, action::PASS as i32); // no socket on this queue: to the kernel
    a.call(helper::REDIRECT_MAP);
    a.exit();

    a.label("pass");
    a.count(stats_fd, STAT_PASSED, "pass_exit");
    a.ret(action::PASS);
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels_and_the_program_ends_in_exit() {
        let p = steering(3, 4, 5, None);
        assert!(p.len() < 100, "{} instructions", p.len());
        assert_eq!(ufrag_bpf::asm::check_jumps(&p), Ok(()));
        // The map loads carry the three fds as pseudo map fds.
        let fds: Vec<i32> = p
            .iter()
            .filter(|i| i.is_map_fd_load())
            .map(|i| i.imm)
            .collect();
        assert_eq!(fds, vec![3, 5, 4, 5]);
    }
}
