//! The `relay-afxdp` binary: the relay's flags and config (shared with relay-mio) plus
//! the AF_XDP options; one pinned worker per (interface, queue); metrics, health, drain
//! and route cache as in relay-mio.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use relay_afxdp::neighbours::Neighbours;
use relay_afxdp::steering::{AttachMode, Steering};
use relay_afxdp::worker::{AfXdpWorker, PollMode, PollStats};
use relay_afxdp::xsk::{XdpSocket, XskConfig};
use ufrag_common::config::{HINT_KEYS_ENV, RelayArgs, RelayConfig};
use ufrag_common::flow::FlowTable;
use ufrag_common::forward::{ForwardPolicy, Forwarder};
use ufrag_common::metrics::RelayMetrics;
use ufrag_common::runtime::cache::{RouteCache, WakeFn};
use ufrag_common::runtime::http::HttpEndpoints;
use ufrag_common::runtime::lifecycle::{
    TerminationSignal, drain, init_logging, pin_current_thread,
};

/// The WebRTC relay on AF_XDP: the same behaviour, flags, config and metrics as
/// relay-mio, with the relay's UDP steered by our XDP program into AF_XDP sockets and
/// forwarded by poll-mode workers, one per (interface, queue). Everything that is not the
/// relay's UDP (ARP, ICMP, SSH, other UDP) stays with the kernel.
///
/// Every flag can also be set in the TOML file given with --config (flags win). Hint keys
/// come only from --hint-keys-file (mode 0600) or the UFRAG_RELAY_HINT_KEYS environment
/// variable, as `<id>:<hex secret>`, current key first.
///
/// IPv4 only on the AF_XDP data path for now.
#[derive(Debug, Parser)]
#[command(name = "relay-afxdp", version, verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    relay: RelayArgs,
    /// The interface carrying the VIPs and the internal address.
    #[arg(long, value_name = "IFNAME")]
    interface: String,
    /// XDP attach mode.
    #[arg(long, value_parser = ["skb", "native"], default_value = "skb")]
    xdp_mode: String,
    /// AF_XDP bind mode (veth supports copy only; the kernel's refusal is reported).
    #[arg(long, value_parser = ["copy", "zerocopy"], default_value = "copy")]
    bind_mode: String,
    /// busy: spin on the rings (DPDK style); wakeup: sleep in poll(2) when idle.
    #[arg(long, value_parser = ["busy", "wakeup"], default_value = "wakeup")]
    poll: String,
    /// UMEM frame size.
    #[arg(long, default_value_t = 2048)]
    frame_size: u32,
    /// Entries per ring (power of two).
    #[arg(long, default_value_t = 2048)]
    ring_size: u32,
    /// Frames per receive batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
}

