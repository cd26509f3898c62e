//! A tiny BPF assembler with labels, so jump offsets are computed, not hand-counted.
//!
//! Only the instructions the project's programs use are here; each method names the C
//! it stands for. Registers are numbered as in the kernel: r0 return value, r1–r5
//! arguments (clobbered by calls), r6–r9 callee-saved, r10 the read-only frame pointer.

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

    /// True for a jump with an offset (not a call or an exit).
    pub fn is_jump(&self) -> bool {
        let op = self.code & 0xf0;
        self.code & 0x07 == JMP && op != CALL && op != EXIT
    }

    /// True for the first half of a map-fd load (`BPF_LD | BPF_IMM | BPF_DW` with
    /// `BPF_PSEUDO_MAP_FD`); its immediate is the fd.
    pub fn is_map_fd_load(&self) -> bool {
        self.code == LD | IMM | DW && self.regs >> 4 == PSEUDO_MAP_FD
    }
}

/// Checks that every jump of `program` lands inside it and that it ends in an exit:
/// what the verifier would refuse first, checked without loading (no root needed).
pub fn check_jumps(program: &[Insn]) -> Result<(), String> {
    if program.last().map(|i| i.code) != Some(JMP | EXIT) {
        return Err("the program does not end in exit".into());
    }
    for (i, insn) in program.iter().enumerate() {
        if insn.is_jump() {
            let to = i as isize + 1 + insn.off as isize;
            if !(0..program.len() as isize).contains(&to) {
                return Err(format!("insn {i} jumps to {to}"));
            }
        }
    }
    Ok(())
}

/// XDP verdicts.
pub mod action {
    /// Something went wrong (counted by the kernel's xdp_exception tracepoint).
    pub const ABORTED: u32 = 0;
    /// Drop.
    pub const DROP: u32 = 1;
    /// To the kernel's stack.
    pub const PASS: u32 = 2;
    /// Out of the interface it arrived on.
    pub const TX: u32 = 3;
    /// Redirected (to an AF_XDP socket or another interface).
    pub const REDIRECT: u32 = 4;
}

/// Helper function ids (`enum bpf_func_id`).
pub mod helper {
    /// `bpf_map_lookup_elem(map, key)`.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, the clock of `std::time::Instant`.
    pub const KTIME_GET_NS: i32 = 5;
    /// `bpf_xdp_adjust_head(ctx, delta)`: moves the frame's start by `delta` bytes
    /// (negative: room for new headers); 0 on success. Packet pointers must be reloaded.
    pub const XDP_ADJUST_HEAD: i32 = 44;
    /// `bpf_redirect_map(map, key, flags)`.
    pub const REDIRECT_MAP: i32 = 51;
}

// Opcode parts (include/uapi/linux/bpf_common.h, bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU32: u8 = 0x04;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
/// 4-byte access.
pub const W: u8 = 0x00;
/// 2-byte access.
pub const H: u8 = 0x08;
/// 1-byte access.
pub const B: u8 = 0x10;
/// 8-byte access.
pub const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const ATOMIC: u8 = 0xc0;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const SUB: u8 = 0x10;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const RSH: u8 = 0x70;
const DIV: u8 = 0x30;
const MOD: u8 = 0x90;
const XOR: u8 = 0xa0;
const MOV: u8 = 0xb0;
const END: u8 = 0xd0;
const TO_BE: u8 = 0x08;
const JA: u8 = 0x00;
/// `==`
pub const JEQ: u8 = 0x10;
/// `>` (unsigned)
pub const JGT: u8 = 0x20;
/// `>=` (unsigned)
pub const JGE: u8 = 0x30;
/// `!=`
pub const JNE: u8 = 0x50;
/// `<` (unsigned)
pub const JLT: u8 = 0xa0;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
const PSEUDO_MAP_FD: u8 = 1;

