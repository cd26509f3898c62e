//! The routing hint: round trips, one vector per decode error, key rotation, and the
//! derived ICE password.

use core::net::SocketAddr;

use ipnet::IpNet;
use proptest::prelude::*;
use ufrag_common::hint::{
    HINT_LEN_V4, HINT_LEN_V6, HintError, HintKey, HintKeys, KeyError, PASSWORD_LEN, RoutingHint,
    key_id_of,
};
use ufrag_common::ice_chars::is_ice_char;
use ufrag_common::stun::{self, StunView};

const SECRET_A: &[u8] = b"0123456789abcdef0123456789abcdef";
const SECRET_B: &[u8] = b"fedcba9876543210fedcba9876543210";
/// A minted time (2026-05-28, Unix seconds).
const MINTED: u32 = 1_780_000_000;

fn keys_a() -> HintKeys {
    HintKeys::new(HintKey::new(1, SECRET_A).unwrap(), None).unwrap()
}

fn allowed() -> Vec<IpNet> {
    vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()]
}

fn hint(addr: &str) -> RoutingHint {
    RoutingHint {
        cluster: 7,
        transceiver: addr.parse().unwrap(),
    }
}

#[test]
fn ipv4_hint_round_trips_and_is_a_valid_ice_ufrag() {
    let keys = keys_a();
    let h = hint("10.1.2.3:40000");
    let ufrag = keys.encode(&h, MINTED, [1, 2, 3, 4, 5]);
    assert_eq!(ufrag.as_bytes().len(), HINT_LEN_V4);
    assert!(ufrag.as_bytes().iter().all(|&b| is_ice_char(b)));
    let verified = keys.verify(ufrag.as_bytes(), &allowed()).unwrap();
    assert_eq!(verified.hint, h);
    assert_eq!(verified.key_id, 1);
}

#[test]
fn the_key_id_reads_from_a_ufrag_of_either_family_and_nothing_else_reads_as_one() {
    let keys = HintKeys::new(HintKey::new(42, SECRET_B).unwrap(), None).unwrap();
    for addr in ["10.1.2.3:40000", "[fd00::1:2]:5000"] {
        let ufrag = keys.encode(&hint(addr), MINTED, [3; 5]);
        assert_eq!(key_id_of(ufrag.as_bytes()), Some(42), "{addr}");
    }
    assert_eq!(key_id_of(b"abcd"), None, "too short for a hint");
    assert_eq!(key_id_of(&[b'!'; HINT_LEN_V4]), None, "not ICE characters");
}

#[test]
fn ipv6_hint_round_trips() {
    let keys = keys_a();
    let h = hint("[fd00::1:2]:5000");
    let ufrag = keys.encode(&h, MINTED, [9; 5]);
    assert_eq!(ufrag.as_bytes().len(), HINT_LEN_V6);
    assert_eq!(keys.verify(ufrag.as_bytes(), &allowed()).unwrap().hint, h);
}

#[test]
fn ipv4_mapped_ipv6_is_written_as_ipv4() {
    let keys = keys_a();
    let ufrag = keys.encode(&hint("[::ffff:10.0.0.9]:1234"), MINTED, [0; 5]);
    assert_eq!(ufrag.as_bytes().len(), HINT_LEN_V4);
    let got = keys.verify(ufrag.as_bytes(), &allowed()).unwrap().hint;
    assert_eq!(
        got.transceiver,
        "10.0.0.9:1234".parse::<SocketAddr>().unwrap()
    );
}

#[test]
fn different_random_bits_give_different_ufrags_for_the_same_destination() {
    let keys = keys_a();
    let a = keys.encode(&hint("10.0.0.1:1"), MINTED, [0; 5]);
    let b = keys.encode(&hint("10.0.0.1:1"), MINTED, [0, 0, 0, 0, 1]);
    assert_ne!(a, b);
}

