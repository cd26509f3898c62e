//! The project's BPF toolkit, shared by relay-afxdp (its steering program) and perf (the
//! live-frame traffic generator and the counting sink): [`asm`], a tiny BPF assembler
//! with labels, and [`sys`], a thin loader on the raw `bpf(2)` syscall whose maps know
//! their key and value sizes, so no safe call lets the kernel read or write past a
//! buffer. Unsafe code lives only in `sys`.
#![deny(unsafe_code)]

pub mod asm;
pub mod btf;
pub mod build;
pub mod sys;
