//! The hint key every test relay and transceiver gets: id 1, secret bytes 0..32.

use ufrag_common::hint::{HintKey, HintKeys};

/// The secret as hex.
pub const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
/// The value of `UFRAG_RELAY_HINT_KEYS` that carries it.
pub const KEYS: &str = "1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// The same key, parsed.
pub fn keys() -> HintKeys {
    let secret: Vec<u8> = (0u8..32).collect();
    HintKeys::new(HintKey::new(1, &secret).expect("a 32-byte secret"), None).expect("one key")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hex_and_the_env_value_name_the_same_secret() {
        assert_eq!(super::KEYS, format!("1:{}", super::KEY_HEX));
        let hex: String = (0u8..32).map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, super::KEY_HEX);
    }
}
