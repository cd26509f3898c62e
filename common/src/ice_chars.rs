//! Fixed-size encoding of bytes as ICE characters (RFC 8445 §5.3, RFC 8839 §5.4):
//! `ice-char = ALPHA / DIGIT / "+" / "/"`.
//!
//! Those 64 characters are exactly the standard base64 alphabet (RFC 4648 §4), so three
//! bytes become four characters. Only whole groups are handled (callers pick sizes that are
//! multiples of three), so there is no padding and no partial group. No allocation.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Marks a byte that is not an ICE character.
const INVALID: u8 = 0xFF;

const DECODE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < 64 {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// True when `b` is an ICE character.
#[inline]
pub fn is_ice_char(b: u8) -> bool {
    DECODE[usize::from(b)] != INVALID
}

/// Encodes `input` (a multiple of 3 bytes) into `out` (exactly 4/3 as long).
///
/// # Panics
/// If the lengths do not match; callers pass fixed sizes.
pub fn encode(input: &[u8], out: &mut [u8]) {
    assert!(input.len().is_multiple_of(3) && out.len() == input.len() / 3 * 4);
    for (group, chars) in input.chunks_exact(3).zip(out.chunks_exact_mut(4)) {
        let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        chars[0] = ALPHABET[(n >> 18) as usize & 63];
        chars[1] = ALPHABET[(n >> 12) as usize & 63];
        chars[2] = ALPHABET[(n >> 6) as usize & 63];
        chars[3] = ALPHABET[n as usize & 63];
    }
}

/// Why ICE characters could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// `input` is not 4/3 the length of `out`.
    Length,
    /// A byte outside the ICE character set.
    Alphabet,
}

/// Decodes `input` (4/3 as long as `out`) into `out`. Never panics.
pub fn decode(input: &[u8], out: &mut [u8]) -> Result<(), DecodeError> {
    if !input.len().is_multiple_of(4) || out.len() != input.len() / 4 * 3 {
        return Err(DecodeError::Length);
    }
    let mut bad = 0u8;
    for (chars, group) in input.chunks_exact(4).zip(out.chunks_exact_mut(3)) {
        let mut n = 0u32;
        for &c in chars {
            let v = DECODE[usize::from(c)];
            bad |= v;
            n = n << 6 | u32::from(v & 63);
        }
        group.copy_from_slice(&n.to_be_bytes()[1..]);
    }
    // Any INVALID (0xFF) sets the top bits, which no valid 6-bit value has.
    if bad & 0xC0 != 0 {
        return Err(DecodeError::Alphabet);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use proptest::prelude::*;

    #[test]
    fn every_ice_char_and_nothing_else_is_accepted() {
        for b in 0u8..=255 {
            let expected = b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
            assert_eq!(is_ice_char(b), expected, "byte {b}");
        }
    }

    #[test]
    fn rejects_padding_and_bad_lengths() {
        let mut out = [0u8; 3];
        assert_eq!(decode(b"QUJD", &mut out), Ok(()));
        assert_eq!(&out, b"ABC");
        assert_eq!(decode(b"QUI=", &mut out), Err(DecodeError::Alphabet));
        assert_eq!(decode(b"QUJ", &mut out), Err(DecodeError::Length));
        assert_eq!(decode(b"QUJDQUJD", &mut out), Err(DecodeError::Length));
        assert_eq!(decode(b"QU-D", &mut out), Err(DecodeError::Alphabet));
    }

    proptest! {
        /// The fast table codec agrees with the `base64` crate (the slow, obvious reference).
        #[test]
        fn agrees_with_reference_base64(groups in proptest::collection::vec(any::<[u8; 3]>(), 0..20)) {
            let input: Vec<u8> = groups.concat();
            let mut chars = vec![0u8; input.len() / 3 * 4];
            encode(&input, &mut chars);
            prop_assert_eq!(&chars, &base64::engine::general_purpose::STANDARD.encode(&input).into_bytes());
            let mut back = vec![0u8; input.len()];
            prop_assert_eq!(decode(&chars, &mut back), Ok(()));
            prop_assert_eq!(back, input);
        }

        #[test]
        fn decode_never_panics(input in proptest::collection::vec(any::<u8>(), 0..64), out_len in 0usize..48) {
            let mut out = vec![0u8; out_len];
            let _ = decode(&input, &mut out);
        }
    }
}
