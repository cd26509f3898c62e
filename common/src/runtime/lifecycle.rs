//! Process lifecycle shared by both relays: logging setup, SIGTERM/SIGINT handling, the
//! drain sequence, and pinning the calling thread to a CPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::metrics::RelayMetrics;

/// Sets up structured logs on stderr; `RUST_LOG` filters (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal as _;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
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
    core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
}