/// The layout and key derivation, recomputed independently from the module's spec with
/// the `base64`, `hmac` and `sha2` crates, so that relays and transceivers built from
/// different versions of this code keep agreeing.
#[test]
fn layout_and_derivation_match_the_spec() {
    use base64::Engine as _;
    use hmac::{KeyInit, Mac};
    type HmacSha256 = hmac::Hmac<sha2::Sha256>;
    fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
        let mut m = HmacSha256::new_from_slice(key).unwrap();
        m.update(data);
        m.finalize().into_bytes().to_vec()
    }

    let keys = keys_a();
    let ufrag = keys.encode(&hint("10.1.2.3:40000"), MINTED, [1, 2, 3, 4, 5]);
    let raw = base64::engine::general_purpose::STANDARD
        .decode(ufrag.as_str())
        .unwrap();
    let [m0, m1, m2, m3] = MINTED.to_be_bytes();
    let body = [
        0x20, 0x01, 0x00, 0x07, 10, 1, 2, 3, 0x9c, 0x40, m0, m1, m2, m3, 1, 2, 3, 4, 5,
    ];
    assert_eq!(
        &raw[..19],
        &body,
        "version|flags, key id, cluster, ip, port, minted, random"
    );
    let mac_key = hmac(SECRET_A, b"ufrag-relay/v1/hint-mac");
    assert_eq!(
        &raw[19..],
        &hmac(&mac_key, &body)[..8],
        "truncated HMAC-SHA256"
    );

    let pwd_key = hmac(SECRET_A, b"ufrag-relay/v1/ice-pwd");
    let expected =
        base64::engine::general_purpose::STANDARD.encode(&hmac(&pwd_key, ufrag.as_bytes())[..18]);
    assert_eq!(
        keys.ice_password(1, ufrag.as_bytes()).unwrap().as_str(),
        expected
    );
}

#[test]
fn bad_length() {
    let keys = keys_a();
    let ufrag = keys.encode(&hint("10.1.2.3:40000"), MINTED, [0; 5]);
    let s = ufrag.as_bytes();
    assert_eq!(keys.verify(&s[..35], &allowed()), Err(HintError::BadLength));
    assert_eq!(keys.verify(b"evtj", &allowed()), Err(HintError::BadLength));
    assert_eq!(keys.verify(b"", &allowed()), Err(HintError::BadLength));
    // A 52-character ufrag whose flags say IPv4.
    let mut long = s.to_vec();
    long.extend_from_slice(&s[..16]);
    assert_eq!(keys.verify(&long, &allowed()), Err(HintError::BadLength));
}

#[test]
fn bad_alphabet() {
    let keys = keys_a();
    let mut s = keys
        .encode(&hint("10.1.2.3:40000"), MINTED, [0; 5])
        .as_bytes()
        .to_vec();
    s[10] = b'-';
    assert_eq!(keys.verify(&s, &allowed()), Err(HintError::BadAlphabet));
    s[10] = b'=';
    assert_eq!(keys.verify(&s, &allowed()), Err(HintError::BadAlphabet));
}

#[test]
fn unknown_version() {
    let keys = keys_a();
    let mut s = keys
        .encode(&hint("10.1.2.3:40000"), MINTED, [0; 5])
        .as_bytes()
        .to_vec();
    // First char encodes the top 6 bits of byte 0 (version nibble + 2 flag bits).
    assert_eq!(s[0], b'I', "0b001000: version 2");
    s[0] = b'E'; // 0b000100 → version 1, which carried no minted time
    assert_eq!(keys.verify(&s, &allowed()), Err(HintError::UnknownVersion));
    s[0] = b'M'; // 0b001100 → version 3
    assert_eq!(keys.verify(&s, &allowed()), Err(HintError::UnknownVersion));
    s[0] = b'I';
    s[1] = b'g'; // 0b100000: flag bit 1 (reserved) set in byte 0, key id nibble unchanged
    assert_eq!(keys.verify(&s, &allowed()), Err(HintError::UnknownVersion));
}

#[test]
fn unknown_key_id() {
    let other = HintKeys::new(HintKey::new(9, SECRET_A).unwrap(), None).unwrap();
    let ufrag = other.encode(&hint("10.1.2.3:40000"), MINTED, [0; 5]);
    assert_eq!(
        keys_a().verify(ufrag.as_bytes(), &allowed()),
        Err(HintError::UnknownKeyId)
    );
}

