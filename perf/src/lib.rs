//! The benchmark suite: is kernel bypass warranted for this relay? `perf compare` puts every
//! setup (relay-mio, relay-afxdp, the fast path, and what a user would pick instead) side by
//! side on one host and writes a verdict; the other subcommands measure sessions,
//! resilience, a deployment's load and the CI's instruction counts.
//!
//! - [`mod@bench`]: the measuring primitives: paced load and a measuring sink, the NDR/PDR
//!   search, CPU accounting, the host gate, the statistics, profiles and the report's rows.
//! - [`forwarders`]: what is measured beside the relays: the bare forwarder, the
//!   alternatives a user would pick, and the XDP programs (reference relay, load tools).
//! - [`cmd`]: one module per subcommand, each with its options and its `run`.
//!
//! Everything runs on loopback addresses chosen per run (127.x.y.z) or inside network
//! namespaces the run creates (`ufrag_testbed::topology`), bounded in packets and time.

#![deny(unsafe_code)]

pub mod bench;
pub mod cmd;
pub mod forwarders;
