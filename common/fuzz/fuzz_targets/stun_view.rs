//! Fuzz target: the STUN view and every accessor never panic on any datagram, and a
//! message that parses has a USERNAME inside its own bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ufrag_common::demux::DatagramKind;
use ufrag_common::stun::StunView;

fuzz_target!(|data: &[u8]| {
    let _ = DatagramKind::classify(data);
    if let Ok(view) = StunView::parse(data) {
        let _ = (view.method(), view.class(), view.is_binding_request());
        assert_eq!(view.as_bytes().len(), data.len());
        if let Some(username) = view.username() {
            assert!(username.len() <= data.len() - 20);
        }
        if let Ok(pair) = view.ufrags() {
            assert!(!pair.server.is_empty() && !pair.client.is_empty());
        }
        let _ = view.verify_fingerprint();
        let _ = view.verify_integrity(b"VOkJxbRl1RmTxUk/WvJxBt");
    }
});