#[test]
fn bad_mac_from_a_wrong_secret_or_a_changed_field() {
    let forged = HintKeys::new(HintKey::new(1, SECRET_B).unwrap(), None).unwrap();
    let ufrag = forged.encode(&hint("10.1.2.3:40000"), MINTED, [0; 5]);
    assert_eq!(
        keys_a().verify(ufrag.as_bytes(), &allowed()),
        Err(HintError::BadMac)
    );

    // Change the port character by character: every change breaks the MAC.
    let good = keys_a().encode(&hint("10.1.2.3:40000"), MINTED, [0; 5]);
    for i in 4..24 {
        let mut s = good.as_bytes().to_vec();
        s[i] = if s[i] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            keys_a().verify(&s, &allowed()),
            Err(HintError::BadMac),
            "char {i}"
        );
    }
}

#[test]
fn destination_outside_allowed_networks() {
    let keys = keys_a();
    let ufrag = keys.encode(&hint("192.168.1.1:40000"), MINTED, [0; 5]);
    assert_eq!(
        keys.verify(ufrag.as_bytes(), &allowed()),
        Err(HintError::DestinationNotAllowed)
    );
    assert_eq!(
        keys.verify(ufrag.as_bytes(), &[]),
        Err(HintError::DestinationNotAllowed)
    );
}

#[test]
fn rotation_accepts_current_and_previous_and_encodes_with_current() {
    let old = HintKeys::new(HintKey::new(1, SECRET_A).unwrap(), None).unwrap();
    let rotated = HintKeys::new(
        HintKey::new(2, SECRET_B).unwrap(),
        Some(HintKey::new(1, SECRET_A).unwrap()),
    )
    .unwrap();
    let old_ufrag = old.encode(&hint("10.1.2.3:40000"), MINTED, [0; 5]);
    let new_ufrag = rotated.encode(&hint("10.1.2.3:40000"), MINTED, [0; 5]);
    assert_eq!(
        rotated
            .verify(old_ufrag.as_bytes(), &allowed())
            .unwrap()
            .key_id,
        1
    );
    assert_eq!(
        rotated
            .verify(new_ufrag.as_bytes(), &allowed())
            .unwrap()
            .key_id,
        2
    );
    assert_eq!(
        old.verify(new_ufrag.as_bytes(), &allowed()),
        Err(HintError::UnknownKeyId)
    );
    // The password of an old-key session is the same on both sides of the rotation.
    assert_eq!(
        old.ice_password(1, old_ufrag.as_bytes()),
        rotated.ice_password(1, old_ufrag.as_bytes())
    );
}

#[test]
fn password_is_deterministic_ice_chars_and_key_dependent() {
    let keys = keys_a();
    let ufrag = keys.encode(&hint("10.1.2.3:40000"), MINTED, [0; 5]);
    let p1 = keys.ice_password(1, ufrag.as_bytes()).unwrap();
    let p2 = keys.ice_password(1, ufrag.as_bytes()).unwrap();
    assert_eq!(p1, p2);
    assert_eq!(p1.as_bytes().len(), PASSWORD_LEN);
    assert!(p1.as_bytes().iter().all(|&b| is_ice_char(b)));
    let other_ufrag = keys.encode(&hint("10.1.2.3:40000"), MINTED, [1; 5]);
    assert_ne!(keys.ice_password(1, other_ufrag.as_bytes()).unwrap(), p1);
    assert_eq!(keys.ice_password(3, ufrag.as_bytes()), None);
    let b = HintKeys::new(HintKey::new(1, SECRET_B).unwrap(), None).unwrap();
    assert_ne!(b.ice_password(1, ufrag.as_bytes()).unwrap(), p1);
}

/// The whole stateless check a relay does on a first Binding Request.
#[test]
fn relay_can_verify_integrity_of_a_binding_request_with_no_state() {
    let keys = keys_a();
    let ufrag = keys.encode(&hint("10.1.2.3:40000"), MINTED, [7; 5]);
    let password = keys.ice_password(1, ufrag.as_bytes()).unwrap();
    let mut buf = [0u8; 256];
    let len = stun::write_binding_request(
        &mut buf,
        &[3; 12],
        ufrag.as_bytes(),
        b"cli1",
        password.as_bytes(),
    )
    .unwrap();

    let view = StunView::parse(&buf[..len]).unwrap();
    let server = view.ufrags().unwrap().server;
    let verified = keys.verify(server, &allowed()).unwrap();
    let derived = keys.ice_password(verified.key_id, server).unwrap();
    assert_eq!(view.verify_integrity(derived.as_bytes()), Ok(()));
}

