//! The project's BPF toolkit, shared by relay-afxdp (its steering and fast-path
//! programs) and perf (the live-frame traffic generator, the counting sink and the
//! in-kernel reference relay), whose programs are C: [`build`] compiles them with clang
//! and BTF in a build script, [`object`] loads them (aya) and hands over plain
//! descriptors, [`sys`] is a thin layer on the raw `bpf(2)` syscall whose maps know their
//! key and value sizes, so no safe call lets the kernel read or write past a buffer, and
//! [`btf`] reads a struct's layout back from an object for the tests that hold the Rust
//! side to it. Unsafe code lives only in `sys`.
#![deny(unsafe_code)]

pub mod btf;
pub mod build;
pub mod object;
pub mod sys;
