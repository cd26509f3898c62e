//! Transceiver metrics: sessions by state and end reason, datagrams, drops by reason,
//! echoed audio, and session setup time; Prometheus text via `prometheus-client`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// All transceiver metrics; cheap to share (`Arc`).
#[derive(Debug)]
pub struct TransceiverMetrics {
    registry: Registry,
    sessions_active: Gauge,
    sessions_created: Counter,
    sessions_ended: Family<Labels, Counter>,
    datagrams: Family<Labels, Counter>,
    drops: Family<Labels, Counter>,
    audio_echoed: Counter,
    ice_restarts: Counter,
    connect_seconds: Histogram,
    ready: AtomicBool,
}

impl Default for TransceiverMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl TransceiverMetrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("ufrag_transceiver");
        let sessions_active = Gauge::default();
        let sessions_created = Counter::default();
        let sessions_ended = Family::<Labels, Counter>::default();
        let datagrams = Family::<Labels, Counter>::default();
        let drops = Family::<Labels, Counter>::default();
        let audio_echoed = Counter::default();
        let ice_restarts = Counter::default();
        let connect_seconds =
            Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]);
        registry.register(
            "sessions_active",
            "Sessions held by the workers.",
            sessions_active.clone(),
        );
        registry.register(
            "sessions_created",
            "Sessions created by signaling.",
            sessions_created.clone(),
        );
        registry.register(
            "sessions_ended",
            "Sessions ended, by reason.",
            sessions_ended.clone(),
        );
        registry.register("datagrams", "Datagrams, by direction.", datagrams.clone());
        registry.register("drops", "Datagrams dropped, by reason.", drops.clone());
        registry.register(
            "audio_echoed",
            "Audio packets the model sent back.",
            audio_echoed.clone(),
        );
        registry.register(
            "ice_restarts",
            "ICE restarts (new server ufrag, same worker).",
            ice_restarts.clone(),
        );
        registry.register(
            "connect_seconds",
            "Time from signaling to ICE+DTLS connected.",
            connect_seconds.clone(),
        );
        TransceiverMetrics {
            registry,
            sessions_active,
            sessions_created,
            sessions_ended,
            datagrams,
            drops,
            audio_echoed,
            ice_restarts,
            connect_seconds,
            ready: AtomicBool::new(false),
        }
    }

    /// A session was created.
    pub fn session_created(&self) {
        self.sessions_created.inc();
        self.sessions_active.inc();
    }

    /// A session connected after `elapsed`.
    pub fn session_connected(&self, elapsed: Duration) {
        self.connect_seconds.observe(elapsed.as_secs_f64());
    }

    /// A session ended.
    pub fn session_ended(&self, reason: &'static str) {
        self.sessions_active.dec();
        self.sessions_ended
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }

    /// A datagram arrived.
    pub fn datagram_in(&self) {
        self.datagrams
            .get_or_create(&vec![("direction", "in".to_string())])
            .inc();
    }

    /// A datagram left.
    pub fn datagram_out(&self) {
        self.datagrams
            .get_or_create(&vec![("direction", "out".to_string())])
            .inc();
    }

    /// A datagram was dropped.
    pub fn dropped(&self, reason: &str) {
        self.drops
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }

    /// The model sent an audio packet back.
    pub fn audio_echoed(&self) {
        self.audio_echoed.inc();
    }

    /// An ICE restart was applied.
    pub fn ice_restart(&self) {
        self.ice_restarts.inc();
    }

    /// Readiness.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Readiness.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
