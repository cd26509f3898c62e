//! The reasons' labels and indices, and what the counters add up to.

use std::collections::HashSet;

use ufrag_common::frame::FrameError;
use ufrag_common::hint::HintError;
use ufrag_common::metrics::WorkerCounters;
use ufrag_common::reasons::{CacheError, Direction, DropReason, Port};
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
fn cache_error_reasons_have_unique_labels() {
    let labels: HashSet<_> = CacheError::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(labels.len(), CacheError::COUNT);
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
