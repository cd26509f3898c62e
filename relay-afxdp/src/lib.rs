//! relay-afxdp: the AF_XDP poll-mode relay backend (issue 5), in progress.
//!
//! What exists so far: our own XDP steering program ([`program`]), assembled from BPF
//! instructions in Rust, and a thin loader on the raw `bpf(2)` syscall ([`bpf`]): maps,
//! program load with the verifier's log on failure, `BPF_PROG_TEST_RUN`, and attachment
//! through a BPF link (which the kernel removes when the process dies, even on SIGKILL).
//! [`steering`] ties them together. The AF_XDP sockets, the forwarding loop and the
//! binary are not written yet: nothing here pretends to forward packets.
#![deny(unsafe_code)]

pub mod bpf;
pub mod packet;
pub mod program;
pub mod ring;
pub mod steering;
