//! One hand-made malformed STUN vector per rejection reason, and what the view says of it.

use ufrag_common::stun::{self, MAX_ATTRIBUTES, StunClass, StunError, StunView, StunWriter, attr};

const TXID: [u8; 12] = *b"0123456789ab";

/// A valid Binding Request: USERNAME "srv:cli", MESSAGE-INTEGRITY under "pw", FINGERPRINT.
fn valid() -> Vec<u8> {
    let mut buf = [0u8; 256];
    let len = stun::write_binding_request(&mut buf, &TXID, b"srv", b"cli", b"pw").unwrap();
    buf[..len].to_vec()
}

/// Sets the header length field.
fn with_length(mut msg: Vec<u8>, length: u16) -> Vec<u8> {
    msg[2..4].copy_from_slice(&length.to_be_bytes());
    msg
}

/// A header (valid cookie) followed by `body`, with the length field set to `body.len()`.
fn message(body: &[u8]) -> Vec<u8> {
    let mut msg = vec![0x00, 0x01, 0, 0, 0x21, 0x12, 0xa4, 0x42];
    msg.extend_from_slice(&TXID);
    msg.extend_from_slice(body);
    let len = u16::try_from(body.len()).unwrap();
    with_length(msg, len)
}

fn parse(msg: &[u8]) -> Result<StunView<'_>, StunError> {
    StunView::parse(msg)
}

#[test]
fn the_valid_base_message_passes_every_check() {
    let msg = valid();
    let view = parse(&msg).unwrap();
    assert!(view.is_binding_request());
    assert_eq!(view.ufrags().unwrap().server, b"srv");
    assert_eq!(view.verify_integrity(b"pw"), Ok(()));
    assert_eq!(view.verify_fingerprint(), Ok(()));
}

#[test]
fn too_short_header() {
    assert_eq!(parse(&valid()[..19]).unwrap_err(), StunError::TooShort);
    assert_eq!(parse(&[]).unwrap_err(), StunError::TooShort);
}

#[test]
fn top_bits_set() {
    let mut msg = valid();
    msg[0] |= 0x80;
    assert_eq!(parse(&msg).unwrap_err(), StunError::NotStun);
    msg[0] = 0x40;
    assert_eq!(parse(&msg).unwrap_err(), StunError::NotStun);
}

#[test]
fn bad_magic_cookie() {
    let mut msg = valid();
    msg[4] ^= 1;
    assert_eq!(parse(&msg).unwrap_err(), StunError::BadMagicCookie);
}

#[test]
fn length_larger_or_smaller_than_the_datagram() {
    let msg = valid();
    let body = u16::try_from(msg.len() - 20).unwrap();
    assert_eq!(
        parse(&with_length(msg.clone(), body + 4)).unwrap_err(),
        StunError::LengthMismatch
    );
    assert_eq!(
        parse(&with_length(msg, body - 4)).unwrap_err(),
        StunError::LengthMismatch
    );
}

#[test]
fn length_not_a_multiple_of_four() {
    let msg = message(&[0, 0x22, 0, 2, b'h', b'i']);
    assert_eq!(parse(&msg).unwrap_err(), StunError::LengthNotAligned);
}

#[test]
fn attribute_header_or_value_overruns() {
    // A 4-byte attribute header claiming 8 bytes of value, with none following.
    assert_eq!(
        parse(&message(&[0x80, 0x22, 0, 8])).unwrap_err(),
        StunError::AttributeOverrun
    );
    // Padding missing: a 5-byte value needs 8 bytes on the wire.
    let msg = message(&[0x80, 0x22, 0, 5, 1, 2, 3, 4]);
    assert_eq!(parse(&msg).unwrap_err(), StunError::AttributeOverrun);
}

#[test]
fn too_many_attributes() {
    let body: Vec<u8> = (0..=MAX_ATTRIBUTES)
        .flat_map(|_| [0x80, 0x22, 0, 0])
        .collect();
    assert_eq!(
        parse(&message(&body)).unwrap_err(),
        StunError::TooManyAttributes
    );
    let body: Vec<u8> = (0..MAX_ATTRIBUTES)
        .flat_map(|_| [0x80, 0x22, 0, 0])
        .collect();
    assert!(parse(&message(&body)).is_ok(), "exactly the limit is fine");
}

#[test]
fn attribute_after_fingerprint() {
    let mut buf = [0u8; 128];
    let mut w = StunWriter::new(&mut buf, 1, StunClass::Request, &TXID).unwrap();
    w.fingerprint().unwrap();
    w.attribute(attr::SOFTWARE, b"late").unwrap();
    let len = w.finish();
    assert_eq!(
        parse(&buf[..len]).unwrap_err(),
        StunError::AttributeAfterFingerprint
    );
}

