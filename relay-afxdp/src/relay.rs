//! Starting and stopping relay-afxdp: check the interface, load our XDP program, open
//! one AF_XDP socket per worker (worker *i* serves RX queue *i*), attach the program,
//! then hand the workers to the shared lifecycle ([`Running`]: route cache, HTTP
//! endpoints, pinned threads, drain, join). The program is detached when the relay is
//! joined (or the process dies: it is held by a BPF link).

use std::io;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ufrag_common::config::RelayConfig;
use ufrag_common::flow::FlowTable;
use ufrag_common::forward::Forwarder;
use ufrag_common::metrics::RelayMetrics;
use ufrag_common::returns::SharedReturns;
use ufrag_common::runtime::cache::{CacheClient, WakeFn};
use ufrag_common::runtime::lifecycle::{RelayWorker, Running};

use crate::channels::{QueuesSet, SetQueuesError};
use crate::fast_path::FastPathWriter;
use crate::neighbours::Neighbours;
use crate::steering::{AttachMode, Steering};
use crate::worker::{AfXdpWorker, WorkerParts};
use crate::xsk::{UmemSocket, XdpSocket, XskConfig};
use crate::xsk_crate::CrateSocket;

/// How the AF_XDP socket is bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BindMode {
    /// The kernel copies frames into the UMEM (every driver, veth included).
    Copy,
    /// The NIC writes into the UMEM (drivers with zero-copy support; the kernel's
    /// refusal is reported).
    Zerocopy,
}

/// Whether established flows are forwarded in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FastPath {
    /// Every datagram goes through AF_XDP to a worker.
    Off,
    /// Once a flow has proved itself (its first DTLS or media datagram), the XDP program
    /// forwards its datagrams both ways itself; STUN and unknown flows still go to the
    /// workers (see `fast_path`).
    Xdp,
}

/// Which AF_XDP layer the workers run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XskLayer {
    /// The project's own (`xsk`): every frame's holder is tracked, so a wrong or repeated
    /// address is refused.
    Own,
    /// The pure-Rust `xdp` crate, through an adapter (`xsk_crate`): kept to compare the
    /// two under the same worker.
    XdpCrate,
}

/// The options relay-afxdp adds to the relay's own.
#[derive(Clone, Debug, clap::Args)]
pub struct AfXdpOptions {
    /// The interface carrying the VIPs and the internal address; `auto`: the one that
    /// holds the internal address (on a node's own network, its NIC), so a DaemonSet
    /// names no interface. A VIP held on loopback (direct server return) arrives on
    /// another interface than it is held on: name that one.
    #[arg(long, value_name = "IFNAME|auto")]
    pub interface: String,
    /// Before attaching, give the interface one RX queue per worker (what `ethtool -L
    /// IFNAME combined N` does, over ethtool's netlink; needs CAP_NET_ADMIN, which
    /// attaching XDP needs too), so that a node needs no step of its own. Nothing is sent
    /// to the driver when the count is already right; some drivers reset the link when it
    /// is not. A driver that cannot have that many queues is refused at start.
    #[arg(long)]
    pub set_queues: bool,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value_t = AttachMode::Skb)]
    pub xdp_mode: AttachMode,
    /// AF_XDP bind mode (veth supports copy only).
    #[arg(long, value_enum, default_value_t = BindMode::Copy)]
    pub bind_mode: BindMode,
    /// UMEM frame size, 2048..=4096.
    #[arg(long, default_value_t = 2048)]
    pub frame_size: u32,
    /// Entries per ring: a power of two, 2048..=4096.
    #[arg(long, default_value_t = 2048)]
    pub ring_size: u32,
    /// Frames per receive batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Frames handed to the kernel to send and not yet sent, at most (1..=ring size):
    /// beyond it a frame is dropped (`tx_backlog_full`) rather than sent stale.
    #[arg(long, default_value_t = 256)]
    pub tx_backlog: u32,
    /// Forward established flows in the kernel (`xdp`) or not (`off`).
    #[arg(long, value_enum, default_value_t = FastPath::Off)]
    pub fast_path: FastPath,
    /// The AF_XDP layer under the workers: ours, or the `xdp` crate's (to compare).
    #[arg(long, value_enum, default_value_t = XskLayer::Own)]
    pub xsk_layer: XskLayer,
}

