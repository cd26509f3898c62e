//! The `/metrics` exposition both binaries serve: the text format a scraper asks for
//! ([`Exposition`]: OpenMetrics 1.0 when the `Accept` header names it, as Prometheus's
//! does, Prometheus text 0.0.4 otherwise) and the relay's counters written in it
//! ([`RelayMetrics::render`], a `prometheus-client` collector).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::metrics::{
    FAST_PATH_LEFT_LABELS, FastPathTotals, RelayMetrics, TcpWorkerMetrics, WorkerCounters,
};
use crate::reasons::{CacheError, Direction, DropReason, HttpRefusal, Port, TcpCloseReason};

/// The two text formats `/metrics` can be written in; both binaries pick one the same way
/// ([`Exposition::for_accept`]) and encode their registries with [`Exposition::encode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0 text: what Prometheus asks for first.
    OpenMetrics,
    /// The Prometheus text format 0.0.4: for a scraper that does not ask for
    /// OpenMetrics (curl, older agents).
    PrometheusText,
}

impl Exposition {
    /// The format a request's `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` (Prometheus's default header does, first), the 0.0.4
    /// text otherwise.
    pub fn for_accept(accept: Option<&str>) -> Self {
        let wants_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let mut params = range.split(';').map(str::trim);
                let media_type = params.next().unwrap_or("");
                let refused = params.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                media_type.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        if wants_openmetrics {
            Self::OpenMetrics
        } else {
            Self::PrometheusText
        }
    }

    /// The `Content-Type` of what [`Exposition::encode`] writes.
    pub const fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// `registry` in this format.
    pub fn encode(self, registry: &Registry) -> String {
        let mut out = String::with_capacity(16 * 1024);
        match self {
            Self::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry),
            Self::PrometheusText => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, registry)
            }
        }
        .expect("writing to a String cannot fail");
        out
    }
}

impl RelayMetrics {
    /// Every relay metric, written in `format`.
    pub fn render(self: &Arc<Self>, format: Exposition) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Arc::clone(self)));
        format.encode(&registry)
    }
}

type Scalar = fn(&WorkerCounters) -> u64;

const PORT_LABELS: [&str; 2] = [Port::Vip.label(), Port::Internal.label()];
const DIRECTION_LABELS: [&str; 2] = [Direction::In.label(), Direction::Out.label()];
const DROP_LABELS: [&str; DropReason::COUNT] = {
    let mut labels = [""; DropReason::COUNT];
    let mut i = 0;
    while i < DropReason::COUNT {
        labels[i] = DropReason::ALL[i].label();
        i += 1;
    }
    labels
};

