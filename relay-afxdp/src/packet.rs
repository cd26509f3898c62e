//! Ethernet/IPv4/IPv6/UDP views and in-place writers for frames in the UMEM, with the
//! Internet checksum (RFC 1071) for the IPv4 header and the full UDP checksum (veth and
//! many NICs hand XDP frames with only a partial checksum, so every frame we send gets a
//! complete one). Pure code: no I/O, no allocation, no panics on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Ethernet header length.
pub const ETH_LEN: usize = 14;
/// IPv4 header length without options (the only kind we write).
pub const IPV4_LEN: usize = 20;
/// IPv6 header length.
pub const IPV6_LEN: usize = 40;
/// UDP header length.
pub const UDP_LEN: usize = 8;

/// Sums 16-bit big-endian words (odd tail padded with zero) into a 32-bit accumulator.
fn sum(mut acc: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The IPv4 header checksum of `header` (its checksum field must be zero).
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    fold(sum(0, header))
}

/// The UDP checksum over the pseudo-header and `udp` (header with a zero checksum field,
/// then payload). Zero is sent as 0xFFFF (RFC 768).
pub fn udp_checksum(src: IpAddr, dst: IpAddr, udp: &[u8]) -> u16 {
    let mut acc = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => sum(sum(0, &s.octets()), &d.octets()),
        (s, d) => sum(sum(0, &ip16(s)), &ip16(d)),
    };
    acc += 17 + udp.len() as u32;
    let c = fold(sum(acc, udp));
    if c == 0 { 0xffff } else { c }
}

fn ip16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Where the parts of a UDP frame are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpFrame {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Offset of the UDP payload.
    pub payload_at: usize,
    /// Length of the UDP payload (from the UDP header, checked against the frame).
    pub payload_len: usize,
}

/// Parses an Ethernet + IPv4/IPv6 + UDP frame; `None` for anything else or anything
/// truncated or inconsistent. IPv4 options are skipped; IPv6 extension headers are not
/// accepted (the steering program passes those to the kernel anyway).
pub fn parse_udp(frame: &[u8]) -> Option<UdpFrame> {
    let eth = frame.get(..ETH_LEN)?;
    let dst_mac: [u8; 6] = eth[0..6].try_into().ok()?;
    let src_mac: [u8; 6] = eth[6..12].try_into().ok()?;
    let (src_ip, dst_ip, udp_at): (IpAddr, IpAddr, usize) =
        match u16::from_be_bytes([eth[12], eth[13]]) {
            0x0800 => {
                let ip = frame.get(ETH_LEN..ETH_LEN + IPV4_LEN)?;
                let ihl = usize::from(ip[0] & 0x0f) * 4;
                if ip[0] >> 4 != 4
                    || ihl < IPV4_LEN
                    || ip[9] != 17
                    || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0
                {
                    return None;
                }
                let s: [u8; 4] = ip[12..16].try_into().ok()?;
                let d: [u8; 4] = ip[16..20].try_into().ok()?;
                (
                    Ipv4Addr::from(s).into(),
                    Ipv4Addr::from(d).into(),
                    ETH_LEN + ihl,
                )
            }
            0x86DD => {
                let ip = frame.get(ETH_LEN..ETH_LEN + IPV6_LEN)?;
                if ip[0] >> 4 != 6 || ip[6] != 17 {
                    return None;
                }
                let s: [u8; 16] = ip[8..24].try_into().ok()?;
                let d: [u8; 16] = ip[24..40].try_into().ok()?;
                (
                    Ipv6Addr::from(s).into(),
                    Ipv6Addr::from(d).into(),
                    ETH_LEN + IPV6_LEN,
                )
            }
            _ => return None,
        };
    let udp = frame.get(udp_at..udp_at + UDP_LEN)?;
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if udp_len < UDP_LEN || udp_at + udp_len > frame.len() {
        return None;
    }
    Some(UdpFrame {
        src_mac,
        dst_mac,
        src: SocketAddr::new(src_ip, u16::from_be_bytes([udp[0], udp[1]])),
        dst: SocketAddr::new(dst_ip, u16::from_be_bytes([udp[2], udp[3]])),
        payload_at: udp_at + UDP_LEN,
        payload_len: udp_len - UDP_LEN,
    })
}

/// Header length for a datagram between two addresses of one family.
pub fn headers_len(dst: &SocketAddr) -> usize {
    ETH_LEN + if dst.is_ipv4() { IPV4_LEN } else { IPV6_LEN } + UDP_LEN
}

