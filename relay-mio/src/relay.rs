//! Starting and stopping relay-mio: bind every worker's sockets, then hand the workers to
//! the shared lifecycle ([`Running`]: route cache, HTTP endpoints, pinned threads,
//! drain, join).

use std::io;
use std::sync::atomic::AtomicBool;

use ufrag_common::config::RelayConfig;
use ufrag_common::metrics::RelayMetrics;
use ufrag_common::runtime::cache::{CacheClient, WakeFn};
use ufrag_common::runtime::keys::KeyReader;
use ufrag_common::runtime::lifecycle::RelayWorker;
pub use ufrag_common::runtime::lifecycle::Running;

use crate::worker::{Worker, WorkerSpec};

impl RelayWorker for Worker {
    fn set_cache(&mut self, cache: CacheClient) {
        Worker::set_cache(self, cache);
    }

    fn set_keys(&mut self, keys: KeyReader) {
        Worker::set_keys(self, keys);
    }

    fn run(self, stop: &AtomicBool) -> io::Result<()> {
        Worker::run(self, stop)
    }
}

/// relay-mio's entry point: what the `relay-mio` binary does, as a library.
///
/// ```no_run
/// use clap::Parser;
/// use ufrag_relay_mio::relay::Relay;
/// use ufrag_common::config::{RelayArgs, RelayConfig};
/// use ufrag_common::runtime::host::Host;
/// use ufrag_common::runtime::lifecycle::TerminationSignal;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     relay: RelayArgs,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cli = Cli::parse_from([
///     "relay-mio",
///     "--vip", "203.0.113.10:3478",
///     "--internal-addr", "10.0.0.5:40000",
///     "--allow-transceiver-net", "10.0.0.0/8",
/// ]);
/// // Files and the environment (hint keys in `UFRAG_RELAY_HINT_KEYS`) as the process sees them.
/// let host = Host::process();
/// let cpus = ufrag_common::runtime::lifecycle::allowed_cpus(); // the affinity mask
/// let config = RelayConfig::load(&cli.relay, &host, &cpus)?;
/// let running = Relay::start(&config)?; // every socket bound, workers pinned, ready
/// TerminationSignal::register()?.wait();
/// running.drain(config.drain_time); // /readyz 503, flows keep going, then stop
/// running.join()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Relay;

impl Relay {
    /// Binds every socket, starts the workers (each pinned to its CPU), the route cache
    /// and the HTTP endpoints, then marks the relay ready. Any bind error is returned
    /// before anything is left running.
    pub fn start(config: &RelayConfig) -> io::Result<Running> {
        let metrics = RelayMetrics::serving("mio", config.workers(), !config.tcp.vips.is_empty());
        let policy = config.shared_forward_policy(std::time::Instant::now());
        let mut workers = Vec::with_capacity(config.workers());
        let mut wakers: Vec<WakeFn> = Vec::with_capacity(config.workers());
        for (index, &cpu) in config.worker_cpus.iter().enumerate() {
            let spec = WorkerSpec {
                index,
                cpu,
                vips: config.vips.clone(),
                internal: config.worker_internal_addr(index),
                policy: policy.clone(),
                flows: config.flows_per_worker,
                idle_timeout: config.idle_timeout,
                poll_mode: config.poll,
                tcp: config.tcp.clone(),
                tcp_metrics: metrics.tcp_worker(index).cloned(),
                bundles: config.bundles.clone(),
            };
            let (worker, waker) = Worker::bind(spec, metrics.worker(index))?;
            wakers.push(Box::new(move || {
                let _ = waker.wake();
            }));
            workers.push(worker);
        }
        let running = Running::start(config, metrics, workers, wakers)?;
        tracing::info!(
            workers = config.workers(),
            vips = ?config.vips,
            internal = %config.internal_addr,
            metrics = ?running.metrics_addr(),
            route_cache = ?config.route_store,
            poll = ?config.poll,
            tcp_vips = ?config.tcp.vips,
            "relay-mio ready"
        );
        Ok(running)
    }
}