/// The program being assembled.
#[derive(Debug, Default)]
pub struct Asm {
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
    /// `dst = imm`
    pub fn mov_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | MOV | K, dst, 0, 0, imm);
    }
    /// `dst = imm` (64 bits, two instruction slots)
    pub fn mov_imm64(&mut self, dst: u8, imm: u64) {
        self.raw(LD | IMM | DW, dst, 0, 0, imm as u32 as i32);
        self.raw(0, 0, 0, 0, (imm >> 32) as u32 as i32);
    }
    /// `dst = src`
    pub fn mov_reg(&mut self, dst: u8, src: u8) {
        self.raw(ALU64 | MOV | X, dst, src, 0, 0);
    }
    /// `dst += imm`
    pub fn add_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | ADD | K, dst, 0, 0, imm);
    }
    /// `dst += src`
    pub fn add_reg(&mut self, dst: u8, src: u8) {
        self.raw(ALU64 | ADD | X, dst, src, 0, 0);
    }
    /// `dst -= src`
    pub fn sub_reg(&mut self, dst: u8, src: u8) {
        self.raw(ALU64 | SUB | X, dst, src, 0, 0);
    }
    /// `dst &= imm`
    pub fn and_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | AND | K, dst, 0, 0, imm);
    }
    /// `dst <<= imm`
    pub fn lsh_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | LSH | K, dst, 0, 0, imm);
    }
    /// `dst >>= imm` (logical)
    pub fn rsh_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | RSH | K, dst, 0, 0, imm);
    }
    /// `dst ^= imm`
    pub fn xor_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | XOR | K, dst, 0, 0, imm);
    }
    /// `dst /= imm` (unsigned; `imm` must not be 0)
    pub fn div_imm(&mut self, dst: u8, imm: i32) {
        assert_ne!(imm, 0, "BPF refuses a division by zero");
        self.raw(ALU64 | DIV | K, dst, 0, 0, imm);
    }
    /// `dst %= imm` (unsigned; `imm` must not be 0)
    pub fn mod_imm(&mut self, dst: u8, imm: i32) {
        assert_ne!(imm, 0, "BPF refuses a modulo by zero");
        self.raw(ALU64 | MOD | K, dst, 0, 0, imm);
    }
    /// `dst = htobe{bits}(dst)` (bits: 16, 32 or 64; the upper bits are cleared)
    pub fn to_be(&mut self, dst: u8, bits: i32) {
        assert!(
            matches!(bits, 16 | 32 | 64),
            "byte swaps are 16, 32 or 64 bits"
        );
        self.raw(ALU32 | END | TO_BE, dst, 0, 0, bits);
    }
    /// `dst = *(size *)(src + off)`
    pub fn load(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.raw(LDX | MEM | size, dst, src, off, 0);
    }
    /// `*(size *)(dst + off) = src`
    pub fn store_reg(&mut self, size: u8, dst: u8, off: i16, src: u8) {
        self.raw(STX | MEM | size, dst, src, off, 0);
    }
    /// `*(size *)(dst + off) = imm`
    pub fn store_imm(&mut self, size: u8, dst: u8, off: i16, imm: i32) {
        self.raw(ST | MEM | size, dst, 0, off, imm);
    }
    /// `lock *(u64 *)(dst + off) += src`
    pub fn atomic_add64(&mut self, dst: u8, off: i16, src: u8) {
        self.raw(STX | ATOMIC | DW, dst, src, off, 0);
    }
    /// `dst = map` (the map's fd, resolved by the kernel at load time)
    pub fn map_fd(&mut self, dst: u8, fd: i32) {
        self.raw(LD | IMM | DW, dst, PSEUDO_MAP_FD, 0, fd);
        self.raw(0, 0, 0, 0, 0);
    }
    /// `r0 = helper(r1, …, r5)`
    pub fn call(&mut self, helper: i32) {
        self.raw(JMP | CALL, 0, 0, 0, helper);
    }
    /// `return r0`
    pub fn exit(&mut self) {
        self.raw(JMP | EXIT, 0, 0, 0, 0);
    }
    /// `return verdict` (an [`action`])
    pub fn ret(&mut self, verdict: u32) {
        self.mov_imm(0, verdict as i32);
        self.exit();
    }
    /// `if (dst op src_or_imm) goto target` (`op`: [`JEQ`], [`JGT`], [`JGE`], [`JNE`], [`JLT`])
    pub fn jump(&mut self, op: u8, dst: u8, src_or_imm: Result<u8, i32>, target: &'static str) {
        self.fixups.push((self.insns.len(), target));
        match src_or_imm {
            Ok(src) => self.raw(JMP | op | X, dst, src, 0, 0),
            Err(imm) => self.raw(JMP | op | K, dst, 0, 0, imm),
        }
    }
    /// `goto target`
    pub fn goto(&mut self, target: &'static str) {
        self.fixups.push((self.insns.len(), target));
        self.raw(JMP | JA, 0, 0, 0, 0);
    }
    /// Places `name` at the next instruction.
    pub fn label(&mut self, name: &'static str) {
        self.labels.push((name, self.insns.len()));
    }
    /// `r0 = &map[index]` through `bpf_map_lookup_elem` (clobbers r1–r5 and the stack
    /// word at r10 − 8); `if (!r0) goto missing`.
    pub fn lookup_array(&mut self, map_fd: i32, index: u32, missing: &'static str) {
        self.store_imm(W, 10, -8, index as i32);
        self.mov_reg(2, 10);
        self.add_imm(2, -8);
        self.map_fd(1, map_fd);
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(JEQ, 0, Err(0), missing);
    }
    /// `map[index] += 1` (atomically), then continues at `done` (a new label).
    pub fn count(&mut self, map_fd: i32, index: u32, done: &'static str) {
        self.lookup_array(map_fd, index, done);
        self.mov_imm(1, 1);
        self.atomic_add64(0, 0, 1);
        self.label(done);
    }

    /// Folds the 64-bit ones' complement sum in `sum` to 16 bits (`folds` times: enough
    /// for what it can hold) and complements it: an Internet checksum (RFC 1071).
    /// Clobbers `scratch`.
    pub fn fold_checksum(&mut self, sum: u8, scratch: u8, folds: usize) {
        for _ in 0..folds {
            self.mov_reg(scratch, sum);
            self.rsh_imm(scratch, 16);
            self.and_imm(sum, 0xffff);
            self.add_reg(sum, scratch);
        }
        self.xor_imm(sum, 0xffff);
    }

    /// Resolves the labels; panics on a jump to an undefined label (a bug in the program
    /// text, not an input error).
    pub fn finish(mut self) -> Vec<Insn> {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn labels_resolve_forwards_and_backwards() {
        let mut a = Asm::default();
        a.label("top");
        a.jump(JEQ, 1, Err(0), "end");
        a.mov_imm64(2, 0x1122_3344_5566_7788);
        a.goto("top");
        a.label("end");
        a.exit();
        let p = a.finish();
        assert_eq!(p[0].off, 3, "skips the two-slot load and the goto");
        assert_eq!(p[3].off, -4, "back to the first instruction");
        assert_eq!(p[1].imm as u32, 0x5566_7788);
        assert_eq!(p[2].imm as u32, 0x1122_3344);
        assert!(p[0].is_jump() && p[3].is_jump() && !p[4].is_jump());
        assert_eq!(check_jumps(&p), Ok(()));
        let mut out_of_range = p.clone();
        out_of_range[0].off = 40;
        assert!(check_jumps(&out_of_range).is_err());
        assert!(check_jumps(&p[..4]).is_err(), "no exit at the end");
    }

    #[test]
    #[should_panic(expected = "every jump target is defined")]
    fn a_jump_to_nowhere_is_a_bug() {
        let mut a = Asm::default();
        a.goto("nowhere");
        a.finish();
    }
}
