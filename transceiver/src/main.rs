//! The `transceiver` binary: workers, signaling HTTP, echo model, graceful SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;
use transceiver::metrics::TransceiverMetrics;
use transceiver::model::EchoModel;
use transceiver::signaling::Signaling;
use transceiver::worker::{Worker, WorkerConfig};
use ufrag_common::config::{HINT_KEYS_ENV, load_hint_keys};
use ufrag_common::runtime::lifecycle::{TerminationSignal, init_logging};

/// WebRTC sessions behind the relay: WHIP signaling, str0m, and the echo model.
///
/// POST an SDP offer (Content-Type: application/sdp) to /v1/sessions; the answer
/// advertises one ICE candidate, the relay's VIP (--advertise), with a server ufrag that
/// routes to this worker. DELETE the Location to end the session. GET / is a demo page.
///
/// Hint keys: --hint-keys-file or UFRAG_RELAY_HINT_KEYS (the relay's keys). Bearer token
/// (optional): UFRAG_TRANSCEIVER_TOKEN.
#[derive(Debug, Parser)]
#[command(name = "transceiver", version, verbatim_doc_comment)]
struct Cli {
    /// Signaling, metrics and the demo page listen here.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "IP:PORT")]
    http_addr: SocketAddr,
    /// Worker 0's UDP socket; worker i binds PORT + i (port 0: any).
    #[arg(long, value_name = "IP:PORT")]
    bind: SocketAddr,
    /// Number of workers.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// The relay VIP:port to advertise as the only candidate.
    #[arg(long, value_name = "IP:PORT", required_unless_present = "direct")]
    advertise: Option<SocketAddr>,
    /// Talk to clients directly (advertise the worker's own address), for comparison.
    #[arg(long)]
    direct: bool,
    /// A network relays send frames from (repeat).
    #[arg(long = "allow-relay-net", value_name = "CIDR")]
    allowed_relays: Vec<IpNet>,
    /// Hint keys file, `<id>:<hex>` per line, current first (mode 0600).
    #[arg(long, value_name = "FILE")]
    hint_keys_file: Option<PathBuf>,
    /// Cluster id written into hints.
    #[arg(long, default_value_t = 0)]
    cluster_id: u16,
    /// Sessions per worker; beyond, signaling answers 503.
    #[arg(long, default_value_t = 1000)]
    max_sessions_per_worker: usize,
    /// Echo delay (e.g. 200ms).
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    echo_delay: Duration,
    /// A session not connected after this long ends.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    connect_timeout: Duration,
    /// A session that receives nothing for this long ends (ICE consent).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    idle_timeout: Duration,
    /// On SIGTERM: refuse new sessions, let existing ones run this long.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    drain_time: Duration,
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let keys = match load_hint_keys(
        cli.hint_keys_file.as_deref(),
        std::env::var(HINT_KEYS_ENV).ok().as_deref(),
    ) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("transceiver: {e}");
            return ExitCode::from(2);
        }
    };
    if !cli.direct && cli.allowed_relays.is_empty() {
        eprintln!(
            "transceiver: invalid configuration: `allow_relay_net`: at least one network is required in relay mode"
        );
        return ExitCode::from(2);
    }
    if cli.workers == 0 {
        eprintln!("transceiver: invalid configuration: `workers`: must be at least 1");
        return ExitCode::from(2);
    }
    let metrics = Arc::new(TransceiverMetrics::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = vec![];
    let mut threads = vec![];
    for index in 0..cli.workers {
        let port = if cli.bind.port() == 0 {
            0
        } else {
            cli.bind.port() + index as u16
        };
        let cfg = WorkerConfig {
            index,
            bind: SocketAddr::new(cli.bind.ip(), port),
            advertise: cli.advertise.unwrap_or(cli.bind),
            direct: cli.direct,
            allowed_relays: cli.allowed_relays.clone(),
            keys: keys.clone(),
            cluster: cli.cluster_id,
            max_sessions: cli.max_sessions_per_worker,
            connect_timeout: cli.connect_timeout,
            idle_timeout: cli.idle_timeout,
        };
        let (worker, handle) = match Worker::bind(
            cfg,
            Box::new(EchoModel::new(cli.echo_delay)),
            Arc::clone(&metrics),
        ) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("transceiver: binding worker {index}: {e}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(worker = index, addr = %handle.addr, "worker bound");
        handles.push(handle);
        let stop = Arc::clone(&stop);
        threads.push(
            std::thread::Builder::new()
                .name(format!("xcvr-w{index}"))
                .spawn(move || worker.run(&stop))
                .expect("spawn worker"),
        );
    }
    let signaling = Arc::new(Signaling::new(
        handles,
        std::env::var("UFRAG_TRANSCEIVER_TOKEN").ok(),
        Arc::clone(&metrics),
    ));
    let server = match tiny_http::Server::http(cli.http_addr) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("transceiver: http_addr {}: {e}", cli.http_addr);
            return ExitCode::FAILURE;
        }
    };
    let mut http_threads = vec![];
    for i in 0..4 {
        let (server, signaling) = (Arc::clone(&server), Arc::clone(&signaling));
        http_threads.push(
            std::thread::Builder::new()
                .name(format!("http-{i}"))
                .spawn(move || {
                    while let Ok(mut request) = server.recv() {
                        let response = signaling.handle(&mut request);
                        let _ = request.respond(response);
                    }
                })
                .expect("spawn http"),
        );
    }
    let signal = match TerminationSignal::register() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("transceiver: signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    metrics.set_ready(true);
    tracing::info!(http = %cli.http_addr, direct = cli.direct, "transceiver ready");
    signal.wait();
    metrics.set_ready(false);
    signaling.stop_accepting();
    tracing::info!(
        drain_ms = cli.drain_time.as_millis() as u64,
        "draining: no new sessions"
    );
    std::thread::sleep(cli.drain_time);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    for _ in &http_threads {
        server.unblock();
    }
    for t in http_threads {
        let _ = t.join();
    }
    tracing::info!("transceiver stopped");
    ExitCode::SUCCESS
}
