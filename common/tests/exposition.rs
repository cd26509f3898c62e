//! Both exposition formats of `/metrics`: every series per worker, the ICE-TCP families,
//! and the format a scraper's `Accept` header picks.

use ufrag_common::hint::HintError;
use ufrag_common::metrics::{RelayMetrics, WorkerCounters};
use ufrag_common::reasons::{CacheError, Direction, DropReason, Port};
use ufrag_common::runtime::exposition::Exposition;

#[test]
fn exposition_has_every_series_per_worker_after_publish() {
    let metrics = RelayMetrics::new("mio", 2);
    let mut local = WorkerCounters::default();
    local.forwarded(Direction::In, 200);
    local.forwarded(Direction::In, 100);
    local.forwarded(Direction::Out, 50);
    local.dropped(HintError::BadMac, 80);
    local.received(Port::Vip, 380);
    local.received(Port::Internal, 50);
    local.flows_active = 3;
    local.cache_failed(CacheError::Timeout, 4);
    local.cache_failed(CacheError::RouteNotAllowed, 1);
    metrics.worker(1).publish(&local);
    metrics.set_ready(true);
    metrics.hint_key_in_use(7);

    let samples = [
        "ufrag_relay_forwarded_datagrams_total{worker=\"1\",direction=\"in\"} 2",
        "ufrag_relay_forwarded_bytes_total{worker=\"1\",direction=\"in\"} 300",
        "ufrag_relay_forwarded_datagrams_total{worker=\"1\",direction=\"out\"} 1",
        "ufrag_relay_forwarded_datagrams_total{worker=\"0\",direction=\"in\"} 0",
        "ufrag_relay_dropped_datagrams_total{worker=\"1\",reason=\"hint_bad_mac\"} 1",
        "ufrag_relay_dropped_datagrams_total{worker=\"0\",reason=\"no_flow\"} 0",
        "ufrag_relay_dropped_bytes_total{worker=\"1\",reason=\"hint_bad_mac\"} 80",
        "ufrag_relay_received_datagrams_total{worker=\"1\",port=\"vip\"} 1",
        "ufrag_relay_received_bytes_total{worker=\"1\",port=\"vip\"} 380",
        "ufrag_relay_received_bytes_total{worker=\"1\",port=\"internal\"} 50",
        "ufrag_relay_flows_active{worker=\"1\"} 3",
        "ufrag_relay_cache_errors_total{worker=\"1\",reason=\"timeout\"} 4",
        "ufrag_relay_cache_errors_total{worker=\"1\",reason=\"route_not_allowed\"} 1",
        "ufrag_relay_cache_errors_total{worker=\"0\",reason=\"unreachable\"} 0",
        "ufrag_relay_hint_key_info{key_id=\"7\"} 1",
        "ufrag_relay_ready 1",
        "ufrag_relay_build_info{backend=\"mio\",version=\"0.1.0\"} 1",
    ];
    // The same samples in both formats; they differ in the counters' TYPE lines and the
    // OpenMetrics end marker.
    for (format, type_lines, last_line) in [
        (
            Exposition::PrometheusText,
            [
                "# TYPE ufrag_relay_flows_active gauge",
                "# TYPE ufrag_relay_dropped_datagrams_total counter",
            ],
            None,
        ),
        (
            Exposition::OpenMetrics,
            [
                "# TYPE ufrag_relay_flows_active gauge",
                "# TYPE ufrag_relay_dropped_datagrams counter",
            ],
            Some("# EOF"),
        ),
    ] {
        let text = metrics.render(format);
        for line in samples.iter().chain(&type_lines) {
            assert!(
                text.lines().any(|l| l == *line),
                "{format:?}: missing {line:?} in\n{text}"
            );
        }
        assert_eq!(text.lines().last() == Some("# EOF"), last_line.is_some());
        let drop_series = text
            .lines()
            .filter(|l| l.starts_with("ufrag_relay_dropped_datagrams_total{"))
            .count();
        assert_eq!(drop_series, 2 * DropReason::COUNT);
        let cache_error_series = text
            .lines()
            .filter(|l| l.starts_with("ufrag_relay_cache_errors_total{"))
            .count();
        assert_eq!(cache_error_series, 2 * CacheError::COUNT);
        for old in [
            "ufrag_relay_packets_total",
            "ufrag_relay_drops_total",
            "ufrag_relay_received_packets_total",
            "ufrag_relay_hint_key_current",
        ] {
            assert!(
                !text.contains(old),
                "{format:?}: the old name {old} is back"
            );
        }
    }

    let totals = metrics.totals();
    assert_eq!(totals.forwarded_datagrams, [2, 1]);
    assert_eq!(totals.drops_of(DropReason::HintBadMac), 1);
    assert_eq!(totals.dropped_bytes[DropReason::HintBadMac.index()], 80);
    assert_eq!(totals.cache_errors_total(), 5);
}

#[test]
fn tcp_families_count_messages_not_datagrams() {
    let metrics = RelayMetrics::serving("mio", 1, true);
    let mut local = WorkerCounters::default();
    local.received(Port::Vip, 90);
    local.forwarded(Direction::In, 90);
    let tcp = metrics.tcp_worker(0).expect("ICE-TCP is on");
    tcp.messages.publish(&local);
    let text = metrics.render(Exposition::OpenMetrics);
    for line in [
        "ufrag_relay_tcp_received_messages_total{worker=\"0\",port=\"vip\"} 1",
        "ufrag_relay_tcp_forwarded_messages_total{worker=\"0\",direction=\"in\"} 1",
        "ufrag_relay_tcp_forwarded_bytes_total{worker=\"0\",direction=\"in\"} 90",
        "ufrag_relay_tcp_dropped_messages_total{worker=\"0\",reason=\"no_flow\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(!text.contains("ufrag_relay_tcp_received_datagrams"));
}

#[test]
fn the_format_follows_the_scrapers_accept_header() {
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                      version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    for (accept, format) in [
        (Some(prometheus), Exposition::OpenMetrics),
        (
            Some("Application/OpenMetrics-Text; version=1.0.0"),
            Exposition::OpenMetrics,
        ),
        (Some("text/plain;version=0.0.4"), Exposition::PrometheusText),
        (Some("*/*"), Exposition::PrometheusText),
        (
            Some("application/openmetrics-text;q=0, text/plain"),
            Exposition::PrometheusText,
        ),
        (Some(""), Exposition::PrometheusText),
        (None, Exposition::PrometheusText),
    ] {
        assert_eq!(Exposition::for_accept(accept), format, "{accept:?}");
    }
    assert!(
        Exposition::OpenMetrics
            .content_type()
            .starts_with("application/openmetrics-text; version=1.0.0")
    );
    assert!(
        Exposition::PrometheusText
            .content_type()
            .starts_with("text/plain; version=0.0.4")
    );
}
