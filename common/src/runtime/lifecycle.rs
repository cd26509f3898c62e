//! Process lifecycle shared by both relays: logging setup, SIGTERM/SIGINT handling, the
//! drain sequence, pinning threads to CPUs, and [`Running`], which starts and stops a
//! relay's workers, route cache and HTTP endpoints whatever the backend.

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::{LogFormat, RelayArgs, RelayConfig, refuse_example_keys};
use crate::config_file::{ParseError, Parsed, RenamedKey, config_path, parse};
use crate::metrics::RelayMetrics;
use crate::runtime::cache::{CacheClient, RouteCache, WakeFn};
use crate::runtime::host::Host;
use crate::runtime::http::HttpEndpoints;
use crate::runtime::keys::{KeyReader, KeyWatch};

/// The log format the binary was given, once [`init_logging`] has run.
static LOG_FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Sets up structured logs on stderr, as text lines or JSON lines; `RUST_LOG` filters
/// (default `info`).
pub fn init_logging(format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
}

/// Says why the binary cannot start (or stopped badly) in the format its logs take: for
/// people, the line `name: error` on stderr; with `--log-format json`, one JSON object at
/// level ERROR like every other line, so a log pipeline parses it.
pub fn report_fatal(name: &str, error: &dyn std::fmt::Display) {
    match LOG_FORMAT.get() {
        Some(LogFormat::Json) => tracing::error!(program = name, "{error}"),
        _ => eprintln!("{name}: {error}"),
    }
}

/// Parses the binary's command line (`C`) with the config file it names (`--config FILE`,
/// else the variable `config_env`) read as flags before the command line's own
/// ([`crate::config_file`]). `--help` and `--version` print as usual. A usage error
/// is reported like every startup error ([`report_fatal`]; JSON when the command line asks
/// for `--log-format json`), a file's naming the file and its key; it gives exit code 2.
pub fn parse_with_config_file<C: clap::CommandFactory + clap::FromArgMatches>(
    name: &str,
    config_env: &str,
    renamed: &[RenamedKey],
) -> Result<Parsed<C>, std::process::ExitCode> {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    // `--help` and `--version` answer whatever the file holds.
    if let Err(error) = C::command().try_get_matches_from(&args)
        && matches!(
            error.kind(),
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
        )
    {
        return Err(usage_error(name, &args, error));
    }
    let path = config_path(&args, std::env::var_os(config_env));
    let text = match &path {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) => {
                let error = ParseError::Unreadable(format!("cannot read it: {e}"));
                return Err(config_file_error(name, &args, path, error));
            }
        },
        None => None,
    };
    // A file's `log_format = "json"` makes its own errors JSON too (a flag still wins).
    if text.as_deref().is_some_and(file_asks_for_json_logs)
        && !args
            .iter()
            .any(|a| a.to_str().is_some_and(|a| a.starts_with("--log-format")))
    {
        args.push("--log-format=json".into());
    }
    let args = args;
    parse::<C>(text.as_deref(), &args, renamed).map_err(|error| match (error, &path) {
        (ParseError::CommandLine(error), _) => usage_error(name, &args, error),
        (error, Some(path)) => config_file_error(name, &args, path, error),
        // Without a file, every error is the command line's.
        (error, None) => {
            let error = clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{}\n", error.into_config_error()),
            );
            usage_error(name, &args, error)
        }
    })
}

/// Reports a fault in the config file at `path` (exit code 2), in the log format `args`
/// ask for: `invalid configuration: `config` PATH: `key`: why` (no key when the file as a
/// whole is at fault).
fn config_file_error(
    name: &str,
    args: &[OsString],
    path: &OsString,
    error: ParseError,
) -> std::process::ExitCode {
    let why = match error {
        ParseError::Unreadable(reason) => reason,
        error => {
            let error = error.into_config_error();
            format!("`{}`: {}", error.field, error.reason)
        }
    };
    let error = format!(
        "invalid configuration: `config` {}: {why}\n",
        std::path::Path::new(path).display(),
    );
    let error = clap::Error::raw(clap::error::ErrorKind::ValueValidation, error);
    usage_error(name, args, error)
}

