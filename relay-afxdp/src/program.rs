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

/// One BPF instruction (`struct bpf_insn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// dst_reg (low nibble) | src_reg (high nibble).
    pub regs: u8,
    /// Signed offset.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// The 8-byte kernel encoding.
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

/// XDP verdicts.
pub mod action {
    /// Drop.
    pub const DROP: u32 = 1;
    /// To the kernel's stack.
    pub const PASS: u32 = 2;
    /// Redirected (to an AF_XDP socket).
    pub const REDIRECT: u32 = 4;
}

/// `stats` index counting frames passed to the kernel.
pub const STAT_PASSED: u32 = 0;
/// `stats` index counting frames steered to AF_XDP.
pub const STAT_STEERED: u32 = 1;

// Opcode parts (include/uapi/linux/bpf_common.h, bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const W: u8 = 0x00;
const H: u8 = 0x08;
const B: u8 = 0x10;
const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const ATOMIC: u8 = 0xc0;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const MOV: u8 = 0xb0;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JGT: u8 = 0x20;
const JNE: u8 = 0x50;
const JLT: u8 = 0xa0;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
const PSEUDO_MAP_FD: u8 = 1;
const FN_MAP_LOOKUP_ELEM: i32 = 1;
const FN_REDIRECT_MAP: i32 = 51;

/// A tiny assembler with labels, so jump offsets are computed, not hand-counted.
#[derive(Debug, Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: Vec<(&'static str, usize)>,
    fixups: Vec<(usize, &'static str)>,
}

impl Asm {
    fn raw(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(Insn {
            code,
            regs: (src << 4) | dst,
            off,
            imm,
        });
    }
    fn mov_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | MOV | K, dst, 0, 0, imm);
    }
    fn mov_reg(&mut self, dst: u8, src: u8) {
        self.raw(ALU64 | MOV | X, dst, src, 0, 0);
    }
    fn add_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | ADD | K, dst, 0, 0, imm);
    }
    fn add_reg(&mut self, dst: u8, src: u8) {
        self.raw(ALU64 | ADD | X, dst, src, 0, 0);
    }
    fn and_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | AND | K, dst, 0, 0, imm);
    }
    fn lsh_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | LSH | K, dst, 0, 0, imm);
    }
    fn load(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.raw(LDX | MEM | size, dst, src, off, 0);
    }
    fn store_reg(&mut self, size: u8, dst: u8, off: i16, src: u8) {
        self.raw(STX | MEM | size, dst, src, off, 0);
    }
    fn store_imm(&mut self, size: u8, dst: u8, off: i16, imm: i32) {
        self.raw(ST | MEM | size, dst, 0, off, imm);
    }
    /// `lock *(u64 *)(dst + off) += src`
    fn atomic_add64(&mut self, dst: u8, off: i16, src: u8) {
        self.raw(STX | ATOMIC | DW, dst, src, off, 0);
    }
    fn map_fd(&mut self, dst: u8, fd: i32) {
        self.raw(LD | IMM | DW, dst, PSEUDO_MAP_FD, 0, fd);
        self.raw(0, 0, 0, 0, 0);
    }
    fn call(&mut self, helper: i32) {
        self.raw(JMP | CALL, 0, 0, 0, helper);
    }
    fn exit(&mut self) {
        self.raw(JMP | EXIT, 0, 0, 0, 0);
    }
    fn jump(&mut self, op: u8, dst: u8, src_or_imm: Result<u8, i32>, target: &'static str) {
        self.fixups.push((self.insns.len(), target));
        match src_or_imm {
            Ok(src) => self.raw(JMP | op | X, dst, src, 0, 0),
            Err(imm) => self.raw(JMP | op | K, dst, 0, 0, imm),
        }
    }
    fn goto(&mut self, target: &'static str) {
        self.fixups.push((self.insns.len(), target));
        self.raw(JMP | JA, 0, 0, 0, 0);
    }
    fn label(&mut self, name: &'static str) {
        self.labels.push((name, self.insns.len()));
    }
    /// `stats[index] += 1` (atomically), then continues at `done` (a new label).
    fn count(&mut self, stats_fd: i32, index: u32, done: &'static str) {
        self.store_imm(W, 10, -8, index as i32);
        self.mov_reg(2, 10);
        self.add_imm(2, -8);
        self.map_fd(1, stats_fd);
        self.call(FN_MAP_LOOKUP_ELEM);
        self.jump(JEQ, 0, Err(0), done);
        self.mov_imm(1, 1);
        self.atomic_add64(0, 0, 1);
        self.label(done);
    }

    fn finish(mut self) -> Vec<Insn> {
        for (at, target) in &self.fixups {
            let to = self
                .labels
                .iter()
                .find(|(n, _)| n == target)
                .map(|(_, i)| *i)
                .expect("every jump target is defined");
            let off = to as isize - (*at as isize + 1);
            self.insns[*at].off = i16::try_from(off).expect("the program is short");
        }
        self.insns
    }
}

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
    a.call(FN_MAP_LOOKUP_ELEM);
    a.jump(JEQ, 0, Err(0), "pass");
    a.load(B, 5, 0, 0);
    a.jump(JEQ, 5, Err(0), "pass");
    a.count(stats_fd, STAT_STEERED, "redirect");
    a.load(W, 2, 6, 16); // rx_queue_index
    a.map_fd(1, xsks_fd);
    a.mov_imm(3, action::PASS as i32); // no socket on this queue: to the kernel
    a.call(FN_REDIRECT_MAP);
    a.exit();

    a.label("pass");
    a.count(stats_fd, STAT_PASSED, "pass_exit");
    a.mov_imm(0, action::PASS as i32);
    a.exit();
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
        assert_eq!(p.last().unwrap().code, JMP | EXIT);
        // Every jump's target is inside the program.
        for (i, insn) in p.iter().enumerate() {
            let class = insn.code & 0x07;
            let op = insn.code & 0xf0;
            if class == JMP && op != CALL && op != EXIT {
                let to = i as isize + 1 + insn.off as isize;
                assert!(
                    (0..p.len() as isize).contains(&to),
                    "insn {i} jumps to {to}"
                );
            }
        }
        // The three map loads carry the three fds as pseudo map fds.
        let fds: Vec<i32> = p
            .iter()
            .filter(|i| i.code == LD | IMM | DW && i.regs >> 4 == PSEUDO_MAP_FD)
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

    #[test]
    fn encoding_is_the_kernel_layout() {
        let i = Insn {
            code: 0xb7,
            regs: 0x21,
            off: -2,
            imm: 0x01020304,
        };
        assert_eq!(i.encode(), [0xb7, 0x21, 0xfe, 0xff, 0x04, 0x03, 0x02, 0x01]);
    }
}
