//! relay-afxdp: the AF_XDP poll-mode relay backend, with the same flags, config,
//! metrics and forwarding decisions (`ufrag_common::forward`) as relay-mio.
//!
//! Our own XDP programs ([`program`]: steering, and the in-kernel fast path), written in C
//! (`bpf/relay.bpf.c`), compiled by clang with BTF at build time, loaded from that ELF
//! object and attached through a BPF link ([`steering`]); the user-space side of the fast
//! path, which writes its flow entries ([`fast_path`]); one AF_XDP socket per RX queue with its own UMEM ([`xsk`], on the
//! pure ring arithmetic of [`ring`]; or, to compare, on the `xdp` crate: [`xsk_crate`]); in-place UDP frame rewriting with full checksums
//! ([`packet`]); next hops from the kernel's neighbour and routing tables over rtnetlink
//! ([`netlink`], [`neighbours`]); the interface's queue count over ethtool netlink
//! ([`channels`]); and the per-queue forwarding loop ([`worker`]).
//! Unsafe code lives only in `xsk` and `xsk_crate` (and in `ufrag_bpf::sys`).
#![deny(unsafe_code)]

pub mod channels;
pub mod cli;
pub mod fast_path;
pub mod neighbours;
pub mod netlink;
pub mod packet;
pub mod program;
pub mod relay;
pub mod ring;
pub mod steering;
pub mod worker;
pub mod xsk;
pub mod xsk_crate;