#[test]
fn integrity_of_the_wrong_size() {
    let msg = message(&[
        0, 0x08, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    assert_eq!(parse(&msg).unwrap_err(), StunError::BadIntegrityLength);
}

#[test]
fn fingerprint_of_the_wrong_size() {
    let msg = message(&[0x80, 0x28, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(parse(&msg).unwrap_err(), StunError::BadFingerprintLength);
}

#[test]
fn missing_username() {
    let msg = message(&[]);
    assert_eq!(
        parse(&msg).unwrap().ufrags(),
        Err(StunError::MissingUsername)
    );
}

#[test]
fn username_without_colon_or_with_an_empty_side() {
    for bad in [&b"nocolon"[..], b":cli", b"srv:", b":"] {
        let mut buf = [0u8; 64];
        let mut w = StunWriter::new(&mut buf, 1, StunClass::Request, &TXID).unwrap();
        w.attribute(attr::USERNAME, bad).unwrap();
        let len = w.finish();
        assert_eq!(
            parse(&buf[..len]).unwrap().ufrags(),
            Err(StunError::BadUsername),
            "{bad:?}"
        );
    }
}

#[test]
fn a_second_username_and_one_after_integrity_are_ignored() {
    let mut buf = [0u8; 128];
    let mut w = StunWriter::new(&mut buf, 1, StunClass::Request, &TXID).unwrap();
    w.attribute(attr::USERNAME, b"a:b").unwrap();
    w.attribute(attr::USERNAME, b"c:d").unwrap();
    w.integrity(b"pw").unwrap();
    w.attribute(attr::USERNAME, b"e:f").unwrap();
    let len = w.finish();
    let view = parse(&buf[..len]).unwrap();
    assert_eq!(view.username(), Some(&b"a:b"[..]));
    assert_eq!(view.verify_integrity(b"pw"), Ok(()));
}

#[test]
fn missing_integrity() {
    let msg = message(&[]);
    assert_eq!(
        parse(&msg).unwrap().verify_integrity(b"pw"),
        Err(StunError::MissingIntegrity)
    );
}

#[test]
fn integrity_fails_on_a_wrong_password_or_a_flipped_bit() {
    let msg = valid();
    assert_eq!(
        parse(&msg).unwrap().verify_integrity(b"pW"),
        Err(StunError::BadIntegrity)
    );
    let mut tampered = valid();
    tampered[28] ^= 0x01; // inside the USERNAME value
    let view = parse(&tampered).unwrap();
    assert_eq!(view.verify_integrity(b"pw"), Err(StunError::BadIntegrity));
    assert_eq!(view.verify_fingerprint(), Err(StunError::BadFingerprint));
}

#[test]
fn missing_fingerprint() {
    let msg = message(&[]);
    assert_eq!(
        parse(&msg).unwrap().verify_fingerprint(),
        Err(StunError::MissingFingerprint)
    );
}

#[test]
fn bad_fingerprint() {
    let mut msg = valid();
    let last = msg.len() - 1;
    msg[last] ^= 0xff;
    let view = parse(&msg).unwrap();
    assert_eq!(view.verify_fingerprint(), Err(StunError::BadFingerprint));
    assert_eq!(
        view.verify_integrity(b"pw"),
        Ok(()),
        "FINGERPRINT is outside the MAC"
    );
}

#[test]
fn every_error_has_a_distinct_label() {
    use std::collections::HashSet;
    let all = [
        StunError::TooShort,
        StunError::NotStun,
        StunError::BadMagicCookie,
        StunError::LengthMismatch,
        StunError::LengthNotAligned,
        StunError::AttributeOverrun,
        StunError::TooManyAttributes,
        StunError::AttributeAfterFingerprint,
        StunError::BadIntegrityLength,
        StunError::BadFingerprintLength,
        StunError::MissingUsername,
        StunError::BadUsername,
        StunError::MissingIntegrity,
        StunError::BadIntegrity,
        StunError::MissingFingerprint,
        StunError::BadFingerprint,
    ];
    let labels: HashSet<_> = all.iter().map(|e| e.as_str()).collect();
    assert_eq!(labels.len(), all.len());
}

#[test]
fn writer_reports_a_small_buffer() {
    let mut buf = [0u8; 40];
    assert_eq!(
        stun::write_binding_request(&mut buf, &TXID, b"srv", b"cli", b"pw"),
        Err(stun::WriteError::BufferTooSmall)
    );
    assert!(StunWriter::new(&mut [0u8; 19], 1, StunClass::Request, &TXID).is_err());
}
