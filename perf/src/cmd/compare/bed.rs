//! What `perf compare` runs on: the netns testbed ([`super::bench::Bench`]) or a lab's
//! relay host and tools host ([`super::lab::Lab`]). The phases ([`super::rounds`],
//! [`super::search_phase`]) see only this: the relay host the setups start on, and the
//! loads that drive a started setup.

use super::options::Options;
use super::relay_host::RelayHost;
use super::setups::Setup;
use crate::bench::load::Load;

/// A place to compare setups on.
pub trait Bed {
    /// The relay host the setups start on.
    fn relay(&self) -> &RelayHost;

    /// The fixed-load phase's load for `setup` (started): its flows made, then client
    /// sockets paced by sleeping, so the tools' cost is proportional to the rate and the
    /// same in every row (a lab on two machines, whose tools' cost is not counted, sends
    /// live frames instead where it can).
    fn fixed_load(&self, setup: &Setup, size: usize) -> Box<dyn Load>;

    /// The latency rounds' load for `setup` (started): its flows made, then client sockets
    /// paced as in [`Bed::fixed_load`], latency recorded by [`crate::bench::load::Load::latency_trial`]
    /// (on the testbed every datagram's; a lab's agent samples one in
    /// [`crate::bench::load::target::SAMPLE_EVERY`]).
    fn latency_load(&self, setup: &Setup, size: usize) -> Box<dyn Load>;

    /// The rate search's load for `setup` (started), by `options`' direction and
    /// generator, its flows made.
    fn search_load(&self, setup: &Setup, options: &Options) -> Box<dyn Load>;

    /// The processes whose trees are the experiment on this machine (the rest is outside
    /// it, [`crate::bench::outside`]): this one, and in a lab whose agent runs on this
    /// same machine (two namespaces), the agent too.
    fn experiment_roots(&self) -> Vec<u32> {
        vec![std::process::id()]
    }

    /// Places the relay interface's kernel work after a setup started (the testbed pins
    /// its NAPI threads to the forwarder's core; a lab's NIC is placed by the lab); what
    /// it did, if anything.
    fn place_after_start(&self) -> Option<String> {
        None
    }
}
