//! The benchmark suite: a paced UDP load generator and a sink that measures loss and
//! one-way latency, a bare `recvmmsg`/`sendmmsg` forwarder (the reference that does no
//! routing work), the search for the maximum loss-free rate, and the report.
//!
//! Everything runs on loopback addresses chosen per run (127.x.y.z) or inside network
//! namespaces the run creates (`testkit::testbed`), bounded in packets and time.

#![deny(unsafe_code)]

pub mod alternatives;
pub mod bare;
pub mod environment;
pub mod gate;
pub mod load;
pub mod placement;
pub mod probe;
pub mod profile;
pub mod report;
pub mod resilience;
pub mod sessions;
pub mod wake;
pub mod xdp;
