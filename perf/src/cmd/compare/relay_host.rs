//! The relay host (the device under test) as the setups see it: where they run, on which
//! interface and addresses, where they forward to, and on which CPUs. The netns testbed
//! and a lab's own hosts each describe theirs with one of these; the setups
//! ([`super::setups`]) start on it and know nothing else of either.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::forwarders::xdp::Iface;

/// How relay-afxdp binds its AF_XDP sockets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BindMode {
    /// The kernel copies each frame into the UMEM (every driver, veth included).
    #[default]
    Copy,
    /// The NIC writes into the UMEM (drivers with zero-copy support; a driver that
    /// cannot refuses, and the run leaves the setup out naming the refusal).
    Zerocopy,
}

/// The relay host.
#[derive(Debug)]
pub struct RelayHost {
    /// The interface the load arrives on and leaves by, in the relay host's namespace
    /// (the testbed's) or in this process's (a lab's).
    pub iface: Iface,
    /// Our relays' public address (its port the other relays' listen port too).
    pub vip: SocketAddr,
    /// Our relays' internal address.
    pub internal: SocketAddr,
    /// Our relays' metrics, on the relay host's loopback.
    pub metrics: SocketAddr,
    /// Where every setup forwards to: the sink on the transceiver's (or tools') host.
    pub sink_addr: SocketAddr,
    /// The sink's next hop's MAC (the in-kernel rewrite writes it into each frame).
    pub sink_mac: [u8; 6],
    /// The transceivers' network our relays allow.
    pub transceiver_net: String,
    /// Where perf's sibling binaries (the relays) are.
    pub exe_dir: PathBuf,
    /// The CPUs a setup's workers take, in order: the forwarder's core first.
    pub relay_cpus: Vec<usize>,
    /// Client flows made before the trials (nginx sizes its connection table by them).
    pub flows: u32,
    /// relay-afxdp's bind mode.
    pub bind_mode: BindMode,
    /// relay-afxdp's workers: one per RX queue of the interface.
    pub afxdp_workers: usize,
    /// The interface's interrupt and queue steering when the run began (a lab's relay
    /// host; `None` on the testbed, which steers its own): read again around each setup's
    /// trials, which are left out when it changed during them.
    pub steering: Option<crate::bench::steering::Steering>,
    /// The CPUs the cost counts (a lab's relay host: the relays' and where the
    /// interface's interrupts land, [`crate::bench::counted`]); `None`: every CPU (the
    /// testbed, whose one machine is the experiment).
    pub counted: Option<std::collections::BTreeSet<usize>>,
}

impl RelayHost {
    /// The forwarder's core: where one-worker setups run and what the profile records.
    pub fn forwarder_cpu(&self) -> usize {
        self.relay_cpus[0]
    }

    /// The CPU list for `workers` workers (comma-separated, as the relays' `--cpus`
    /// takes it); the last CPUs again when there are more workers than CPUs.
    pub fn worker_cpus(&self, workers: usize) -> String {
        let last = self.relay_cpus.len() - 1;
        (0..workers)
            .map(|w| self.relay_cpus[w.min(last)].to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Its namespace, for the helpers that take one.
    pub fn ns(&self) -> Option<&str> {
        self.iface.ns.as_deref()
    }
}
