//! The steering program with its maps, loaded and ready to attach: `relay_dests` (which
//! UDP destination addresses and ports belong to the relay), `relay_xsks` (one AF_XDP
//! socket per queue) and `relay_stats` (decision counters), and with the in-kernel fast
//! path its maps too.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::fast_path::{FastPathMaps, KIND_INTERNAL, KIND_VIP};
use crate::program::{self, STAT_PASSED, STAT_STEERED};
use ufrag_bpf::sys::{self as bpf, Map};

/// How to attach the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttachMode {
    /// Generic XDP (any driver, after the skb is built).
    Skb,
    /// Native XDP (in the driver).
    Native,
}

/// Decision counters read from the `relay_stats` map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SteeringStats {
    /// Frames left to the kernel.
    pub passed: u64,
    /// Frames sent to AF_XDP.
    pub steered: u64,
}

/// A loaded steering program.
#[derive(Debug)]
pub struct Steering {
    pub(crate) prog: OwnedFd,
    pub(crate) dests: Map,
    pub(crate) xsks: Map,
    pub(crate) stats: Map,
    pub(crate) fast_path: Option<Arc<FastPathMaps>>,
}

impl Steering {
    /// Creates the maps, loads the program and marks `dests` (specific addresses: the
    /// program matches what a datagram was sent to) as the relay's.
    pub fn load(dests: &[SocketAddr], queues: u32) -> io::Result<Self> {
        Self::load_with(dests, &[], queues, None)
    }

    /// [`Steering::load`] with the VIPs and internal addresses told apart, and the
    /// in-kernel fast path when `fast_path_flows` gives how many flows it must hold.
    pub fn load_with(
        vips: &[SocketAddr],
        internals: &[SocketAddr],
        queues: u32,
        fast_path_flows: Option<usize>,
    ) -> io::Result<Self> {
        let dests = destinations(vips, internals)?;
        let entries = u32::try_from(dests.len()).unwrap_or(u32::MAX);
        let loaded = program::load(
            entries,
            queues,
            fast_path_flows.map(FastPathMaps::entries_for),
        )?;
        for (dest, kind) in &dests {
            loaded.dests.update(&program::dest_key(*dest), &[*kind])?;
        }
        Ok(Steering {
            prog: loaded.prog,
            dests: loaded.dests,
            xsks: loaded.xsks,
            stats: loaded.stats,
            fast_path: loaded
                .fast
                .map(|maps| Arc::new(FastPathMaps::from_maps(maps))),
        })
    }

    /// The fast path's maps, when the program was loaded with it.
    pub fn fast_path(&self) -> Option<&Arc<FastPathMaps>> {
        self.fast_path.as_ref()
    }

    /// The program's verdict on one frame (`BPF_PROG_TEST_RUN`): no interface needed.
    pub fn decide(&self, frame: &[u8]) -> io::Result<u32> {
        bpf::prog_test_run(&self.prog, frame)
    }

    /// The program's verdict on one frame and the frame as it left the program (a
    /// rewritten one for `XDP_TX`).
    pub fn run(&self, frame: &[u8]) -> io::Result<(u32, Vec<u8>)> {
        bpf::prog_test_run_output(&self.prog, frame)
    }

    /// The decision counters.
    pub fn stats(&self) -> io::Result<SteeringStats> {
        let read = |index: u32| -> io::Result<u64> { Ok(self.stats.counters(index)?.iter().sum()) };
        Ok(SteeringStats {
            passed: read(STAT_PASSED)?,
            steered: read(STAT_STEERED)?,
        })
    }

    /// Attaches to `ifindex` through a BPF link. An interface that already has an XDP
    /// program (a stale one from an older run, say) refuses with EBUSY, reported as such
    /// rather than replaced.
    pub fn attach(&self, ifindex: u32, mode: AttachMode) -> io::Result<OwnedFd> {
        let flags = match mode {
            AttachMode::Skb => bpf::XDP_FLAGS_SKB_MODE,
            AttachMode::Native => bpf::XDP_FLAGS_DRV_MODE,
        };
        bpf::link_create_xdp(&self.prog, ifindex, flags).map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                io::Error::new(
                    e.kind(),
                    format!("interface {ifindex} already has an XDP program (a stale attachment?); not replacing it: {e}"),
                )
            } else {
                e
            }
        })
    }

    /// Steers queue `queue`'s relay traffic to the AF_XDP socket `fd`.
    pub fn register_socket(&self, queue: u32, fd: std::os::fd::RawFd) -> io::Result<()> {
        self.xsks
            .update(&queue.to_ne_bytes(), &(fd as u32).to_ne_bytes())
    }

    /// The XSKMAP, for AF_XDP sockets to be registered in.
    pub fn xsks(&self) -> &OwnedFd {
        self.xsks.fd()
    }

    /// The destinations map.
    pub fn dests(&self) -> &OwnedFd {
        self.dests.fd()
    }
}

/// Each destination with its kind; refuses a wildcard, which the program cannot match.
pub(crate) fn destinations(
    vips: &[SocketAddr],
    internals: &[SocketAddr],
) -> io::Result<Vec<(SocketAddr, u8)>> {
    let kinds = vips
        .iter()
        .map(|a| (*a, KIND_VIP))
        .chain(internals.iter().map(|a| (*a, KIND_INTERNAL)));
    let dests: Vec<(SocketAddr, u8)> = kinds.collect();
    if let Some((wildcard, _)) = dests.iter().find(|(d, _)| d.ip().is_unspecified()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{wildcard}: the XDP program steers specific addresses, not a wildcard"),
        ));
    }
    Ok(dests)
}