/// Why relay-afxdp could not start: a configuration error (exit code 2) or a failure of
/// the kernel or the system (exit code 1).
#[derive(Debug)]
pub enum StartError {
    /// The options do not fit this machine or each other.
    Config(String),
    /// The kernel refused something.
    System(io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "invalid configuration: {e}"),
            StartError::System(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for StartError {}

fn system(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> StartError {
    move |e| StartError::System(io::Error::new(e.kind(), format!("{what}: {e}")))
}

/// `--interface`'s name, or for `auto` the interface that holds `internal` (the local
/// table's route to it): refused when none does, or when it is loopback.
fn interface_name(given: &str, internal: std::net::IpAddr) -> Result<String, StartError> {
    if given != "auto" {
        return Ok(given.to_string());
    }
    let addresses = crate::netlink::RouteSocket::open()
        .and_then(|mut s| s.local_addresses())
        .map_err(system("reading this host's addresses"))?;
    let index = addresses
        .iter()
        .find(|a| a.ip == internal)
        .map(|a| a.ifindex)
        .ok_or_else(|| {
            StartError::Config(format!(
                "`interface` auto: no interface holds the internal address {internal}"
            ))
        })?;
    let name = interface_with_index(index).ok_or_else(|| {
        StartError::Config(format!("`interface` auto: no interface has index {index}"))
    })?;
    if name == "lo" {
        return Err(StartError::Config(format!(
            "`interface` auto: the internal address {internal} is on lo; name the interface \
             the relay's traffic arrives on"
        )));
    }
    Ok(name)
}

/// The name of the interface with index `index`, from sysfs.
fn interface_with_index(index: u32) -> Option<String> {
    std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let found = std::fs::read_to_string(entry.path().join("ifindex")).ok()?;
            (found.trim().parse::<u32>().ok()? == index)
                .then(|| entry.file_name().to_string_lossy().into_owned())
        })
}

/// What the interface offers, read from sysfs.
#[derive(Debug)]
struct Interface {
    index: u32,
    rx_queues: usize,
    mac: [u8; 6],
}

impl Interface {
    fn read(name: &str) -> Result<Self, StartError> {
        let sys = format!("/sys/class/net/{name}");
        let index = std::fs::read_to_string(format!("{sys}/ifindex"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| StartError::Config(format!("`interface`: no interface {name}")))?;
        let rx_queues = std::fs::read_dir(format!("{sys}/queues"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                    .count()
            })
            .unwrap_or(1)
            .max(1);
        let mac = std::fs::read_to_string(format!("{sys}/address"))
            .ok()
            .and_then(|s| ufrag_common::wire::parse_mac(s.trim()))
            .unwrap_or([0; 6]);
        Ok(Interface {
            index,
            rx_queues,
            mac,
        })
    }
}

/// Checks the options against each other and the interface.
fn validate(
    config: &RelayConfig,
    options: &AfXdpOptions,
    rx_queues: usize,
) -> Result<(), StartError> {
    if !config.tcp.vips.is_empty() {
        return Err(StartError::Config(
            "`tcp_vip`: relay-afxdp leaves TCP to the kernel and serves no ICE over TCP; run \
             relay-mio with --tcp-vip (and no --vip) beside it, its --internal-addr outside \
             this relay's worker ports (docs/architecture.md: ICE over TCP)"
                .into(),
        ));
    }
    if !config.bundles.to.is_empty() {
        return Err(StartError::Config(
            "`bundle_to`: relay-afxdp forwards each frame in place in its own UMEM frame and \
             sends no bundles; bundles are relay-mio's (docs/architecture.md: bundles)"
                .into(),
        ));
    }
    if config.bundles.gso {
        return Err(StartError::Config(
            "`internal_gso`: relay-afxdp writes each frame to the NIC itself, with no socket \
             to segment; GSO on the internal socket is relay-mio's"
                .into(),
        ));
    }
    if config.vips.is_empty() {
        return Err(StartError::Config(
            "`vip`: relay-afxdp needs a UDP VIP (--vip)".into(),
        ));
    }
    if config.workers() > rx_queues {
        return Err(StartError::Config(format!(
            "`workers`: {} workers but {} has {rx_queues} RX queue(s); one socket per queue",
            config.workers(),
            options.interface
        )));
    }
    // The NIC spreads flows over every queue; a queue with no worker would hand its share
    // of the relay's traffic to the kernel, where nothing listens on the VIP.
    if config.workers() < rx_queues {
        return Err(StartError::Config(format!(
            "`workers`: {w} workers but {i} has {rx_queues} RX queues, and the flows the NIC \
             puts on queues {w}..{last} would reach no worker; run one worker per queue \
             (--workers {rx_queues} with as many CPUs) or give {i} {w} queue(s) (--set-queues, \
             or ethtool -L {i} combined {w})",
            w = config.workers(),
            i = options.interface,
            last = rx_queues - 1,
        )));
    }
    if !options.ring_size.is_power_of_two() || !(2048..=4096).contains(&options.ring_size) {
        return Err(StartError::Config(
            "`ring_size` must be a power of two from 2048 to 4096".into(),
        ));
    }
    if !(2048..=4096).contains(&options.frame_size) {
        return Err(StartError::Config(
            "`frame_size` must be 2048..=4096".into(),
        ));
    }
    let internal = (0..config.workers()).map(|i| config.worker_internal_addr(i));
    if let Some(wildcard) = config
        .vips
        .iter()
        .copied()
        .chain(internal)
        .find(|a| a.ip().is_unspecified())
    {
        return Err(StartError::Config(format!(
            "`vip` and `internal_addr` must be specific addresses for relay-afxdp (its XDP \
             program steers what is sent to them), not {wildcard}"
        )));
    }
    if options.batch == 0 {
        return Err(StartError::Config("`batch` must be at least 1".into()));
    }
    if !(1..=options.ring_size).contains(&options.tx_backlog) {
        return Err(StartError::Config(format!(
            "`tx_backlog` must be from 1 to the ring size ({})",
            options.ring_size
        )));
    }
    Ok(())
}

impl<S: UmemSocket + 'static> RelayWorker for AfXdpWorker<S> {
    fn set_cache(&mut self, cache: CacheClient) {
        AfXdpWorker::set_cache(self, cache);
    }

