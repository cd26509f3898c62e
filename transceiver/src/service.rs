//! The transceiver as a service: its options, and `Transceiver::start` (workers bound,
//! signaling HTTP up, readiness on) returning a handle that drains and joins, the shape
//! every binary of this project has (`ufrag_common::runtime::lifecycle::serve`).

use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ipnet::IpNet;
use ufrag_common::config::BundlePolicy;
use ufrag_common::hint::HintKeys;
use ufrag_common::runtime::keys::KeyWatch;
use ufrag_common::runtime::lifecycle::Service;

use crate::http::{ConnectionCaps, HttpServer, Surface};

/// Connections the operations listener (`--metrics-addr`) holds at once: scrapers and
/// probes, not clients.
const OPERATIONS_CONNECTIONS: usize = 64;
use crate::client_address::TrustedProxies;
use crate::metrics::TransceiverMetrics;
use crate::model::{EchoModel, ModelBackend};
use crate::model_bridge::{BridgeConfig, WsBridge};
use crate::session::SessionTuning;
use crate::session_token::{SessionTokens, TokenAlgorithm, TokenRules};
use crate::signaling::{MAX_WORKERS, Signaling, SignalingLimits};
use crate::worker::{Worker, WorkerConfig};

/// WebRTC sessions behind the relay: WHIP signaling, str0m, and a model backend (the
/// built-in echo, or an external one over a WebSocket: --model ws://…).
///
/// POST an SDP offer (Content-Type: application/sdp) to /v1/sessions; the answer
/// advertises one ICE candidate, the relay's VIP (--advertise), with a server ufrag that
/// routes to this worker. DELETE the Location to end the session. GET / is a demo page.
///
/// Hint keys: --hint-keys-file or UFRAG_RELAY_HINT_KEYS (the relay's keys). Bearer token:
/// UFRAG_TRANSCEIVER_TOKEN; required when --http-addr is not a loopback address, unless
/// --allow-unauthenticated says otherwise.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "transceiver", version = ufrag_version::VERSION, verbatim_doc_comment)]
pub struct TransceiverOptions {
    /// TOML config file: its keys are these flags' long names, `-` written `_`
    /// (e.g. `http_addr = "0.0.0.0:8080"`); a flag on the command line replaces its key.
    /// Or UFRAG_TRANSCEIVER_CONFIG (empty: none).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (file, flags and defaults, as a config file that
    /// loads to the same; tokens and keys never printed) and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Signaling, the demo page, health (and metrics, unless --metrics-addr) listen here.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "IP:PORT")]
    pub http_addr: SocketAddr,
    /// Serve the demo page (`GET /`, `/app.js`) on the signaling port; `false` answers 404
    /// there (a production deployment need not show it).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub demo_page: bool,
    /// Serve /metrics, /healthz and /readyz here instead, off the public signaling port
    /// (which then answers 404 for /metrics).
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_addr: Option<SocketAddr>,
    /// Worker 0's UDP socket; worker i binds PORT + i (port 0: any).
    #[arg(long, value_name = "IP:PORT")]
    pub bind: SocketAddr,
    /// Number of workers.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// CPUs to pin the workers to, e.g. `0-3,6`: worker i runs on the i-th listed CPU
    /// (with fewer CPUs than workers, the list repeats). Unpinned when absent: they run
    /// on the CPUs the process may run on (a pod's cpuset), wherever the kernel puts them.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// The relay VIP:port to advertise as the only candidate.
    #[arg(long, value_name = "IP:PORT", required_unless_present = "direct")]
    pub advertise: Option<SocketAddr>,
    /// The relay's TCP VIP:port, advertised as a passive ICE-TCP candidate below the UDP
    /// one, for clients whose networks block UDP (relay mode only).
    #[arg(long, value_name = "IP:PORT", conflicts_with = "direct")]
    pub advertise_tcp: Option<SocketAddr>,
    /// Talk to clients directly (advertise the worker's own address), for comparison.
    #[arg(long)]
    pub direct: bool,
    /// A network relays send frames from (repeat).
    #[arg(long = "allow-relay-net", value_name = "CIDR")]
    pub allowed_relays: Vec<IpNet>,
    /// A network of relays that read bundles (frame version 2; relay-mio does,
    /// relay-afxdp does not): the frames one batch has for one relay worker leave in one
    /// datagram (repeat; none: every frame alone). Bundles from relays are always read.
    #[arg(long = "bundle-to", value_name = "CIDR", conflicts_with = "direct")]
    pub bundle_to: Vec<IpNet>,
    /// The MTU of the path to the relays: a bundle never passes it.
    #[arg(long, default_value_t = ufrag_common::config::DEFAULT_INTERNAL_MTU, value_name = "BYTES",
          value_parser = clap::value_parser!(u16).range(1280..=9216))]
    pub internal_mtu: u16,
    /// Hint keys file, `<id>:<hex>` per line, current first, previous second (mode 0600);
    /// reloaded on SIGHUP and when it changes.
    #[arg(long, value_name = "FILE")]
    pub hint_keys_file: Option<PathBuf>,
    /// Cluster id written into hints.
    #[arg(long, default_value_t = 0)]
    pub cluster_id: u16,
    /// Sessions per worker; beyond, signaling answers 503.
    #[arg(long, default_value_t = 1000)]
    pub max_sessions_per_worker: usize,
    /// The model backend: `echo` (built in), or `ws://HOST:PORT/PATH` / `wss://…` for an
    /// external one speaking the model protocol (one connection per worker). Its bearer
    /// token comes from --model-token-file or UFRAG_MODEL_TOKEN, never a flag.
    #[arg(long, default_value = "echo", value_name = "echo|URL")]
    pub model: String,
    /// A file holding the model backend's bearer token (mode 0600).
    #[arg(long, value_name = "FILE")]
    pub model_token_file: Option<PathBuf>,
    /// Extra trust anchors (PEM) for a `wss://` model backend, beside the web's roots.
    #[arg(long, value_name = "FILE")]
    pub model_ca_file: Option<PathBuf>,
    /// Echo delay (e.g. 200ms), for `--model echo`.
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    pub echo_delay: Duration,
    /// A session not connected after this long ends (a client that can reach the relay
    /// connects in well under a second; one that cannot holds its slot this long).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// How often each session tells the model its quality (`session.stats`: round trip,
    /// loss both ways, jitter, bytes) and the metrics' histograms take it in.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub session_stats_interval: Duration,
    /// How much of the model's speech each session holds ahead of playback (the model
    /// may send faster than real time; the session plays it at 20 ms a frame). A frame
    /// beyond is dropped and counted (`model_dropped_messages{reason="playout_full"}`).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub playout_buffer: Duration,
    /// A session that receives nothing for this long ends (ICE consent).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// On SIGTERM: refuse new sessions, let existing ones run this long.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub drain_time: Duration,
    /// Concurrent signaling connections; one beyond is closed at once.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub http_max_connections: usize,
    /// Concurrent signaling connections from one client address (IPv4, or IPv6 /64); one
    /// beyond is closed at once.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub http_max_connections_per_ip: u32,
    /// Session POSTs per second from one client address (twice that at once); beyond: 429.
    #[arg(long, default_value_t = 50.0, value_name = "N")]
    pub posts_per_second_per_ip: f64,
    /// Requests of any kind without a valid bearer token per second from one client
    /// address (twice that at once); beyond: 429.
    #[arg(long, default_value_t = 100.0, value_name = "N")]
    pub requests_per_second_per_ip: f64,
    /// Sessions answered but not yet connected from one client address (IPv4, or IPv6
    /// /64) at once; a POST beyond: 429.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub max_unconnected_per_ip: u32,
    /// Proxies (addresses, or CIDR; repeatable or comma-separated) whose
    /// `X-Forwarded-For` names the client that every per-IP limit counts; their own
    /// connections are not capped per IP. List the proxies themselves (the Ingress
    /// controller's addresses), not a network clients also reach signaling from: anyone
    /// in it could name any client. Nobody is trusted by default.
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    pub trusted_proxy: Vec<String>,
    /// Connections from a trusted proxy begin with a PROXY protocol v2 header naming the
    /// client (a TCP load balancer, or an Ingress with the PROXY protocol on), which is
    /// then the client for every per-address limit; `X-Forwarded-For` is not read. Such a
    /// connection without a valid header is closed. Needs `--trusted-proxy`.
    #[arg(long)]
    pub proxy_protocol: bool,
    /// Session tokens: `POST /v1/sessions` takes a short-lived JWT that the app's server
    /// mints per user (its `sub`, `route` and `metadata` reach the model in
    /// `session.started`). This file holds the key that verifies them: the shared secret
    /// for HS256 (at least 32 bytes, mode 0600), the public key in PEM for ES256 or EdDSA.
    /// The bearer token (UFRAG_TRANSCEIVER_TOKEN) still admits server-to-server calls.
    #[arg(long, value_name = "FILE")]
    pub session_token_key_file: Option<PathBuf>,
    /// The algorithm session tokens are signed with; a token naming another is refused.
    #[arg(long, value_enum, default_value_t = TokenAlgorithm::Hs256)]
    pub session_token_algorithm: TokenAlgorithm,
    /// The `aud` a session token must name.
    #[arg(long, default_value = "ufrag-relay", value_name = "TEXT")]
    pub session_token_audience: String,
    /// The longest a session token may live (its `exp` from now, and from its `iat`);
    /// at most 1h.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub session_token_max_lifetime: Duration,
    /// Live sessions one session-token owner (its `sub`) may hold at once; a POST
    /// beyond: 429 (`http_refusals{reason="owner_session_cap"}`).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub max_sessions_per_owner: u32,
    /// Each session token creates one session: its `jti` is required and remembered
    /// until it expires; a second POST with it gets 403.
    #[arg(long)]
    pub session_token_single_use: bool,
    /// Serve signaling on a non-loopback address without a bearer token (logged loudly).
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// Log format on stderr (`json`: one object per line, for a log pipeline).
    #[arg(long, value_enum, default_value_t = ufrag_common::config::LogFormat::Text)]
    pub log_format: ufrag_common::config::LogFormat,
}

