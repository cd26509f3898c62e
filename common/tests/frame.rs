//! The relay ↔ transceiver frame header: byte vectors, one per error, and round trips.

use core::net::SocketAddr;

use proptest::prelude::*;
use ufrag_common::bundle::{Bundle, BundleWriter, Bundler, PushError, is_bundle, max_bundle_len};
use ufrag_common::frame::{FrameError, FrameHeader, MAX_HEADER_LEN, Transport};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// IPv4 client 198.51.100.7:50000, VIP 203.0.113.10:3478, then a 2-byte datagram.
const V4_FRAME: [u8; 18] = [
    0xF1, 0x00, 0x00, 0x00, // version 1, no flags, reserved
    0xC3, 0x50, 0x0D, 0x96, // client port 50000, VIP port 3478
    198, 51, 100, 7, // client IP
    203, 0, 113, 10, // VIP
    0x17, 0xFE, // datagram
];

#[test]
fn ipv4_vector_parses_and_emits_byte_for_byte() {
    let (header, payload) = FrameHeader::parse(&V4_FRAME).unwrap();
    assert_eq!(header.client, addr("198.51.100.7:50000"));
    assert_eq!(header.vip, addr("203.0.113.10:3478"));
    assert_eq!(payload, &[0x17, 0xFE]);
    assert_eq!(header.encoded_len(), 16);
    // Fill with 0xa5 first so any byte emit forgets to write shows.
    let mut out = [0xa5u8; 20];
    assert_eq!(header.emit(&mut out), Ok(16));
    assert_eq!(&out[..16], &V4_FRAME[..16]);
    assert_eq!(
        &out[16..],
        &[0xa5; 4],
        "emit writes nothing past the header"
    );
}

#[test]
fn ipv6_and_mixed_vectors() {
    let h = FrameHeader::new(addr("[2001:db8::7]:50000"), addr("203.0.113.10:3478"));
    let mut out = [0xa5u8; MAX_HEADER_LEN];
    assert_eq!(h.emit(&mut out), Ok(28));
    let mut expected = vec![0xF1, 0x01, 0, 0, 0xC3, 0x50, 0x0D, 0x96];
    expected.extend_from_slice(
        &"2001:db8::7"
            .parse::<core::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    expected.extend_from_slice(&[203, 0, 113, 10]);
    assert_eq!(&out[..28], &expected[..]);

    let h6 = FrameHeader::new(addr("[2001:db8::7]:1"), addr("[2001:db8::1]:2"));
    assert_eq!(h6.encoded_len(), MAX_HEADER_LEN);
    let mut frame = [0u8; MAX_HEADER_LEN + 1];
    h6.emit(&mut frame).unwrap();
    assert_eq!(frame[1], 0x03);
    assert_eq!(FrameHeader::parse(&frame).unwrap().0, h6);
}

#[test]
fn ipv4_mapped_addresses_are_written_as_ipv4() {
    let h = FrameHeader::new(
        addr("[::ffff:198.51.100.7]:50000"),
        addr("[::ffff:203.0.113.10]:3478"),
    );
    let mut out = [0u8; 16];
    assert_eq!(h.emit(&mut out), Ok(16));
    assert_eq!(out, V4_FRAME[..16]);
}

#[test]
fn too_short() {
    assert_eq!(
        FrameHeader::parse(&V4_FRAME[..7]),
        Err(FrameError::TooShort)
    );
    assert_eq!(
        FrameHeader::parse(&V4_FRAME[..15]),
        Err(FrameError::TooShort)
    );
    assert_eq!(FrameHeader::parse(&[]), Err(FrameError::TooShort));
}

#[test]
fn not_a_frame_a_raw_webrtc_datagram() {
    for first in [0x00, 0x17, 0x80, 0xE1] {
        let mut f = V4_FRAME;
        f[0] = first;
        assert_eq!(
            FrameHeader::parse(&f),
            Err(FrameError::NotAFrame),
            "{first:#x}"
        );
    }
}

#[test]
fn unknown_version() {
    let mut f = V4_FRAME;
    f[0] = 0xF2;
    assert_eq!(FrameHeader::parse(&f), Err(FrameError::UnknownVersion));
}

#[test]
fn reserved_bits_set() {
    for (at, value) in [(1, 0x20), (1, 0x80), (2, 0x01), (3, 0x80)] {
        let mut f = V4_FRAME;
        f[at] |= value;
        assert_eq!(
            FrameHeader::parse(&f),
            Err(FrameError::ReservedBitsSet),
            "byte {at}"
        );
    }
}

#[test]
fn the_verified_path_bit_round_trips_and_changes_nothing_else() {
    let (plain, payload) = FrameHeader::parse(&V4_FRAME).unwrap();
    assert!(!plain.verified_path);
    let mut f = V4_FRAME;
    f[1] |= 0x08;
    let (marked, marked_payload) = FrameHeader::parse(&f).unwrap();
    assert!(marked.verified_path);
    assert_eq!(marked, plain.on_verified_path(true));
    assert_eq!(marked_payload, payload);
    let mut out = [0u8; 64];
    let n = marked.emit(&mut out).unwrap();
    assert_eq!(&out[..n], &f[..n]);
}

#[test]
fn a_session_ended_frame_is_the_header_alone_and_round_trips() {
    let (plain, _) = FrameHeader::parse(&V4_FRAME).unwrap();
    let ended = plain.on_verified_path(true).ending_session();
    let mut out = [0u8; 64];
    let n = ended.emit(&mut out).unwrap();
    assert_eq!(out[1], 0x18, "verified path and session ended");
    let (parsed, payload) = FrameHeader::parse(&out[..n]).unwrap();
    assert_eq!(parsed, ended);
    assert!(parsed.session_ended && payload.is_empty());
    // Only a session-ended frame may be the header alone.
    assert_eq!(
        FrameHeader::parse(&V4_FRAME[..16]),
        Err(FrameError::EmptyPayload)
    );
}

#[test]
fn the_tcp_bit_names_a_client_on_a_tcp_connection() {
    let (udp, _) = FrameHeader::parse(&V4_FRAME).unwrap();
    assert_eq!(udp.transport, Transport::Udp);
    let mut f = V4_FRAME;
    f[1] = 0x04;
    let (tcp, payload) = FrameHeader::parse(&f).unwrap();
    assert_eq!(tcp.transport, Transport::Tcp);
    assert_eq!((tcp.client, tcp.vip), (udp.client, udp.vip));
    assert_eq!(payload, &[0x17, 0xFE]);
    let mut out = [0u8; 16];
    FrameHeader::over(Transport::Tcp, udp.client, udp.vip)
        .emit(&mut out)
        .unwrap();
    assert_eq!(out, f[..16], "emitted byte for byte");
}

#[test]
fn empty_payload() {
    assert_eq!(
        FrameHeader::parse(&V4_FRAME[..16]),
        Err(FrameError::EmptyPayload)
    );
}

#[test]
fn emit_into_a_small_buffer() {
    let (h, _) = FrameHeader::parse(&V4_FRAME).unwrap();
    assert_eq!(h.emit(&mut [0u8; 15]), Err(FrameError::BufferTooSmall));
}

fn any_socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, p)| {
            SocketAddr::new(core::net::Ipv6Addr::from(ip).to_canonical(), p)
        }),
    ]
}