/// Reports a clap error: help and version on stdout as clap prints them (exit 0), a usage
/// error in the log format `args` ask for (exit 2).
pub fn usage_error(name: &str, args: &[OsString], error: clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if informational || !asks_for_json_logs(args) {
        let _ = error.print();
        return std::process::ExitCode::from(error.exit_code() as u8);
    }
    init_logging(LogFormat::Json);
    // clap's text for a terminal, without its `error: ` and its pointer to --help.
    let text = error.to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("For more information"))
        .collect();
    report_fatal(name, &lines.join("\n").trim_end());
    std::process::ExitCode::from(2)
}

/// True when `args` contain `--log-format json` (or `--log-format=json`): read before the
/// command line is parsed, so that even a usage error is logged as JSON.
fn asks_for_json_logs(args: &[OsString]) -> bool {
    args.iter().enumerate().any(|(i, arg)| {
        arg == "--log-format=json"
            || (arg == "--log-format" && args.get(i + 1).is_some_and(|v| v == "json"))
    })
}

/// True when a config file's text sets `log_format = "json"`.
fn file_asks_for_json_logs(text: &str) -> bool {
    toml::from_str::<toml::Table>(text)
        .is_ok_and(|table| table.get("log_format").and_then(|v| v.as_str()) == Some("json"))
}

/// Set when SIGTERM or SIGINT arrives.
#[derive(Debug, Clone)]
pub struct TerminationSignal(Arc<AtomicBool>);