    fn set_keys(&mut self, keys: ufrag_common::runtime::keys::KeyReader) {
        AfXdpWorker::set_keys(self, keys);
    }

    fn run(self, stop: &AtomicBool) -> io::Result<()> {
        let index = self.index();
        let polls = AfXdpWorker::run(self, stop);
        tracing::info!(
            worker = index,
            productive = polls.productive,
            empty = polls.empty,
            "worker stopped"
        );
        Ok(())
    }
}

/// relay-afxdp's entry point.
#[derive(Debug)]
pub struct Relay;

/// `--set-queues`: gives `ifname` one RX queue per worker (it has `has`), and logs what
/// it did.
fn set_queues(ifname: &str, workers: usize, has: usize) -> Result<(), StartError> {
    let queues = u32::try_from(workers).unwrap_or(u32::MAX);
    let has = u32::try_from(has).unwrap_or(u32::MAX);
    match crate::channels::set_rx_queues(ifname, queues, has) {
        Ok(QueuesSet::Unchanged) => {
            tracing::info!(
                interface = ifname,
                queues,
                "RX queues already one per worker"
            );
            Ok(())
        }
        Ok(QueuesSet::Changed { before }) => {
            tracing::info!(
                interface = ifname,
                queues,
                before = before.rx_queues(),
                "RX queues set to one per worker"
            );
            Ok(())
        }
        Err(SetQueuesError::Unfit(why)) => Err(StartError::Config(format!(
            "`set_queues`: {why}; run as many workers as it can have queues"
        ))),
        Err(SetQueuesError::Kernel(e)) => Err(system(format!(
            "`set_queues`: setting {ifname}'s RX queues to {queues} (needs CAP_NET_ADMIN; the \
             driver may refuse while RSS rules or the indirection table use the queues above)"
        ))(e)),
    }
}

impl Relay {
    /// Validates the options against the interface, loads the XDP program, opens and
    /// registers one AF_XDP socket per worker, attaches the program, and starts the
    /// workers, route cache and HTTP endpoints. The program stays attached until the
    /// workers have stopped ([`Running::join`]).
    pub fn start(config: &RelayConfig, options: &AfXdpOptions) -> Result<Running, StartError> {
        match options.xsk_layer {
            XskLayer::Own => Self::start_on(config, options, XdpSocket::open),
            XskLayer::XdpCrate => Self::start_on(config, options, CrateSocket::open),
        }
    }