/// Writes Ethernet, IP and UDP headers into `frame[..headers_len]` for a payload already
/// in `frame[headers_len..headers_len + payload_len]`, with both checksums complete.
/// Returns the frame length, or `None` if the buffer is too small or the families differ.
pub fn write_udp(
    frame: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: SocketAddr,
    dst: SocketAddr,
    payload_len: usize,
) -> Option<usize> {
    let hl = headers_len(&dst);
    let total = hl + payload_len;
    if frame.len() < total
        || src.is_ipv4() != dst.is_ipv4()
        || UDP_LEN + payload_len > usize::from(u16::MAX)
    {
        return None;
    }
    frame[0..6].copy_from_slice(&dst_mac);
    frame[6..12].copy_from_slice(&src_mac);
    let udp_at = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let ip = &mut frame[ETH_LEN..ETH_LEN + IPV4_LEN];
            let ip_total = (IPV4_LEN + UDP_LEN + payload_len) as u16;
            ip[0] = 0x45;
            ip[1] = 0;
            ip[2..4].copy_from_slice(&ip_total.to_be_bytes());
            ip[4..6].copy_from_slice(&[0, 0]);
            ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
            ip[8] = 64;
            ip[9] = 17;
            ip[10..12].copy_from_slice(&[0, 0]);
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let c = ipv4_checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            ETH_LEN + IPV4_LEN
        }
        (s, d) => {
            frame[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
            let ip = &mut frame[ETH_LEN..ETH_LEN + IPV6_LEN];
            ip[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
            ip[4..6].copy_from_slice(&((UDP_LEN + payload_len) as u16).to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&ip16(s));
            ip[24..40].copy_from_slice(&ip16(d));
            ETH_LEN + IPV6_LEN
        }
    };
    let udp_len = (UDP_LEN + payload_len) as u16;
    frame[udp_at..udp_at + 2].copy_from_slice(&src.port().to_be_bytes());
    frame[udp_at + 2..udp_at + 4].copy_from_slice(&dst.port().to_be_bytes());
    frame[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
    frame[udp_at + 6..udp_at + 8].copy_from_slice(&[0, 0]);
    let c = udp_checksum(src.ip(), dst.ip(), &frame[udp_at..total]);
    frame[udp_at + 6..udp_at + 8].copy_from_slice(&c.to_be_bytes());
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The slow, obvious RFC 1071 sum, for reference.
    fn reference(bytes: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for (i, b) in bytes.iter().enumerate() {
            acc += if i % 2 == 0 {
                u64::from(*b) << 8
            } else {
                u64::from(*b)
            };
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    #[test]
    fn ipv4_header_checksum_known_vector() {
        // A well-known example header: 4500 0073 0000 4000 4011 [b861] c0a8 0001 c0a8 00c7.
        let h = [
            0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0,
            0xc7,
        ];
        assert_eq!(ipv4_checksum(&h), 0xb861);
    }

    #[test]
    fn written_frames_parse_back_and_verify() {
        let mut buf = [0xa5u8; 256];
        let payload = b"hello relay";
        for (src, dst) in [
            ("10.77.0.2:3478", "10.77.0.1:50000"),
            ("[fd00::2]:3478", "[fd00::1]:50000"),
        ] {
            let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
            let hl = headers_len(&dst);
            buf[hl..hl + payload.len()].copy_from_slice(payload);
            let n = write_udp(
                &mut buf,
                [2, 0, 0, 0, 0, 2],
                [2, 0, 0, 0, 0, 1],
                src,
                dst,
                payload.len(),
            )
            .unwrap();
            let f = parse_udp(&buf[..n]).unwrap();
            assert_eq!((f.src, f.dst, f.payload_len), (src, dst, payload.len()));
            assert_eq!(&buf[f.payload_at..f.payload_at + f.payload_len], payload);
            // A receiver's check: the checksum over pseudo-header + UDP with the field
            // in place sums to zero (0xffff before inversion).
            let udp = &buf[f.payload_at - UDP_LEN..n];
            let mut acc = match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => sum(sum(0, &s.octets()), &d.octets()),
                (s, d) => sum(sum(0, &ip16(s)), &ip16(d)),
            };
            acc += 17 + udp.len() as u32;
            assert_eq!(fold(sum(acc, udp)), 0, "UDP checksum verifies");
            if src.is_ipv4() {
                assert_eq!(
                    fold(sum(0, &buf[ETH_LEN..ETH_LEN + IPV4_LEN])),
                    0,
                    "IPv4 checksum verifies"
                );
            }
        }
    }

    #[test]
    fn non_udp_and_truncated_frames_are_not_parsed() {
        let mut buf = [0u8; 128];
        let n = write_udp(
            &mut buf,
            [0; 6],
            [0; 6],
            "10.0.0.1:1".parse().unwrap(),
            "10.0.0.2:2".parse().unwrap(),
            10,
        )
        .unwrap();
        assert!(parse_udp(&buf[..n]).is_some());
        assert!(
            parse_udp(&buf[..n - 1]).is_none(),
            "UDP length beyond the frame"
        );
        let mut tcp = buf;
        tcp[ETH_LEN + 9] = 6;
        assert!(parse_udp(&tcp[..n]).is_none());
        let mut frag = buf;
        frag[ETH_LEN + 6] = 0x20; // MF
        assert!(parse_udp(&frag[..n]).is_none());
        assert!(parse_udp(&buf[..13]).is_none());
    }

    proptest! {
        #[test]
        fn checksum_matches_the_reference(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(ipv4_checksum(&bytes), reference(&bytes));
        }

        #[test]
        fn arbitrary_frames_never_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Some(f) = parse_udp(&bytes) {
                prop_assert!(f.payload_at + f.payload_len <= bytes.len());
            }
        }
    }
}
