//! The benchmark suite: a paced UDP load generator and a sink that measures loss and
//! one-way latency, a bare `recvmmsg`/`sendmmsg` forwarder (the reference that does no
//! routing work), CPU accounting, the host gate, the NDR/PDR search, the statistics, and
//! `perf compare`, which puts them together into a verdict.
//!
//! Everything runs on loopback addresses chosen per run (127.x.y.z) or inside network
//! namespaces the run creates (`ufrag_testkit::testbed`), bounded in packets and time.

#![deny(unsafe_code)]

pub mod alternatives;
pub mod bare;
pub mod cmd;
pub mod compare;
pub mod cpu;
pub mod environment;
pub mod gate;
pub mod host_gate;
pub mod hostile;
pub mod interrupt;
pub mod lab;
pub mod legs;
pub mod load;
pub mod measure;
pub mod nic;
pub mod outside;
pub mod placement;
pub mod probe;
pub mod profile;
pub mod progress;
pub mod report;
pub mod resilience;
pub mod search;
pub mod sessions;
pub mod stats;
pub mod wake;
pub mod xdp;
