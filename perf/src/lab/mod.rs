//! Lab mode: `perf compare` on a lab's own hosts instead of the netns testbed. The
//! compare runs on the relay host (the device under test) and starts the setups there
//! on the NIC the user names; a small agent (`ufrag-perf agent`) on the tools host runs
//! the generator and the sink and answers over one TCP connection ([`protocol`]). The
//! relay host's CPUs are what the compare counts.

pub mod agent;
pub mod client;
pub mod nic;
pub mod protocol;