proptest! {
    #[test]
    fn round_trip(client in any_socket_addr(), vip in any_socket_addr(), tcp in any::<bool>(), payload in proptest::collection::vec(any::<u8>(), 1..64)) {
        let transport = if tcp { Transport::Tcp } else { Transport::Udp };
        let h = FrameHeader::over(transport, client, vip);
        let mut frame = vec![0xa5u8; h.encoded_len()];
        prop_assert_eq!(h.emit(&mut frame), Ok(h.encoded_len()));
        frame.extend_from_slice(&payload);
        let (parsed, body) = FrameHeader::parse(&frame).unwrap();
        prop_assert_eq!(parsed, h);
        prop_assert_eq!(body, &payload[..]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok((header, body)) = FrameHeader::parse(&bytes) {
            // Only a session-ended frame may be the header alone.
            prop_assert!(bytes.ends_with(body) && (!body.is_empty() || header.session_ended));
        }
    }
}

#[test]
fn ipv4_mapped_ipv6_on_the_wire_is_read_as_ipv4() {
    let mut f = vec![0xF1, 0x01, 0, 0, 0, 1, 0, 2];
    f.extend_from_slice(
        &"::ffff:198.51.100.7"
            .parse::<core::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    f.extend_from_slice(&[203, 0, 113, 10, 0x80]);
    let (h, payload) = FrameHeader::parse(&f).unwrap();
    assert_eq!(h.client, addr("198.51.100.7:1"));
    assert_eq!(payload, &[0x80]);
}

proptest! {
    /// Whatever frames fit go into a bundle in order and come back unchanged; the first
    /// that does not fit is refused and leaves the bundle as it was.
    #[test]
    fn bundles_round_trip_and_never_exceed_their_buffer(
        frames in proptest::collection::vec(
            (any_socket_addr(), any_socket_addr(), any::<bool>(), proptest::collection::vec(any::<u8>(), 1..300)),
            1..12,
        ),
        capacity in 20usize..1500,
    ) {
        let mut buf = vec![0u8; capacity];
        let mut writer = BundleWriter::new(&mut buf);
        let mut taken = Vec::new();
        for (client, vip, tcp, payload) in &frames {
            let transport = if *tcp { Transport::Tcp } else { Transport::Udp };
            let h = FrameHeader::over(transport, *client, *vip);
            match writer.push(&h, payload) {
                Ok(()) => taken.push((h, payload.clone())),
                Err(PushError::Full) => break,
                Err(PushError::Unbundleable) => prop_assert!(false, "every frame here is bundleable"),
            }
        }
        match writer.finish() {
            None => prop_assert!(taken.is_empty()),
            Some(bundle) => {
                prop_assert!(bundle.len() <= capacity);
                let parsed: Vec<_> = Bundle::parse(bundle)
                    .unwrap()
                    .map(|f| FrameHeader::parse(f).map(|(h, d)| (h, d.to_vec())))
                    .collect();
                let expected: Vec<_> = taken.into_iter().map(Ok).collect();
                prop_assert_eq!(parsed, expected);
            }
        }
    }

    /// Arbitrary bytes: the bundle parser never panics, and what it accepts it walks to
    /// the last byte.
    #[test]
    fn any_bytes_parse_as_a_bundle_or_are_refused_whole(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(bundle) = Bundle::parse(&bytes) {
            let announced = bundle.len();
            let frames: Vec<&[u8]> = bundle.collect();
            prop_assert_eq!(frames.len(), announced);
            let carried: usize = frames.iter().map(|f| 2 + f.len()).sum();
            prop_assert_eq!(4 + carried, bytes.len());
        }
    }
}

/// What a [`Bundler`] emitted: where to, the datagram, and how many frames it stood for.
type Emitted = Vec<(SocketAddr, Vec<u8>, usize)>;

/// The frames in one emitted datagram: a bundle's, or the datagram as one plain frame.
fn frames_in(datagram: &[u8]) -> Vec<(FrameHeader, Vec<u8>)> {
    let parse = |f: &[u8]| {
        let (h, d) = FrameHeader::parse(f).unwrap();
        (h, d.to_vec())
    };
    if is_bundle(datagram) {
        Bundle::parse(datagram).unwrap().map(parse).collect()
    } else {
        vec![parse(datagram)]
    }
}

proptest! {
    /// Any mix of destinations and sizes: every frame leaves exactly once, a destination's
    /// frames leave in the order they were pushed, what a datagram stands for is the frames
    /// it carries, a bundle (two frames or more) never passes the path's MTU, and only a
    /// frame too long for any bundle leaves alone past it.
    #[test]
    fn a_bundler_sends_every_frame_once_in_order_within_the_mtu(
        pushes in proptest::collection::vec((0usize..12, 1usize..1600), 1..120),
        mtu in 576u16..=1500,
    ) {
        let destinations: Vec<SocketAddr> = (0..12u16)
            .map(|i| if i % 3 == 0 {
                SocketAddr::new(format!("2001:db8::{i}").parse().unwrap(), 40_000 + i)
            } else {
                SocketAddr::from(([10, 0, 0, i as u8], 40_000 + i))
            })
            .collect();
        let mut bundler: Bundler<usize> = Bundler::new(mtu, 2048);
        let mut emitted: Emitted = Vec::new();
        let mut emit = |to: SocketAddr, head: &[u8], body: &[u8], n: usize| {
            emitted.push((to, [head, body].concat(), n));
        };
        let mut sent: Vec<Vec<(FrameHeader, Vec<u8>)>> = vec![Vec::new(); destinations.len()];
        for (k, (d, len)) in pushes.iter().enumerate() {
            let client = SocketAddr::from(([198, 51, 100, (k % 250) as u8], 5000 + k as u16));
            let h = FrameHeader::new(client, addr("203.0.113.1:3478"));
            let datagram = vec![(k % 251) as u8; *len];
            bundler.push(destinations[*d], &h, &datagram, 1, &mut emit);
            sent[*d].push((h, datagram));
        }
        bundler.close_all(&mut emit);
        prop_assert!(bundler.is_empty());
        let mut received: Vec<Vec<(FrameHeader, Vec<u8>)>> = vec![Vec::new(); destinations.len()];
        for (to, datagram, n) in &emitted {
            let frames = frames_in(datagram);
            prop_assert_eq!(frames.len(), *n);
            let ipv4 = to.ip().is_ipv4();
            if frames.len() > 1 {
                prop_assert!(datagram.len() <= max_bundle_len(mtu, ipv4));
            } else {
                prop_assert!(!is_bundle(datagram), "a lone frame leaves as a plain frame");
            }
            let d = destinations.iter().position(|x| x == to).unwrap();
            received[d].extend(frames);
        }
        prop_assert_eq!(received, sent);
    }
}
