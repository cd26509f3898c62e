//! The XDP steering program, assembled in Rust.
//!
//! It sends to the AF_XDP socket of the receiving queue only IPv4 and IPv6 UDP datagrams
//! whose destination port is one of the relay's (VIP ports and internal ports, set in the
//! `ports` map); everything else (ARP, ICMP, TCP, other UDP, IPv4 fragments, IPv6 with
//! extension headers, truncated frames) is passed to the kernel untouched. If the queue
//! has no socket, `bpf_redirect_map` falls back to `XDP_PASS`. Each decision is counted in
//! the `stats` map (index [`STAT_PASSED`] or [`STAT_STEERED`]).
//!
//! ```text
//!  eth (14) ─┬─ 0x0800 IPv4: proto 17, no fragment, IHL ≥ 5 → UDP dst port
//!            ├─ 0x86DD IPv6: next header 17 (no extension headers) → UDP dst port
//!            └─ anything else → pass
//!  ports[dst port as loaded] != 0 → redirect to xsks[rx_queue_index] (else pass)
//! ```

pub use ufrag_bpf::asm::action;
use ufrag_bpf::asm::{Asm, B, H, Insn, JEQ, JGT, JLT, JNE, W, helper};

/// `stats` index counting frames passed to the kernel.
pub const STAT_PASSED: u32 = 0;
/// `stats` index counting frames steered to AF_XDP.
pub const STAT_STEERED: u32 = 1;

/// Builds the steering program for the given map file descriptors.
pub fn steering(ports_fd: i32, xsks_fd: i32, stats_fd: i32) -> Vec<Insn> {
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
    a.load(H, 5, 4, 2); // destination port
    a.goto("port");

    a.label("ipv6");
    a.mov_reg(4, 2);
    a.add_imm(4, 62);
    a.jump(JGT, 4, Ok(3), "pass");
    a.load(B, 5, 2, 20); // next header
    a.jump(JNE, 5, Err(17), "pass");
    a.load(H, 5, 2, 56); // destination port

    a.label("port");
    a.store_reg(W, 10, -4, 5);
    a.mov_reg(2, 10);
    a.add_imm(2, -4);
    a.map_fd(1, ports_fd);
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jump(JEQ, 0, Err(0), "pass");
    a.load(B, 5, 0, 0);
    a.jump(JEQ, 5, Err(0), "pass");
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

/// The key of `port` in the `ports` map: the two bytes as the program loads them.
pub fn port_key(port: u16) -> u32 {
    u32::from(u16::from_le_bytes(port.to_be_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels_and_the_program_ends_in_exit() {
        let p = steering(3, 4, 5);
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

    #[test]
    fn port_keys_match_network_byte_order_loads() {
        // Port 3478 = 0x0D96 on the wire as [0x0D, 0x96]; a little-endian u16 load reads 0x960D.
        assert_eq!(port_key(3478), 0x960D);
        assert_eq!(port_key(0x0100), 0x0001);
    }
}
