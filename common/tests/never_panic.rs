//! Arbitrary bytes never panic a parser: STUN view (with every accessor), frame header,
//! hint verification, classification. Mutations of a valid Binding Request too, so the
//! deep parts of the attribute walk are reached.

use ipnet::IpNet;
use proptest::prelude::*;
use ufrag_common::demux::DatagramKind;
use ufrag_common::frame::FrameHeader;
use ufrag_common::hint::{HintKey, HintKeys};
use ufrag_common::stun::{self, StunView};

fn exercise(bytes: &[u8]) {
    let _ = DatagramKind::classify(bytes);
    let _ = FrameHeader::parse(bytes);
    if let Ok(view) = StunView::parse(bytes) {
        let _ = (
            view.method(),
            view.class(),
            view.transaction_id(),
            view.username(),
        );
        let _ = view.ufrags();
        let _ = view.verify_fingerprint();
        let _ = view.verify_integrity(b"pw");
        if let Ok(pair) = view.ufrags() {
            let keys = HintKeys::new(HintKey::new(1, &[7; 32]).unwrap(), None).unwrap();
            let any: Vec<IpNet> = vec!["0.0.0.0/0".parse().unwrap()];
            let _ = keys.verify(pair.server, &any);
        }
    }
}

fn valid_request() -> Vec<u8> {
    let mut buf = [0u8; 256];
    let n = stun::write_binding_request(&mut buf, &[1; 12], b"server", b"client", b"pw").unwrap();
    buf[..n].to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        exercise(&bytes);
    }

    #[test]
    fn mutated_binding_requests(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>()) {
        let mut msg = valid_request();
        for (at, value) in flips {
            let i = at.index(msg.len());
            msg[i] = value;
        }
        exercise(&msg);
        let keep = cut.index(msg.len() + 1);
        exercise(&msg[..keep]);
    }
}