/// The environment variable that may name the config file.
pub const CONFIG_ENV: &str = "UFRAG_TRANSCEIVER_CONFIG";

/// Why the transceiver could not start.
#[derive(Debug)]
pub enum StartError {
    /// The options are inconsistent (exit code 2): which field, and why.
    Config(String),
    /// The system refused (a socket, a thread).
    System(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "invalid configuration: {e}"),
            StartError::System(e) => f.write_str(e),
        }
    }
}

/// A running transceiver; see the module documentation.
pub struct Transceiver {
    /// Reloads the hint keys on SIGHUP and when their file changes.
    _key_watch: KeyWatch,
    metrics: Arc<TransceiverMetrics>,
    signaling: Arc<Signaling>,
    http: HttpServer,
    /// The operations listener (`--metrics-addr`), if any.
    operations: Option<HttpServer>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Transceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transceiver")
            .field("workers", &self.workers.len())
            .finish_non_exhaustive()
    }
}

impl Transceiver {
    /// Binds every worker and the HTTP endpoint, starts their threads, and marks the
    /// transceiver ready.
    pub fn start(opts: &TransceiverOptions, keys: HintKeys) -> Result<Self, StartError> {
        if !opts.direct && opts.allowed_relays.is_empty() {
            return Err(StartError::Config(
                "`allow_relay_net`: at least one network is required in relay mode".into(),
            ));
        }
        if opts.workers == 0 || opts.workers > MAX_WORKERS {
            return Err(StartError::Config(format!(
                "`workers`: must be 1..={MAX_WORKERS} (a session id names its worker in one byte)"
            )));
        }
        if opts.http_max_connections == 0 {
            return Err(StartError::Config(
                "`http_max_connections`: must be at least 1".into(),
            ));
        }
        if opts.http_max_connections_per_ip == 0 {
            return Err(StartError::Config(
                "`http_max_connections_per_ip`: must be at least 1".into(),
            ));
        }
        if opts.max_unconnected_per_ip == 0 {
            return Err(StartError::Config(
                "`max_unconnected_per_ip`: must be at least 1".into(),
            ));
        }
        let trusted_proxies = TrustedProxies::parse(&opts.trusted_proxy)
            .map_err(|reason| StartError::Config(format!("`trusted_proxy`: {reason}")))?;
        if opts.proxy_protocol && trusted_proxies.is_empty() {
            return Err(StartError::Config(
                "`proxy_protocol`: needs `trusted_proxy` (the proxies that send the header)".into(),
            ));
        }
        for wide in trusted_proxies.networks_wider_than_a_host() {
            tracing::warn!(
                network = %wide,
                "trusted_proxy lists a network, not proxies: any client in it can name any \
                 client address in X-Forwarded-For and spend that address's limits"
            );
        }
        if !opts.requests_per_second_per_ip.is_finite() || opts.requests_per_second_per_ip <= 0.0 {
            return Err(StartError::Config(
                "`requests_per_second_per_ip`: must be above 0".into(),
            ));
        }
        if opts.playout_buffer < crate::playout::FRAME
            || opts.playout_buffer > Duration::from_secs(60)
        {
            return Err(StartError::Config(
                "`playout_buffer`: from 20ms to 60s".into(),
            ));
        }
        if opts.session_stats_interval < Duration::from_secs(1) {
            return Err(StartError::Config(
                "`session_stats_interval`: at least 1s".into(),
            ));
        }
        if !opts.posts_per_second_per_ip.is_finite() || opts.posts_per_second_per_ip <= 0.0 {
            return Err(StartError::Config(
                "`posts_per_second_per_ip`: must be above 0".into(),
            ));
        }
        let cpus = match opts.cpus.as_deref() {
            Some(list) => ufrag_common::config::parse_cpu_list(list)
                .map_err(|reason| StartError::Config(format!("`cpus`: {reason}")))?,
            None => Vec::new(),
        };
        let token = std::env::var("UFRAG_TRANSCEIVER_TOKEN")
            .ok()
            .filter(|t| !t.is_empty());
        let session_tokens = session_tokens(opts)?;
        if token.is_none() && session_tokens.is_none() && !opts.http_addr.ip().is_loopback() {
            if !opts.allow_unauthenticated {
                return Err(StartError::Config(format!(
                    "`http_addr`: {} is not loopback and neither a bearer token \
                     (UFRAG_TRANSCEIVER_TOKEN) nor `session_token_key_file` is set; pass \
                     --allow-unauthenticated to serve anyone",
                    opts.http_addr
                )));
            }
            tracing::warn!(
                http = %opts.http_addr,
                "SIGNALING IS UNAUTHENTICATED on a non-loopback address (--allow-unauthenticated): \
                 anyone who reaches it can create sessions"
            );
        }
        let bridge = model_bridge_config(opts)?;
        let dtls_cert = crate::session::process_certificate().ok_or_else(|| {
            StartError::System("the crypto provider cannot make a DTLS certificate".into())
        })?;
        let metrics = Arc::new(TransceiverMetrics::new());
        metrics.hint_key_in_use(keys.current().id());
        let reloads = Arc::clone(&metrics);
        let key_watch = KeyWatch::start(opts.hint_keys_file.as_deref(), keys, move |keys| {
            reloads.hint_key_reloaded(keys.is_some());
            if let Some(keys) = keys {
                reloads.hint_key_in_use(keys.current().id());
            }
        })
        .map_err(|e| StartError::System(format!("watching the hint keys: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = vec![];
        let mut workers = vec![];
        // Each worker says when it is on its CPU; readiness waits for all of them.
        let (placed_tx, placed_rx) = std::sync::mpsc::channel();
        for index in 0..opts.workers {
            let port = match opts.bind.port() {
                0 => 0,
                first => first + index as u16,
            };
            let cfg = WorkerConfig {
                index,
                bind: SocketAddr::new(opts.bind.ip(), port),
                advertise: opts.advertise.unwrap_or(opts.bind),
                advertise_tcp: opts.advertise_tcp,
                direct: opts.direct,
                allowed_relays: opts.allowed_relays.clone(),
                bundles: BundlePolicy {
                    to: opts.bundle_to.clone(),
                    mtu: opts.internal_mtu,
                    gso: false,
                },
                keys: key_watch.shared(),
                cluster: opts.cluster_id,
                dtls_cert: dtls_cert.clone(),
                max_sessions: opts.max_sessions_per_worker,
                tuning: SessionTuning {
                    stats_interval: opts.session_stats_interval,
                    playout_buffer: opts.playout_buffer,
                },
                connect_timeout: opts.connect_timeout,
                idle_timeout: opts.idle_timeout,
            };
            let model: Box<dyn ModelBackend> = match &bridge {
                None => Box::new(EchoModel::new(opts.echo_delay)),
                Some(config) => {
                    Box::new(WsBridge::new(config.clone(), index, Arc::clone(&metrics)))
                }
            };
            let (worker, handle) = Worker::bind(cfg, model, Arc::clone(&metrics))
                .map_err(|e| StartError::System(format!("binding worker {index}: {e}")))?;
            tracing::info!(worker = index, addr = %handle.addr, "worker bound");
            let (load, stop) = (Arc::clone(&handle.load), Arc::clone(&stop));
            handles.push(handle);
            let worker_metrics = Arc::clone(&metrics);
            let cpu = (!cpus.is_empty()).then(|| cpus[index % cpus.len()]);
            let placed = placed_tx.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("xcvr-w{index}"))
                    .spawn(move || {
                        if let Some(cpu) = cpu
                            && !ufrag_common::runtime::lifecycle::pin_current_thread(cpu)
                        {
                            tracing::warn!(worker = index, cpu, "could not pin the worker");
                        }
                        let _ = placed.send(());
                        let outcome =
                            std::panic::catch_unwind(AssertUnwindSafe(|| worker.run(&stop)));
                        if stop.load(Ordering::Relaxed) && matches!(outcome, Ok(Ok(()))) {
                            return;
                        }
                        // A worker that stops on its own takes its sessions with it:
                        // signaling sends it nothing more and readiness turns off.
                        load.alive.store(false, Ordering::Relaxed);
                        worker_metrics.worker_failed();
                        match outcome {
                            Ok(Ok(())) => tracing::error!(worker = index, "worker stopped"),
                            Ok(Err(e)) => {
                                tracing::error!(worker = index, error = %e, "worker failed")
                            }
                            Err(_) => tracing::error!(worker = index, "worker panicked"),
                        }
                    })
                    .map_err(|e| StartError::System(format!("spawning worker {index}: {e}")))?,
            );
        }
        drop(placed_tx);
        for _ in 0..opts.workers {
            let _ = placed_rx.recv();
        }
        let signaling = Arc::new(Signaling::new(
            handles,
            token,
            session_tokens,
            Arc::clone(&metrics),
            SignalingLimits {
                posts_per_second: opts.posts_per_second_per_ip,
                requests_per_second: opts.requests_per_second_per_ip,
                unconnected: opts.max_unconnected_per_ip,
                sessions_per_owner: opts.max_sessions_per_owner,
                trusted_proxies,
                proxy_protocol: opts.proxy_protocol,
            },
        ));
        let http = HttpServer::start(
            opts.http_addr,
            Arc::clone(&signaling),
            ConnectionCaps {
                total: opts.http_max_connections,
                per_address: opts.http_max_connections_per_ip,
            },
            Surface::Public {
                metrics: opts.metrics_addr.is_none(),
                demo_page: opts.demo_page,
            },
        )
        .map_err(|e| StartError::System(format!("http_addr {}: {e}", opts.http_addr)))?;
        let operations = opts
            .metrics_addr
            .map(|addr| {
                let caps = ConnectionCaps {
                    total: OPERATIONS_CONNECTIONS,
                    per_address: OPERATIONS_CONNECTIONS as u32,
                };
                HttpServer::start(addr, Arc::clone(&signaling), caps, Surface::Operations)
                    .map_err(|e| StartError::System(format!("metrics_addr {addr}: {e}")))
            })
            .transpose()?;
        metrics.set_ready(true);
        tracing::info!(http = %opts.http_addr, direct = opts.direct, "transceiver ready");
        Ok(Transceiver {
            _key_watch: key_watch,
            metrics,
            signaling,
            http,
            operations,
            stop,
            workers,
        })
    }
}

/// The environment variable that may carry the model backend's bearer token.
pub const MODEL_TOKEN_ENV: &str = "UFRAG_MODEL_TOKEN";

/// The bridge's configuration for `--model URL`, or `None` for the echo model.
fn model_bridge_config(opts: &TransceiverOptions) -> Result<Option<BridgeConfig>, StartError> {
    if opts.model == "echo" {
        if opts.model_token_file.is_some() || opts.model_ca_file.is_some() {
            return Err(StartError::Config(
                "`model_token_file`, `model_ca_file`: only for an external model (--model ws://…)"
                    .into(),
            ));
        }
        return Ok(None);
    }
    crate::model_bridge::check_url(&opts.model)
        .map_err(|e| StartError::Config(format!("`model`: {e} (or `echo`)")))?;
    let env_token = std::env::var(MODEL_TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty());
    let token = match (&opts.model_token_file, env_token) {
        (Some(_), Some(_)) => {
            return Err(StartError::Config(format!(
                "`model_token_file`: both it and {MODEL_TOKEN_ENV} are set; use one"
            )));
        }
        (Some(path), None) => Some(read_private(path, "model_token_file")?.trim().to_string()),
        (None, token) => token,
    };
    let ca_pem = opts
        .model_ca_file
        .as_ref()
        .map(|path| {
            std::fs::read(path).map_err(|e| {
                StartError::Config(format!(
                    "`model_ca_file`: cannot read {}: {e}",
                    path.display()
                ))
            })
        })
        .transpose()?;
    if ca_pem.is_some() && !opts.model.starts_with("wss://") {
        return Err(StartError::Config(
            "`model_ca_file`: only for a wss:// model backend".into(),
        ));
    }
    Ok(Some(BridgeConfig {
        url: opts.model.clone(),
        token,
        ca_pem,
    }))
}

/// The session-token verifier the options ask for, if any.
fn session_tokens(opts: &TransceiverOptions) -> Result<Option<SessionTokens>, StartError> {
    let Some(path) = &opts.session_token_key_file else {
        if opts.session_token_single_use {
            return Err(StartError::Config(
                "`session_token_single_use`: needs `session_token_key_file`".into(),
            ));
        }
        return Ok(None);
    };
    let field = "session_token_key_file";
    let key = if opts.session_token_algorithm == TokenAlgorithm::Hs256 {
        read_private(path, field)?
    } else {
        std::fs::read_to_string(path).map_err(|e| {
            StartError::Config(format!("`{field}`: cannot read {}: {e}", path.display()))
        })?
    };
    let rules = TokenRules {
        algorithm: opts.session_token_algorithm,
        audience: opts.session_token_audience.clone(),
        max_lifetime_s: opts.session_token_max_lifetime.as_secs(),
        single_use: opts.session_token_single_use,
    };
    SessionTokens::new(key.as_bytes(), rules)
        .map(Some)
        .map_err(|reason| StartError::Config(format!("`{field}`: {reason}")))
}

/// Reads a secret file that only its owner (and this process's group) may read.
fn read_private(path: &std::path::Path, field: &str) -> Result<String, StartError> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path).map_err(|e| {
        StartError::Config(format!("`{field}`: cannot read {}: {e}", path.display()))
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(StartError::Config(format!(
            "`{field}`: {} has mode {mode:04o}: others must not read it (chmod 600)",
            path.display()
        )));
    }
    std::fs::read_to_string(path)
        .map_err(|e| StartError::Config(format!("`{field}`: cannot read {}: {e}", path.display())))
}

impl Service for Transceiver {
    /// Readiness off and no new sessions; existing ones run for `drain_time`.
    fn drain(&self, drain_time: Duration) {
        self.metrics.set_ready(false);
        self.signaling.stop_accepting();
        tracing::info!(
            drain_ms = drain_time.as_millis() as u64,
            "draining: no new sessions"
        );
        std::thread::sleep(drain_time);
    }

    /// Ends every session, stops the workers and the HTTP server.
    fn join(self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            let _ = worker.join();
        }
        self.http.stop();
        if let Some(operations) = self.operations {
            operations.stop();
        }
        if self.signaling.all_workers_alive() {
            Ok(())
        } else {
            Err(io::Error::other("a worker had failed"))
        }
    }
}