impl TerminationSignal {
    /// Registers the handlers.
    pub fn register() -> std::io::Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&flag))?;
        signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&flag))?;
        Ok(TerminationSignal(flag))
    }

    /// True once a signal has arrived.
    pub fn received(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Blocks (polling every 50 ms) until a signal arrives.
    pub fn wait(&self) {
        while !self.received() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The drain: readiness goes false at once, existing flows keep forwarding for
/// `drain_time`, then `stop` is set for the workers.
pub fn drain(metrics: &RelayMetrics, drain_time: Duration, stop: &AtomicBool) {
    metrics.set_ready(false);
    tracing::info!(
        drain_ms = drain_time.as_millis() as u64,
        "draining: not ready, existing flows keep forwarding"
    );
    std::thread::sleep(drain_time);
    stop.store(true, Ordering::Relaxed);
}

/// Pins the calling thread to `cpu`. Returns false when the CPU does not exist or the
/// kernel refuses.
pub fn pin_current_thread(cpu: usize) -> bool {
    // core_affinity indexes a fixed 1,024-CPU set and panics beyond it.
    cpu < MAX_CPUS && core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
}

/// The CPUs a thread can be pinned to: those of a `cpu_set_t` (glibc's `CPU_SETSIZE`).
const MAX_CPUS: usize = 1024;

/// A relay backend's worker: what the shared lifecycle needs of it.
pub trait RelayWorker: Send + 'static {
    /// Attaches the worker's route-cache client (before it runs).
    fn set_cache(&mut self, cache: CacheClient);
    /// Attaches the worker's view of the hint keys, which it adopts on its tick when they
    /// change (before it runs).
    fn set_keys(&mut self, keys: KeyReader);
    /// Runs until `stop` is set.
    fn run(self, stop: &AtomicBool) -> io::Result<()>;
}

/// A running relay, whichever its backend: pinned workers, the route cache, the HTTP
/// endpoints, and readiness. Stopping it is [`Running::drain`] then [`Running::join`].
#[derive(Debug)]
pub struct Running {
    /// Its metrics (readiness included).
    pub metrics: Arc<RelayMetrics>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<io::Result<()>>>,
    cache: Option<RouteCache>,
    http: Option<HttpEndpoints>,
    /// Resources a backend needs while its workers run (relay-afxdp: the BPF link that
    /// keeps its XDP program attached); released right after the workers stop.
    held: Vec<Box<dyn std::any::Any + Send>>,
}

impl Running {
    /// Starts the route cache (when configured; `wakers[i]` interrupts worker `i`'s
    /// wait when an answer arrives), the HTTP endpoints, and the workers, worker `i` in
    /// a thread pinned to `config.worker_cpus[i]`; then marks the relay ready. Nothing
    /// is left running when an error is returned.
    pub fn start<W: RelayWorker>(
        config: &RelayConfig,
        metrics: Arc<RelayMetrics>,
        mut workers: Vec<W>,
        wakers: Vec<WakeFn>,
    ) -> io::Result<Self> {
        metrics.hint_key_in_use(config.hint_keys.current().id());
        let reloads = Arc::clone(&metrics);
        let keys = KeyWatch::start(
            config.hint_keys_file.as_deref(),
            config.hint_keys.clone(),
            move |keys| {
                reloads.hint_key_reloaded(keys.is_some());
                if let Some(keys) = keys {
                    reloads.hint_key_in_use(keys.current().id());
                }
            },
        )?;
        for worker in &mut workers {
            worker.set_keys(keys.shared().reader());
        }
        // The route cache authenticates what it writes and reads with the same keys.
        let cache = match &config.route_store {
            Some(store) => {
                let (cache, clients) = RouteCache::start(
                    store,
                    &config.redis_access,
                    config.idle_timeout,
                    wakers,
                    keys.shared(),
                )
                .map_err(|e| io::Error::other(format!("route cache: {e}")))?;
                for (worker, client) in workers.iter_mut().zip(clients) {
                    worker.set_cache(client);
                }
                Some(cache)
            }
            None => None,
        };
        let http =
            HttpEndpoints::start(config.metrics_addr, Arc::clone(&metrics)).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("metrics_addr {}: {e}", config.metrics_addr),
                )
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut running = Running {
            metrics,
            stop,
            workers: Vec::with_capacity(workers.len()),
            cache,
            http: Some(http),
            held: Vec::new(),
        };
        running.hold(keys);
        for (index, (worker, &cpu)) in workers.into_iter().zip(&config.worker_cpus).enumerate() {
            let stop = Arc::clone(&running.stop);
            let metrics = Arc::clone(&running.metrics);
            let spawned = std::thread::Builder::new()
                .name(format!("relay-w{index}"))
                .spawn(move || {
                    if !pin_current_thread(cpu) {
                        tracing::warn!(worker = index, cpu, "could not pin worker to its CPU");
                    }
                    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        injected_fault(index, &metrics);
                        worker.run(&stop)
                    }));
                    let stopped_on_its_own =
                        !stop.load(Ordering::Relaxed) || !matches!(outcome, Ok(Ok(())));
                    if stopped_on_its_own {
                        // Its flows are gone and its share of the port is unserved:
                        // readiness turns off so the load balancer moves traffic away.
                        metrics.worker_failed();
                        match &outcome {
                            Ok(Ok(())) => tracing::error!(worker = index, "worker stopped"),
                            Ok(Err(e)) => {
                                tracing::error!(worker = index, error = %e, "worker failed")
                            }
                            Err(_) => tracing::error!(worker = index, "worker panicked"),
                        }
                    }
                    outcome.unwrap_or_else(|_| Err(io::Error::other("the worker panicked")))
                });
            match spawned {
                Ok(handle) => running.workers.push(handle),
                Err(e) => {
                    let _ = running.join();
                    return Err(e);
                }
            }
        }
        running.metrics.set_ready(true);
        Ok(running)
    }

    /// Keeps `resource` alive until the workers have stopped.
    pub fn hold(&mut self, resource: impl Send + 'static) {
        self.held.push(Box::new(resource));
    }

    /// The HTTP endpoints' address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(HttpEndpoints::local_addr)
    }

    /// The stop flag the workers watch.
    pub fn stop_flag(&self) -> &AtomicBool {
        &self.stop
    }

    /// Readiness off at once, existing flows keep forwarding for `drain_time`, then the
    /// workers are told to stop.
    pub fn drain(&self, drain_time: Duration) {
        drain(&self.metrics, drain_time, &self.stop);
    }

    /// Stops the workers (after the caller's drain), then the cache and HTTP endpoints.
    /// Returns the first worker error, if any.
    pub fn join(mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let mut result = Ok(());
        for handle in self.workers.drain(..) {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = result.and(Err(e)),
                Err(_) => result = result.and(Err(io::Error::other("a worker thread died"))),
            }
        }
        self.held.clear();
        if let Some(cache) = self.cache.take() {
            cache.stop();
        }
        if let Some(http) = self.http.take() {
            http.stop();
        }
        result
    }
}

