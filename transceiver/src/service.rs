//! The transceiver as a service: its options, and `Transceiver::start` (workers bound,
//! signaling HTTP up, readiness on) returning a handle that drains and joins, the shape
//! every binary of this project has (`ufrag_common::runtime::lifecycle::serve`).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ipnet::IpNet;
use ufrag_common::hint::HintKeys;
use ufrag_common::runtime::lifecycle::Service;

use crate::metrics::TransceiverMetrics;
use crate::model::EchoModel;
use crate::signaling::Signaling;
use crate::worker::{Worker, WorkerConfig};

/// Threads answering signaling and metrics requests.
const HTTP_THREADS: usize = 4;

/// WebRTC sessions behind the relay: WHIP signaling, str0m, and the echo model.
///
/// POST an SDP offer (Content-Type: application/sdp) to /v1/sessions; the answer
/// advertises one ICE candidate, the relay's VIP (--advertise), with a server ufrag that
/// routes to this worker. DELETE the Location to end the session. GET / is a demo page.
///
/// Hint keys: --hint-keys-file or UFRAG_RELAY_HINT_KEYS (the relay's keys). Bearer token
/// (optional): UFRAG_TRANSCEIVER_TOKEN.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "transceiver", version, verbatim_doc_comment)]
pub struct TransceiverOptions {
    /// Signaling, metrics and the demo page listen here.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "IP:PORT")]
    pub http_addr: SocketAddr,
    /// Worker 0's UDP socket; worker i binds PORT + i (port 0: any).
    #[arg(long, value_name = "IP:PORT")]
    pub bind: SocketAddr,
    /// Number of workers.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// The relay VIP:port to advertise as the only candidate.
    #[arg(long, value_name = "IP:PORT", required_unless_present = "direct")]
    pub advertise: Option<SocketAddr>,
    /// Talk to clients directly (advertise the worker's own address), for comparison.
    #[arg(long)]
    pub direct: bool,
    /// A network relays send frames from (repeat).
    #[arg(long = "allow-relay-net", value_name = "CIDR")]
    pub allowed_relays: Vec<IpNet>,
    /// Hint keys file, `<id>:<hex>` per line, current first (mode 0600).
    #[arg(long, value_name = "FILE")]
    pub hint_keys_file: Option<PathBuf>,
    /// Cluster id written into hints.
    #[arg(long, default_value_t = 0)]
    pub cluster_id: u16,
    /// Sessions per worker; beyond, signaling answers 503.
    #[arg(long, default_value_t = 1000)]
    pub max_sessions_per_worker: usize,
    /// Echo delay (e.g. 200ms).
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    pub echo_delay: Duration,
    /// A session not connected after this long ends.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// A session that receives nothing for this long ends (ICE consent).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// On SIGTERM: refuse new sessions, let existing ones run this long.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub drain_time: Duration,
}

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
    metrics: Arc<TransceiverMetrics>,
    signaling: Arc<Signaling>,
    server: Arc<tiny_http::Server>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<io::Result<()>>>,
    http: Vec<JoinHandle<()>>,
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
        if opts.workers == 0 {
            return Err(StartError::Config("`workers`: must be at least 1".into()));
        }
        let dtls_cert = crate::setup::process_certificate().ok_or_else(|| {
            StartError::System("the crypto provider cannot make a DTLS certificate".into())
        })?;
        let metrics = Arc::new(TransceiverMetrics::new());
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = vec![];
        let mut workers = vec![];
        for index in 0..opts.workers {
            let port = match opts.bind.port() {
                0 => 0,
                first => first + index as u16,
            };
            let cfg = WorkerConfig {
                index,
                bind: SocketAddr::new(opts.bind.ip(), port),
                advertise: opts.advertise.unwrap_or(opts.bind),
                direct: opts.direct,
                allowed_relays: opts.allowed_relays.clone(),
                keys: keys.clone(),
                cluster: opts.cluster_id,
                dtls_cert: dtls_cert.clone(),
                max_sessions: opts.max_sessions_per_worker,
                connect_timeout: opts.connect_timeout,
                idle_timeout: opts.idle_timeout,
            };
            let model = Box::new(EchoModel::new(opts.echo_delay));
            let (worker, handle) = Worker::bind(cfg, model, Arc::clone(&metrics))
                .map_err(|e| StartError::System(format!("binding worker {index}: {e}")))?;
            tracing::info!(worker = index, addr = %handle.addr, "worker bound");
            handles.push(handle);
            let stop = Arc::clone(&stop);
            workers.push(
                std::thread::Builder::new()
                    .name(format!("xcvr-w{index}"))
                    .spawn(move || worker.run(&stop))
                    .map_err(|e| StartError::System(format!("spawning worker {index}: {e}")))?,
            );
        }
        let signaling = Arc::new(Signaling::new(
            handles,
            std::env::var("UFRAG_TRANSCEIVER_TOKEN").ok(),
            Arc::clone(&metrics),
        ));
        let server = tiny_http::Server::http(opts.http_addr)
            .map(Arc::new)
            .map_err(|e| StartError::System(format!("http_addr {}: {e}", opts.http_addr)))?;
        let mut http = vec![];
        for i in 0..HTTP_THREADS {
            let (server, signaling) = (Arc::clone(&server), Arc::clone(&signaling));
            let thread = std::thread::Builder::new()
                .name(format!("http-{i}"))
                .spawn(move || {
                    while let Ok(mut request) = server.recv() {
                        let response = signaling.handle(&mut request);
                        let _ = request.respond(response);
                    }
                })
                .map_err(|e| StartError::System(format!("spawning http thread: {e}")))?;
            http.push(thread);
        }
        metrics.set_ready(true);
        tracing::info!(http = %opts.http_addr, direct = opts.direct, "transceiver ready");
        Ok(Transceiver {
            metrics,
            signaling,
            server,
            stop,
            workers,
            http,
        })
    }
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

    /// Ends every session, stops the workers and the HTTP threads.
    fn join(self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let mut result = Ok(());
        for worker in self.workers {
            match worker.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err(io::Error::other("a worker panicked")),
            }
        }
        for _ in &self.http {
            self.server.unblock();
        }
        for thread in self.http {
            let _ = thread.join();
        }
        result
    }
}