    /// [`Relay::start`] with the workers' sockets opened by `open`.
    fn start_on<S: UmemSocket + 'static>(
        config: &RelayConfig,
        options: &AfXdpOptions,
        open: fn(u32, u32, XskConfig) -> io::Result<S>,
    ) -> Result<Running, StartError> {
        let options = &AfXdpOptions {
            interface: interface_name(&options.interface, config.worker_internal_addr(0).ip())?,
            ..options.clone()
        };
        let mut interface = Interface::read(&options.interface)?;
        if options.set_queues {
            // Everything else is checked first, as if the queues were right: a start that
            // would be refused anyway does not reconfigure the NIC.
            validate(config, options, config.workers())?;
            set_queues(&options.interface, config.workers(), interface.rx_queues)?;
            interface = Interface::read(&options.interface)?;
        }
        validate(config, options, interface.rx_queues)?;
        let internals: Vec<_> = (0..config.workers())
            .map(|i| config.worker_internal_addr(i))
            .collect();
        let fast_path_flows = match options.fast_path {
            FastPath::Off => None,
            FastPath::Xdp => Some(config.flows_per_worker.saturating_mul(config.workers())),
        };
        let steering = Steering::load_with(
            &config.vips,
            &internals,
            interface.rx_queues as u32,
            fast_path_flows,
        )
        .map_err(system("loading the XDP program"))?;
        let fast_path = steering.fast_path().cloned();
        let xsk_config = XskConfig {
            frames: 4096,
            frame_size: options.frame_size,
            headroom: 128,
            ring_size: options.ring_size,
            zerocopy: options.bind_mode == BindMode::Zerocopy,
            need_wakeup: true,
            tx_backlog: options.tx_backlog,
        };
        let metrics = RelayMetrics::new("afxdp", config.workers());
        let policy = config.shared_forward_policy(std::time::Instant::now());
        // The NIC puts a transceiver's replies on any queue: every worker must be able to
        // send the returns of every worker's flows.
        let shared_returns = (config.workers() > 1).then(|| {
            Arc::new(SharedReturns::new(
                config.flows_per_worker.saturating_mul(config.workers()),
                std::time::Instant::now(),
            ))
        });
        let mut workers = Vec::with_capacity(config.workers());
        for index in 0..config.workers() {
            let queue = index as u32;
            let socket = open(interface.index, queue, xsk_config).map_err(system(format!(
                "AF_XDP socket on {} queue {index}",
                options.interface
            )))?;
            steering
                .register_socket(queue, socket.fd())
                .map_err(system("registering the socket"))?;
            let now = std::time::Instant::now();
            let table = FlowTable::new(config.flows_per_worker, config.idle_timeout, now)
                .map_err(|e| StartError::Config(e.to_string()))?;
            let neighbours = Neighbours::new(interface.index)
                .map_err(system("reading the neighbour table (netlink)"))?;
            let mut forwarder = Forwarder::new(
                policy.clone(),
                table,
                now,
                ufrag_common::hint::unix_seconds(std::time::SystemTime::now()),
            );
            if let Some(returns) = &shared_returns {
                forwarder = forwarder.with_shared_returns(Arc::clone(returns));
            }
            if let Some(maps) = &fast_path {
                let writer = FastPathWriter::new(
                    Arc::clone(maps),
                    neighbours.follower(),
                    interface.mac,
                    config.worker_internal_addr(index),
                )
                .map_err(system("the fast path's value buffer"))?;
                forwarder = forwarder.with_mirror(Box::new(writer));
            }
            workers.push(AfXdpWorker::new(WorkerParts {
                index,
                socket,
                forwarder,
                shared: metrics.worker(index),
                vips: config.vips.clone(),
                internal: config.worker_internal_addr(index),
                internals: internals.clone(),
                if_mac: interface.mac,
                neighbours,
                mode: config.poll,
                batch: options.batch,
            }));
        }
        let link = steering
            .attach(interface.index, options.xdp_mode)
            .map_err(system(format!("attaching to {}", options.interface)))?;
        // Workers read cache answers every tick: no wakeup needed.
        let wakers: Vec<WakeFn> = (0..workers.len())
            .map(|_| Box::new(|| {}) as WakeFn)
            .collect();
        if let Some(maps) = &fast_path {
            let maps = Arc::clone(maps);
            metrics.set_fast_path(Box::new(move || maps.totals()));
        }
        let mut running =
            Running::start(config, metrics, workers, wakers).map_err(StartError::System)?;
        running.hold(link);
        running.hold(steering);
        running.hold(fast_path);
        tracing::info!(
            interface = %options.interface,
            xdp_mode = ?options.xdp_mode,
            bind_mode = ?options.bind_mode,
            fast_path = ?options.fast_path,
            xsk_layer = ?options.xsk_layer,
            poll = ?config.poll,
            workers = config.workers(),
            "relay-afxdp ready"
        );
        Ok(running)
    }
}