/// With the `fault-injection` feature only (the relays' `*-faults` test binaries):
/// `panic-worker-N` makes worker N panic 300 ms after the relay is ready, so tests can
/// show what a dying worker does to readiness. The relays' own binaries have none.
pub const FAULT_ENV: &str = "UFRAG_RELAY_FAULT";

fn injected_fault(index: usize, metrics: &RelayMetrics) {
    if cfg!(feature = "fault-injection")
        && std::env::var(FAULT_ENV).is_ok_and(|v| v == format!("panic-worker-{index}"))
    {
        while !metrics.is_ready() {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        panic!("fault injected: panic-worker-{index}");
    }
}

/// A started service as [`serve`] sees it: it can drain, then be joined.
pub trait Service {
    /// Stops taking new work (readiness off), lets existing work run for `drain_time`,
    /// then asks the workers to stop.
    fn drain(&self, drain_time: Duration);
    /// Waits for the workers; an error if one failed.
    fn join(self) -> io::Result<()>;
}

impl Service for Running {
    fn drain(&self, drain_time: Duration) {
        Running::drain(self, drain_time);
    }

    fn join(self) -> io::Result<()> {
        Running::join(self)
    }
}

/// A binary's life after its configuration is loaded (every binary of this project has
/// this shape): install the signal handlers, `start` (which reports its own error and
/// picks the exit code), wait for SIGTERM/SIGINT, drain for `drain_time`, join. Returns
/// the process exit code (1 when a worker failed).
pub fn serve<S: Service>(
    name: &str,
    drain_time: Duration,
    start: impl FnOnce() -> Result<S, std::process::ExitCode>,
) -> std::process::ExitCode {
    let signal = match TerminationSignal::register() {
        Ok(s) => s,
        Err(e) => {
            report_fatal(name, &format_args!("cannot install signal handlers: {e}"));
            return std::process::ExitCode::FAILURE;
        }
    };
    let service = match start() {
        Ok(s) => s,
        Err(code) => return code,
    };
    signal.wait();
    service.drain(drain_time);
    match service.join() {
        Ok(()) => {
            tracing::info!("{name} stopped");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            report_fatal(name, &e);
            std::process::ExitCode::FAILURE
        }
    }
}

/// The CPUs this thread may run on, in order: its affinity mask (a container's cpuset,
/// or what `taskset` gave the process), read before any thread is pinned. The workers'
/// default CPU list: under Kubernetes' static CPU manager these are the pod's own cores,
/// not CPUs 0..N. Falls back to 0..available_parallelism if the mask cannot be read.
pub fn allowed_cpus() -> Vec<usize> {
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => ids.into_iter().map(|c| c.id).collect(),
        _ => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// Loads the relay configuration from the parsed flags, the files they name and the
/// process's environment; on error prints it and returns exit code 2.
pub fn load_config(name: &str, args: &RelayArgs) -> Result<RelayConfig, std::process::ExitCode> {
    RelayConfig::load(args, &Host::process(), &allowed_cpus())
        .and_then(|config| {
            refuse_example_keys(&config.hint_keys, Host::process().example_secrets_allowed())?;
            Ok(config)
        })
        .map_err(|e| {
            report_fatal(name, &e);
            std::process::ExitCode::from(2)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_to_a_cpu_beyond_any_cpu_set_is_refused_not_a_panic() {
        let outcome = std::thread::spawn(|| {
            (
                pin_current_thread(MAX_CPUS),
                pin_current_thread(usize::MAX),
                pin_current_thread(0),
            )
        })
        .join()
        .expect("pinning never panics");
        assert_eq!(outcome, (false, false, true));
    }
}