#[test]
fn key_loading_errors() {
    assert!(matches!(
        HintKey::new(1, b"short"),
        Err(KeyError::SecretLength { id: 1, len: 5 })
    ));
    assert!(HintKey::new(1, &[0u8; 65]).is_err());
    assert_eq!(
        HintKeys::new(
            HintKey::new(1, SECRET_A).unwrap(),
            Some(HintKey::new(1, SECRET_B).unwrap())
        )
        .unwrap_err(),
        KeyError::DuplicateId(1)
    );
    assert!(matches!(HintKeys::parse(""), Err(KeyError::Count(0))));
    assert!(matches!(
        HintKeys::parse("1:zz"),
        Err(KeyError::Syntax { line: 1, .. })
    ));
    assert!(matches!(
        HintKeys::parse("x:00"),
        Err(KeyError::Syntax { line: 1, .. })
    ));
    assert!(matches!(
        HintKeys::parse("# only\n0011"),
        Err(KeyError::Syntax { line: 2, .. })
    ));
    let hex_a = "30313233343536373839616263646566";
    let three = format!("1:{hex_a}\n2:{hex_a}\n3:{hex_a}\n");
    assert!(matches!(HintKeys::parse(&three), Err(KeyError::Count(3))));
    let two = HintKeys::parse(&format!("# rotation\n2:{hex_a}  # new\n\n1:{hex_a}\n")).unwrap();
    assert_eq!(two.current().id(), 2);
}

proptest! {
    #[test]
    fn any_hint_round_trips(
        cluster in any::<u16>(),
        v6 in any::<bool>(),
        ip4 in any::<[u8; 4]>(),
        ip6 in any::<[u8; 16]>(),
        port in any::<u16>(),
        random in any::<[u8; 5]>(),
    ) {
        let ip: core::net::IpAddr = if v6 {
            core::net::Ipv6Addr::from(ip6).into()
        } else {
            core::net::Ipv4Addr::from(ip4).into()
        };
        let h = RoutingHint { cluster, transceiver: SocketAddr::new(ip.to_canonical(), port) };
        let keys = keys_a();
        let ufrag = keys.encode(&h, MINTED, random);
        let all: Vec<IpNet> = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
        let verified = keys.verify(ufrag.as_bytes(), &all).unwrap();
        prop_assert_eq!(verified.hint, h);
    }

    #[test]
    fn arbitrary_ufrags_never_panic_and_never_verify(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let all: Vec<IpNet> = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
        prop_assert!(keys_a().verify(&bytes, &all).is_err());
    }
}

/// A random secret, read from the kernel: no key a test publishes can be a real one.
fn random_secret() -> Vec<u8> {
    use std::io::Read as _;
    let mut secret = vec![0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut secret))
        .unwrap();
    secret
}

#[test]
fn example_secrets_are_told_from_random_ones() {
    use ufrag_common::hint::is_example_secret;
    let counting: Vec<u8> = (0u8..32).collect();
    let countdown: Vec<u8> = (0u8..32).map(|i| 200 - 3 * i).collect();
    for (what, secret) in [
        ("the tests' own key", counting.as_slice()),
        ("a countdown in steps of 3", &countdown),
        ("one repeated byte", &[0x22; 32]),
        ("four byte values", &[1, 2, 3, 4].repeat(8)),
        ("a passphrase", SECRET_A),
        ("another", SECRET_B),
    ] {
        assert!(is_example_secret(secret), "{what}");
    }
    for _ in 0..100 {
        let secret = random_secret();
        assert!(!is_example_secret(&secret), "{secret:02x?}");
    }
    let hex: String = random_secret().iter().map(|b| format!("{b:02x}")).collect();
    let keys = HintKeys::parse(&format!(
        "2:{hex}\n1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
    ))
    .unwrap();
    assert_eq!(keys.example_key(), Some(1), "a previous key counts too");
}
