//! Fuzz target: hint verification and password derivation never panic, and a hint that
//! verifies decodes the same way twice (no hidden state).
#![no_main]

use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;
use ufrag_common::hint::{HintKey, HintKeys};

fuzz_target!(|data: &[u8]| {
    let keys = HintKeys::new(
        HintKey::new(1, &[0x42; 32]).unwrap(),
        Some(HintKey::new(2, &[0x24; 32]).unwrap()),
    )
    .unwrap();
    let any: [IpNet; 2] = ["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
    if let Ok(verified) = keys.verify(data, &any) {
        let again = keys.verify(data, &any).unwrap();
        assert_eq!(again, verified);
    }
    let _ = keys.ice_password(1, data);
});
