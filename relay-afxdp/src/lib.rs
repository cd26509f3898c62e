//! relay-afxdp: the AF_XDP poll-mode relay backend (issue 5), in progress.
//!
//! What exists so far: our own XDP steering program ([`program`]), assembled from BPF
//! instructions in Rust; a thin loader on the raw `bpf(2)` syscall ([`bpf`]): maps,
//! program load with the verifier's log on failure, `BPF_PROG_TEST_RUN`, and attachment
//! through a BPF link (which the kernel removes when the process dies, even on SIGKILL);
//! [`steering`] ties them together. An AF_XDP socket with its own UMEM ([`xsk`], on the
//! pure ring arithmetic of [`ring`]) and UDP frame rewriting with full checksums
//! ([`packet`]) work on veth in skb and native mode (the `xsk_echo` example and its test).
//! The relay forwarding loop (neighbour resolution, frame header in the headroom, the
//! shared `Forwarder`) and the `relay-afxdp` binary are not written yet: nothing here
//! forwards relay traffic.
#![deny(unsafe_code)]

pub mod bpf;
pub mod neighbours;
pub mod packet;
pub mod program;
pub mod ring;
pub mod steering;
pub mod worker;
pub mod xsk;
