//! Lab mode's tools host and its control channel: `perf compare --lab` runs on the relay
//! host (the device under test; its side is `crate::compare::lab`) and starts the setups
//! there on the NIC the user names; the agent here ([`agent`], `ufrag-perf agent`) runs on
//! the tools host, makes the flows and runs the generator and the sink, and answers over
//! one TCP connection ([`protocol`]).

pub mod agent;
pub mod protocol;
