//! Metric names, drop reasons and the Prometheus exposition.

use std::collections::HashSet;

use ufrag_common::frame::FrameError;
use ufrag_common::hint::HintError;
use ufrag_common::metrics::{
    CONTENT_TYPE, Direction, DropReason, Port, RelayMetrics, WorkerCounters,
};
use ufrag_common::stun::StunError;

#[test]
fn drop_reasons_have_unique_snake_case_labels_and_dense_indices() {
    let labels: HashSet<_> = DropReason::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(labels.len(), DropReason::COUNT);
    for (i, r) in DropReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
        assert!(
            r.label()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{}",
            r.label()
        );
    }
}

#[test]
fn parser_errors_map_to_their_own_reasons() {
    assert_eq!(
        DropReason::from(StunError::BadIntegrity),
        DropReason::StunBadIntegrity
    );
    assert_eq!(DropReason::from(HintError::BadMac), DropReason::HintBadMac);
    assert_eq!(
        DropReason::from(HintError::DestinationNotAllowed).label(),
        HintError::DestinationNotAllowed.as_str()
    );
    assert_eq!(
        DropReason::from(FrameError::NotAFrame).label(),
        FrameError::NotAFrame.as_str()
    );
    // Each STUN error's label is the drop label without its prefix.
    for e in [
        StunError::TooShort,
        StunError::BadFingerprint,
        StunError::MissingUsername,
    ] {
        assert_eq!(DropReason::from(e).label(), format!("stun_{}", e.as_str()));
    }
}

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
    local.cache_errors = 4;
    metrics.worker(1).publish(&local);
    metrics.set_ready(true);

    let text = metrics.render();
    assert!(CONTENT_TYPE.starts_with("text/plain; version=0.0.4"));
    for line in [
        "ufrag_relay_packets_total{worker=\"1\",direction=\"in\"} 2",
        "ufrag_relay_bytes_total{worker=\"1\",direction=\"in\"} 300",
        "ufrag_relay_packets_total{worker=\"1\",direction=\"out\"} 1",
        "ufrag_relay_packets_total{worker=\"0\",direction=\"in\"} 0",
        "ufrag_relay_drops_total{worker=\"1\",reason=\"hint_bad_mac\"} 1",
        "ufrag_relay_drops_total{worker=\"0\",reason=\"no_flow\"} 0",
        "ufrag_relay_dropped_bytes_total{worker=\"1\",reason=\"hint_bad_mac\"} 80",
        "ufrag_relay_received_packets_total{worker=\"1\",port=\"vip\"} 1",
        "ufrag_relay_received_bytes_total{worker=\"1\",port=\"vip\"} 380",
        "ufrag_relay_received_bytes_total{worker=\"1\",port=\"internal\"} 50",
        "ufrag_relay_flows_active{worker=\"1\"} 3",
        "ufrag_relay_cache_errors_total{worker=\"1\"} 4",
        "ufrag_relay_ready 1",
        "ufrag_relay_build_info{backend=\"mio\",version=\"0.1.0\"} 1",
        "# TYPE ufrag_relay_flows_active gauge",
        "# TYPE ufrag_relay_drops_total counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    let drop_series = text
        .lines()
        .filter(|l| l.starts_with("ufrag_relay_drops_total{"))
        .count();
    assert_eq!(drop_series, 2 * DropReason::COUNT);

    let totals = metrics.totals();
    assert_eq!(totals.packets, [2, 1]);
    assert_eq!(totals.drops_of(DropReason::HintBadMac), 1);
    assert_eq!(totals.drop_bytes[DropReason::HintBadMac.index()], 80);
}

#[test]
fn in_flight_is_what_was_received_and_not_yet_settled() {
    let mut c = WorkerCounters::default();
    assert_eq!(c.in_flight(), Some((0, 0)));
    c.received(Port::Vip, 100);
    c.received(Port::Internal, 60);
    assert_eq!(c.in_flight(), Some((2, 160)));
    c.forwarded(Direction::In, 100);
    c.dropped(DropReason::SendFailed, 60);
    assert_eq!(c.in_flight(), Some((0, 0)));
    c.forwarded(Direction::Out, 1);
    assert_eq!(c.in_flight(), None, "more settled than received is a bug");
}
