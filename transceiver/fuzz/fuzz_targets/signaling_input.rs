//! Fuzz target: what a client sends signaling, as the handlers see it after the transport
//! has bounded it: a POST body (checked, then answered by str0m exactly as a worker's
//! session would be) and a PATCH body (a trickle fragment). Nothing panics, and an
//! accepted offer always gets an SDP answer that routes back to this worker.
#![no_main]

use std::sync::OnceLock;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use ufrag_transceiver::session::Advertised;
use ufrag_transceiver::session::process_certificate;
use ufrag_transceiver::setup::SessionMint;
use ufrag_transceiver::signaling::{MAX_BODY_BYTES, check_offer, trickle_credentials};
use ufrag_common::hint::{HintKey, HintKeys};
use ufrag_common::runtime::keys::SharedKeys;

fn mint() -> &'static SessionMint {
    static MINT: OnceLock<SessionMint> = OnceLock::new();
    MINT.get_or_init(|| SessionMint {
        keys: SharedKeys::fixed(HintKeys::new(HintKey::new(1, &[7; 32]).unwrap(), None).unwrap()),
        cluster: 0,
        hint_target: "10.0.0.2:41000".parse().unwrap(),
        // Both candidates, so answers with an ICE-TCP candidate are fuzzed too.
        advertise: Advertised {
            udp: "203.0.113.10:3478".parse().unwrap(),
            tcp: Some("203.0.113.10:443".parse().unwrap()),
        },
        dtls_cert: process_certificate().unwrap(),
        tuning: ufrag_transceiver::session::SessionTuning::default(),
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_BODY_BYTES {
        return; // the transport answers 413 before any handler runs
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return; // the handlers answer 400
    };
    if let Some(creds) = trickle_credentials(text) {
        assert!(text.contains(&creds.ufrag) && text.contains(&creds.pass));
    }
    if let Ok(offer) = check_offer(text)
        && let Ok(new) = mint().session(1, offer, [1; 5], Instant::now())
    {
        assert!(new.answer.starts_with("v=0"), "{}", new.answer);
        assert!(new.answer.contains(&new.ufrag));
    }
});