/// Per-worker scalar metrics: name (without `_total`), help, type, accessor.
const WORKER_SCALARS: &[(&str, &str, MetricType, Scalar)] = &[
    (
        "ufrag_relay_flows_active",
        "Flows in the worker's table.",
        MetricType::Gauge,
        |c| c.flows_active,
    ),
    (
        "ufrag_relay_flows_created",
        "Flows created.",
        MetricType::Counter,
        |c| c.flows_created,
    ),
    (
        "ufrag_relay_flows_expired",
        "Flows removed after the idle timeout.",
        MetricType::Counter,
        |c| c.flows_expired,
    ),
    (
        "ufrag_relay_flows_refused",
        "New flows refused because the table was full of live flows.",
        MetricType::Counter,
        |c| c.flows_refused,
    ),
    (
        "ufrag_relay_flows_shed",
        "Flows that carried nothing but STUN, shed to make room in a full table.",
        MetricType::Counter,
        |c| c.flows_shed,
    ),
    (
        "ufrag_relay_cache_hits",
        "Route-cache lookups that restored a flow.",
        MetricType::Counter,
        |c| c.cache_hits,
    ),
    (
        "ufrag_relay_cache_misses",
        "Route-cache lookups that found no route.",
        MetricType::Counter,
        |c| c.cache_misses,
    ),
    (
        "ufrag_relay_shared_returns",
        "Return frames for flows another worker owns, sent by this one (relay-afxdp: the NIC puts a transceiver's replies on any queue).",
        MetricType::Counter,
        |c| c.shared_returns,
    ),
    (
        "ufrag_relay_flows_unshared",
        "Flows whose return path found no room in the shared return paths: only their owner sends their returns.",
        MetricType::Counter,
        |c| c.flows_unshared,
    ),
    (
        "ufrag_relay_flows_over_prefix_cap",
        "Flows that proved themselves while their client's prefix held its cap of proven flows (a sixteenth of the table, at least 64): they keep working, unproven (sheddable for a newcomer when the table is full, not cached).",
        MetricType::Counter,
        |c| c.flows_over_prefix_cap,
    ),
    (
        "ufrag_relay_replay_filter_overwrites",
        "First requests recorded in the replay filter over another transaction still within its window (both its buckets were full): that transaction could be replayed once more. Non-zero: the filter holds less than the relay admitted (a flood of authentic first requests, or 6+ workers at the default rate and hint age).",
        MetricType::Counter,
        |c| c.replay_overwrites,
    ),
    (
        "ufrag_relay_bundles_received",
        "Bundles of frames (frame version 2) received on the internal port and opened; their frames count as datagrams.",
        MetricType::Counter,
        |c| c.bundles_received,
    ),
    (
        "ufrag_relay_bundles_sent",
        "Bundles of frames sent on the internal port (--bundle-to); their frames count as datagrams.",
        MetricType::Counter,
        |c| c.bundles_sent,
    ),
    (
        "ufrag_relay_gso_sends",
        "Sends on the internal port that carried several datagrams as GSO segments (--internal-gso); each datagram counts as forwarded.",
        MetricType::Counter,
        |c| c.gso_sends,
    ),
];

fn encode_fast_path(
    encoder: &mut DescriptorEncoder<'_>,
    fast: &FastPathTotals,
) -> Result<(), core::fmt::Error> {
    let directions = [fast.forward, fast.back];
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_fast_path_forwarded_datagrams",
        "Datagrams the in-kernel fast path sent itself; direction in = to transceivers, out = to clients.",
        None,
        MetricType::Counter,
    )?;
    for (label, (packets, _)) in DIRECTION_LABELS.iter().zip(directions) {
        ConstCounter::new(packets).encode(e.encode_family(&[("direction", *label)])?)?;
    }
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_fast_path_forwarded_bytes",
        "Bytes the in-kernel fast path sent (whole frames, as sent).",
        None,
        MetricType::Counter,
    )?;
    for (label, (_, bytes)) in DIRECTION_LABELS.iter().zip(directions) {
        ConstCounter::new(bytes).encode(e.encode_family(&[("direction", *label)])?)?;
    }
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_fast_path_left_datagrams",
        "Datagrams to a VIP or internal address the fast path left to the workers, by reason.",
        None,
        MetricType::Counter,
    )?;
    for (label, count) in FAST_PATH_LEFT_LABELS.iter().zip(fast.left) {
        ConstCounter::new(count).encode(e.encode_family(&[("reason", *label)])?)?;
    }
    let e = encoder.encode_descriptor(
        "ufrag_relay_fast_path_flows_not_installed",
        "Proven flows the workers could not hand to the fast path (they carry them).",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(fast.flows_not_installed).encode(e)
}

fn encode_value(
    encoder: prometheus_client::encoding::MetricEncoder<'_>,
    kind: MetricType,
    value: u64,
) -> Result<(), core::fmt::Error> {
    match kind {
        MetricType::Gauge => {
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(encoder)
        }
        _ => ConstCounter::new(value).encode(encoder),
    }
}

/// The per-worker families (datagrams received, forwarded and dropped; flows; cache),
/// named `<prefix>_…`: `ufrag_relay` for UDP, `ufrag_relay_tcp` for ICE-TCP messages.
/// What one family of worker counters counts: UDP datagrams, or the RFC 4571 messages
/// of ICE-TCP connections.
#[derive(Clone, Copy)]
struct CountedUnit {
    /// The metric name prefix.
    prefix: &'static str,
    /// The unit in the names and help texts: `datagrams` or `messages`.
    unit: &'static str,
}