fn fail(msg: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("relay-afxdp: {msg}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let env_keys = std::env::var(HINT_KEYS_ENV).ok();
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let config = match RelayConfig::load(&cli.relay, env_keys.as_deref(), online) {
        Ok(c) => c,
        Err(e) => return fail(e, 2),
    };
    let ifindex: u32 =
        match std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", cli.interface)) {
            Ok(s) => s.trim().parse().unwrap_or(0),
            Err(_) => {
                return fail(
                    format!(
                        "invalid configuration: `interface`: no interface {}",
                        cli.interface
                    ),
                    2,
                );
            }
        };
    let queues = std::fs::read_dir(format!("/sys/class/net/{}/queues", cli.interface))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(1);
    if config.workers() > queues {
        return fail(
            format!(
                "invalid configuration: `workers`: {} workers but {} has {queues} RX queue(s); one socket per queue",
                config.workers(),
                cli.interface
            ),
            2,
        );
    }
    if !cli.ring_size.is_power_of_two() || !(2048..=4096).contains(&cli.frame_size) {
        return fail(
            "invalid configuration: `ring_size` must be a power of two and `frame_size` 2048..=4096",
            2,
        );
    }
    let if_mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", cli.interface))
        .ok()
        .and_then(|s| {
            let b: Vec<u8> = s
                .trim()
                .split(':')
                .filter_map(|h| u8::from_str_radix(h, 16).ok())
                .collect();
            b.try_into().ok()
        })
        .unwrap_or([0; 6]);
    let mut ports: Vec<u16> = config.vips.iter().map(|v| v.port()).collect();
    ports.extend((0..config.workers()).map(|i| config.worker_internal_addr(i).port()));
    let steering = match Steering::load(&ports, queues as u32) {
        Ok(s) => s,
        Err(e) => return fail(format!("loading the XDP program: {e}"), 1),
    };
    let xsk_cfg = XskConfig {
        frames: 4096,
        frame_size: cli.frame_size,
        headroom: 128,
        ring_size: cli.ring_size,
        zerocopy: cli.bind_mode == "zerocopy",
        need_wakeup: true,
    };
    let metrics = RelayMetrics::new("afxdp", config.workers());
    let policy = ForwardPolicy::from(&config);
    let mut workers = vec![];
    for index in 0..config.workers() {
        let socket = match XdpSocket::open(ifindex, index as u32, xsk_cfg) {
            Ok(s) => s,
            Err(e) => {
                return fail(
                    format!("AF_XDP socket on {} queue {index}: {e}", cli.interface),
                    1,
                );
            }
        };
        if let Err(e) = steering.register_socket(index as u32, socket.fd()) {
            return fail(format!("registering the socket: {e}"), 1);
        }
        let now = std::time::Instant::now();
        let table = match FlowTable::new(config.flows_per_worker, config.idle_timeout, now) {
            Ok(t) => t,
            Err(e) => return fail(e, 2),
        };
        let neighbours = match Neighbours::new(ifindex) {
            Ok(n) => n,
            Err(e) => return fail(format!("reading the neighbour table (netlink): {e}"), 1),
        };
        workers.push(AfXdpWorker {
            index,
            socket,
            forwarder: Forwarder::new(policy.clone(), table, now),
            shared: metrics.worker(index),
            cache: None,
            vips: config.vips.clone(),
            internal: config.worker_internal_addr(index),
            if_mac,
            neighbours,
            mode: if cli.poll == "busy" {
                PollMode::Busy
            } else {
                PollMode::Wakeup
            },
            batch: cli.batch,
            polls: PollStats::default(),
            // Held frames never make the worker allocate: room for all of them up front.
            pending: std::collections::VecDeque::with_capacity(relay_afxdp::worker::MAX_PENDING),
        });
    }
    let cache = match &config.redis_url {
        Some(url) => {
            // Workers read answers every loop iteration: no wakeup needed.
            let wakers: Vec<WakeFn> = (0..workers.len())
                .map(|_| Box::new(|| {}) as WakeFn)
                .collect();
            match RouteCache::start(url, config.idle_timeout, wakers) {
                Ok((cache, clients)) => {
                    for (w, c) in workers.iter_mut().zip(clients) {
                        w.cache = Some(c);
                    }
                    Some(cache)
                }
                Err(e) => return fail(format!("invalid configuration: `redis_url`: {e}"), 2),
            }
        }
        None => None,
    };
    let mode = if cli.xdp_mode == "native" {
        AttachMode::Native
    } else {
        AttachMode::Skb
    };
    let link = match steering.attach(ifindex, mode) {
        Ok(l) => l,
        Err(e) => return fail(format!("attaching to {}: {e}", cli.interface), 1),
    };
    let http = match HttpEndpoints::start(config.metrics_addr, Arc::clone(&metrics)) {
        Ok(h) => h,
        Err(e) => return fail(format!("metrics_addr {}: {e}", config.metrics_addr), 1),
    };
    let signal = match TerminationSignal::register() {
        Ok(s) => s,
        Err(e) => return fail(format!("signals: {e}"), 1),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = vec![];
    for (w, cpu) in workers.into_iter().zip(config.worker_cpus.clone()) {
        let stop = Arc::clone(&stop);
        threads.push(
            std::thread::Builder::new()
                .name(format!("relay-w{}", w.index))
                .spawn(move || {
                    if !pin_current_thread(cpu) {
                        tracing::warn!(cpu, "could not pin worker");
                    }
                    w.run(&stop);
                })
                .expect("spawn worker"),
        );
    }
    tracing::info!(interface = %cli.interface, xdp_mode = %cli.xdp_mode, bind_mode = %cli.bind_mode, poll = %cli.poll, workers = threads.len(), "relay-afxdp ready");
    metrics.set_ready(true);
    signal.wait();
    drain(&metrics, config.drain_time, &stop);
    for t in threads {
        let _ = t.join();
    }
    drop(link);
    if let Some(c) = cache {
        c.stop();
    }
    http.stop();
    tracing::info!("relay-afxdp stopped");
    ExitCode::SUCCESS
}