const UDP_DATAGRAMS: CountedUnit = CountedUnit {
    prefix: "ufrag_relay",
    unit: "datagrams",
};
const TCP_MESSAGES: CountedUnit = CountedUnit {
    prefix: "ufrag_relay_tcp",
    unit: "messages",
};

fn encode_worker_families(
    encoder: &mut DescriptorEncoder<'_>,
    counted: CountedUnit,
    snapshots: &[WorkerCounters],
) -> Result<(), core::fmt::Error> {
    let CountedUnit { prefix, unit } = counted;
    type PerLabel = fn(&WorkerCounters, usize) -> u64;
    let families: [(&str, &str, &str, &[&str], PerLabel); 6] = [
        (
            "received_{unit}",
            "{Unit} received; port vip = from clients, internal = from transceivers and relays.",
            "port",
            &PORT_LABELS,
            |c, i| c.received_datagrams[i],
        ),
        (
            "received_bytes",
            "Bytes received (UDP payload; frame headers included on the internal port).",
            "port",
            &PORT_LABELS,
            |c, i| c.received_bytes[i],
        ),
        (
            "forwarded_{unit}",
            "{Unit} forwarded; direction in = client to transceiver, out = back to the client.",
            "direction",
            &DIRECTION_LABELS,
            |c, i| c.forwarded_datagrams[i],
        ),
        (
            "forwarded_bytes",
            "Bytes of the {unit} forwarded, as received (frame headers included on frames).",
            "direction",
            &DIRECTION_LABELS,
            |c, i| c.forwarded_bytes[i],
        ),
        (
            "dropped_{unit}",
            "{Unit} dropped, by reason.",
            "reason",
            &DROP_LABELS,
            |c, i| c.dropped_datagrams[i],
        ),
        (
            "dropped_bytes",
            "Bytes of the {unit} dropped, as received, by reason.",
            "reason",
            &DROP_LABELS,
            |c, i| c.dropped_bytes[i],
        ),
    ];
    let capitalised = format!("{}{}", unit[..1].to_ascii_uppercase(), &unit[1..]);
    for (name, help, label, values, get) in families {
        let name = format!("{prefix}_{}", name.replace("{unit}", unit));
        let help = help.replace("{unit}", unit).replace("{Unit}", &capitalised);
        let mut e = encoder.encode_descriptor(&name, &help, None, MetricType::Counter)?;
        for (worker, s) in snapshots.iter().enumerate() {
            for (i, value) in values.iter().enumerate() {
                let labels = [("worker", worker.to_string()), (label, value.to_string())];
                ConstCounter::new(get(s, i)).encode(e.encode_family(&labels)?)?;
            }
        }
    }
    for (name, help, kind, get) in WORKER_SCALARS {
        let name = name.replacen("ufrag_relay", prefix, 1);
        let mut e = encoder.encode_descriptor(&name, help, None, *kind)?;
        for (worker, s) in snapshots.iter().enumerate() {
            let labels = [("worker", worker.to_string())];
            encode_value(e.encode_family(&labels)?, *kind, get(s))?;
        }
    }
    let name = format!("{prefix}_cache_errors");
    let mut e = encoder.encode_descriptor(
        &name,
        "Route-cache operations that failed, by reason.",
        None,
        MetricType::Counter,
    )?;
    for (worker, s) in snapshots.iter().enumerate() {
        for reason in CacheError::ALL {
            let labels = [
                ("worker", worker.to_string()),
                ("reason", reason.label().to_string()),
            ];
            ConstCounter::new(s.cache_errors[reason.index()]).encode(e.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Each worker's ICE-TCP connections: accepted, open, and closed by reason.
fn encode_tcp_connections(
    encoder: &mut DescriptorEncoder<'_>,
    tcp: &[TcpWorkerMetrics],
) -> Result<(), core::fmt::Error> {
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_tcp_connections_accepted",
        "ICE-TCP connections accepted (refused ones are counted as closed only).",
        None,
        MetricType::Counter,
    )?;
    for (worker, t) in tcp.iter().enumerate() {
        let labels = [("worker", worker.to_string())];
        ConstCounter::new(t.connections.accepted()).encode(e.encode_family(&labels)?)?;
    }
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_tcp_connections_active",
        "ICE-TCP connections open now.",
        None,
        MetricType::Gauge,
    )?;
    for (worker, t) in tcp.iter().enumerate() {
        let labels = [("worker", worker.to_string())];
        encode_value(
            e.encode_family(&labels)?,
            MetricType::Gauge,
            t.connections.active(),
        )?;
    }
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_tcp_connections_closed",
        "ICE-TCP connections closed or refused, by reason.",
        None,
        MetricType::Counter,
    )?;
    for (worker, t) in tcp.iter().enumerate() {
        for reason in TcpCloseReason::ALL {
            let labels = [
                ("worker", worker.to_string()),
                ("reason", reason.label().to_string()),
            ];
            ConstCounter::new(t.connections.closed_for(*reason))
                .encode(e.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

impl Collector for RelayMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), core::fmt::Error> {
        let snapshots: Vec<WorkerCounters> = self.workers.iter().map(|w| w.snapshot()).collect();

        let info = [
            ("backend", self.backend),
            ("version", env!("CARGO_PKG_VERSION")),
        ];
        let mut info_encoder = encoder.encode_descriptor(
            "ufrag_relay_build_info",
            "Which relay backend and version this is (always 1).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1i64).encode(info_encoder.encode_family(&info)?)?;

        let e = encoder.encode_descriptor(
            "ufrag_relay_ready",
            "1 when the relay accepts new flows; 0 while starting or draining.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(self.is_ready())).encode(e)?;

        let e = encoder.encode_descriptor(
            "ufrag_relay_worker_failures",
            "Workers that stopped on their own (a panic or an I/O error); readiness is off.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(self.worker_failures.load(Ordering::Relaxed)).encode(e)?;

        let mut e = encoder.encode_descriptor(
            "ufrag_relay_hint_key_info",
            "The current hint key (the first in the key file), by its id (always 1).",
            None,
            MetricType::Gauge,
        )?;
        let key_id = [("key_id", self.hint_key.load(Ordering::Relaxed).to_string())];
        ConstGauge::new(1i64).encode(e.encode_family(&key_id)?)?;
        let mut e = encoder.encode_descriptor(
            "ufrag_relay_hint_key_reloads",
            "Reloads of the hint key file (SIGHUP or a change of the file): taken, or refused \
             (its mode or syntax; the keys in use stay).",
            None,
            MetricType::Counter,
        )?;
        for (result, count) in ["taken", "refused"].iter().zip(&self.key_reloads) {
            let labels = [("result", *result)];
            ConstCounter::new(count.load(Ordering::Relaxed)).encode(e.encode_family(&labels)?)?;
        }
        let mut e = encoder.encode_descriptor(
            "ufrag_relay_http_refused",
            "Connections to /metrics, /healthz and /readyz closed at once (an address's \
             connection rate, no thread) or cut (an older one at an address's or the \
             server's cap, no request in time, or a bad one).",
            None,
            MetricType::Counter,
        )?;
        for (refusal, count) in HttpRefusal::ALL.iter().zip(&self.http_refused) {
            let labels = [("reason", refusal.label())];
            ConstCounter::new(count.load(Ordering::Relaxed)).encode(e.encode_family(&labels)?)?;
        }

        if let Some(fast) = self.fast_path() {
            encode_fast_path(&mut encoder, &fast)?;
        }

        encode_worker_families(&mut encoder, UDP_DATAGRAMS, &snapshots)?;
        if !self.tcp.is_empty() {
            let tcp: Vec<WorkerCounters> = self.tcp.iter().map(|t| t.messages.snapshot()).collect();
            encode_worker_families(&mut encoder, TCP_MESSAGES, &tcp)?;
            encode_tcp_connections(&mut encoder, &self.tcp)?;
        }
        Ok(())
    }
}
