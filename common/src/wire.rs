//! The wire below our own protocols, written once for every crate that builds or reads
//! frames (relay-afxdp's frame views and its fast path's writer, perf's generators,
//! admission and the ICE-TCP accept path): header lengths and field offsets of Ethernet,
//! IPv4, IPv6 and UDP (smoltcp's `field` modules), the Internet checksum (RFC 1071) and
//! the UDP checksum over its pseudo-header (RFC 768, RFC 8200), MAC addresses as text,
//! the 16-byte form of an address (IPv4 as IPv4-mapped IPv6), and source prefixes (the
//! groups that rates and caps count in). Pure functions: no I/O, and none panics on any
//! input. The per-packet ones are `#[inline]` (relay-afxdp's frame rewrite calls them
//! across the crate boundary), and [`sum_words`] sums in 32-bit lanes, which the
//! compiler keeps in registers better than 64-bit ones (relay-afxdp's
//! `rewrite_instructions` bench counts the difference).

use std::net::{IpAddr, Ipv6Addr};

/// Ethernet header length.
pub const ETH_LEN: usize = 14;
/// IPv4 header length without options (the only kind written).
pub const IPV4_LEN: usize = 20;
/// IPv6 header length.
pub const IPV6_LEN: usize = 40;
/// UDP header length.
pub const UDP_LEN: usize = 8;
/// The EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// The EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// UDP's IP protocol number.
pub const PROTO_UDP: u8 = 17;

/// Byte ranges of the header fields, per protocol: one place that knows the offsets.
pub mod field {
    use std::ops::Range;

    /// Ethernet header fields.
    pub mod eth {
        use super::Range;
        /// Destination MAC.
        pub const DST: Range<usize> = 0..6;
        /// Source MAC.
        pub const SRC: Range<usize> = 6..12;
        /// EtherType.
        pub const ETHERTYPE: Range<usize> = 12..14;
    }

    /// IPv4 header fields.
    pub mod ipv4 {
        use super::Range;
        /// Version and header length.
        pub const VER_IHL: usize = 0;
        /// Type of service.
        pub const TOS: usize = 1;
        /// Total length.
        pub const TOTAL_LEN: Range<usize> = 2..4;
        /// Identification.
        pub const IDENT: Range<usize> = 4..6;
        /// Flags and fragment offset.
        pub const FLAGS_FRAG: Range<usize> = 6..8;
        /// Time to live.
        pub const TTL: usize = 8;
        /// Protocol.
        pub const PROTOCOL: usize = 9;
        /// Header checksum.
        pub const CHECKSUM: Range<usize> = 10..12;
        /// Source address.
        pub const SRC: Range<usize> = 12..16;
        /// Destination address.
        pub const DST: Range<usize> = 16..20;
    }

    /// IPv6 header fields.
    pub mod ipv6 {
        use super::Range;
        /// Version, traffic class and flow label.
        pub const VER_TC_FLOW: Range<usize> = 0..4;
        /// Payload length.
        pub const PAYLOAD_LEN: Range<usize> = 4..6;
        /// Next header.
        pub const NEXT_HEADER: usize = 6;
        /// Hop limit.
        pub const HOP_LIMIT: usize = 7;
        /// Source address.
        pub const SRC: Range<usize> = 8..24;
        /// Destination address.
        pub const DST: Range<usize> = 24..40;
    }

    /// UDP header fields.
    pub mod udp {
        use super::Range;
        /// Source port.
        pub const SRC_PORT: Range<usize> = 0..2;
        /// Destination port.
        pub const DST_PORT: Range<usize> = 2..4;
        /// Length.
        pub const LENGTH: Range<usize> = 4..6;
        /// Checksum.
        pub const CHECKSUM: Range<usize> = 6..8;
    }
}

/// Adds `bytes` as 16-bit big-endian words (an odd tail padded with zero) to `acc`, the
/// carries left unfolded. Summed in 32 bits a block at a time (a block's 32,768 words
/// cannot overflow it, and the compiler sums 32-bit lanes four at a time), each block
/// added to the 64-bit total.
#[inline]
pub fn sum_words(acc: u64, bytes: &[u8]) -> u64 {
    let mut total = acc;
    for block in bytes.chunks(1 << 16) {
        let mut sum: u32 = 0;
        let mut pairs = block.chunks_exact(2);
        for pair in &mut pairs {
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
        if let [last] = pairs.remainder() {
            sum += u32::from(*last) << 8;
        }
        total += u64::from(sum);
    }
    total
}

/// `sum` with its carries folded back in: the 16-bit ones' complement sum.
#[inline]
pub fn fold_carries(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The Internet checksum of `bytes` (RFC 1071): what goes into a checksum field that
/// was zero while it was computed; over bytes that carry a correct one, 0.
#[inline]
pub fn internet_checksum(bytes: &[u8]) -> u16 {
    !fold_carries(sum_words(0, bytes))
}

/// The UDP checksum of `udp` (its header, checksum field zero, then the payload) between
/// `src` and `dst`, over the pseudo-header of their family (IPv4 when both are, else
/// IPv6 with IPv4-mapped addresses). A computed zero is sent as 0xFFFF (RFC 768).
#[inline]
pub fn udp_checksum(src: IpAddr, dst: IpAddr, udp: &[u8]) -> u16 {
    let addresses = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => sum_words(sum_words(0, &s.octets()), &d.octets()),
        (s, d) => sum_words(sum_words(0, &ip16(s)), &ip16(d)),
    };
    let sum = sum_words(addresses + u64::from(PROTO_UDP) + udp.len() as u64, udp);
    match !fold_carries(sum) {
        0 => 0xffff,
        c => c,
    }
}

/// `ip` in 16 bytes: IPv6 as it is, IPv4 as IPv4-mapped IPv6 (`::ffff:a.b.c.d`).
#[inline]
pub fn ip16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address 16 bytes hold ([`ip16`]'s inverse): IPv4-mapped back to IPv4.
#[inline]
pub fn from_ip16(bytes: [u8; 16]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(bytes)).to_canonical()
}

/// A MAC address from `aa:bb:cc:dd:ee:ff`: six groups of exactly two hex digits.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut groups = text.split(':');
    for byte in &mut mac {
        let group = groups.next()?;
        if group.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(group, 16).ok()?;
    }
    groups.next().is_none().then_some(mac)
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex (either case) as bytes; `None` unless it is whole bytes of hex digits.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// `mac` as `aa:bb:cc:dd:ee:ff`.
pub fn mac_text(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

/// The group `ip` counts in: its first `len_v4` bits if it is IPv4 (an IPv4-mapped IPv6
/// address included), its first `len_v6` bits if IPv6; the rest cleared. Lengths past an
/// address's size keep all of it.
#[inline]
pub fn source_prefix(ip: IpAddr, len_v4: u8, len_v6: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(len_v4.min(32)))
                .unwrap_or(0);
            IpAddr::V4((u32::from(v4) & keep).into())
        }
        IpAddr::V6(v6) => {
            let keep = u128::MAX
                .checked_shl(128 - u32::from(len_v6.min(128)))
                .unwrap_or(0);
            IpAddr::V6((u128::from(v6) & keep).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    /// RFC 1071 as the RFC's own example computes it: a 32-bit sum of byte pairs, an odd
    /// byte as the high half of a last word, carries folded, complemented. Written apart
    /// from [`sum_words`], on purpose.
    fn reference_checksum(bytes: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        let mut i = 0;
        while i + 1 < bytes.len() {
            sum += (u32::from(bytes[i]) << 8) | u32::from(bytes[i + 1]);
            i += 2;
        }
        if i < bytes.len() {
            sum += u32::from(bytes[i]) << 8;
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn the_rfc_1071_example_and_a_known_ipv4_header() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2 (ones' complement).
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold_carries(sum_words(0, &bytes)), 0xddf2);
        // A captured IPv4 header with its checksum field zeroed (its checksum 0xb861).
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&header), 0xb861);
    }

    #[test]
    fn a_mac_is_six_groups_of_two_hex_digits() {
        assert_eq!(
            parse_mac("02:00:0a:ff:Ab:01"),
            Some([2, 0, 0x0a, 0xff, 0xab, 1])
        );
        for bad in [
            "2:0:a:ff:ab:1",
            "02:00:0a:ff:ab",
            "02:00:0a:ff:ab:01:02",
            "02-00-0a-ff-ab-01",
            "02:00:0a:ff:ab:0g",
            "",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad:?}");
        }
        assert_eq!(mac_text([2, 0, 0x0a, 0xff, 0xab, 1]), "02:00:0a:ff:ab:01");
    }

    #[test]
    fn prefixes_keep_their_bits_and_clear_the_rest() {
        let v4: IpAddr = Ipv4Addr::new(203, 0, 113, 77).into();
        assert_eq!(source_prefix(v4, 24, 56), IpAddr::from([203, 0, 113, 0]));
        assert_eq!(source_prefix(v4, 0, 56), IpAddr::from([0, 0, 0, 0]));
        assert_eq!(source_prefix(v4, 40, 56), v4, "past the size: all of it");
        let mapped: IpAddr = Ipv4Addr::new(203, 0, 113, 77).to_ipv6_mapped().into();
        assert_eq!(
            source_prefix(mapped, 24, 56),
            IpAddr::from([203, 0, 113, 0])
        );
        let v6: IpAddr = "2001:db8:aa:bbcc:1:2:3:4".parse().unwrap();
        assert_eq!(
            source_prefix(v6, 24, 56),
            "2001:db8:aa:bb00::".parse::<IpAddr>().unwrap()
        );
    }

    proptest! {
        #[test]
        fn the_checksum_agrees_with_the_rfc_1071_reference(
            bytes in proptest::collection::vec(any::<u8>(), 0..300)
        ) {
            prop_assert_eq!(internet_checksum(&bytes), reference_checksum(&bytes));
        }

        #[test]
        fn a_udp_checksum_verifies_over_its_pseudo_header(
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            src in any::<[u8; 16]>(),
            dst in any::<[u8; 16]>(),
            v4 in any::<bool>(),
        ) {
            let (src, dst) = if v4 {
                (IpAddr::from([src[0], src[1], src[2], src[3]]), IpAddr::from([dst[0], dst[1], dst[2], dst[3]]))
            } else {
                (IpAddr::from(src), IpAddr::from(dst))
            };
            let mut udp = vec![0x13, 0x88, 0x0d, 0x96, 0, 0, 0, 0];
            udp.extend_from_slice(&payload);
            let len = (udp.len() as u16).to_be_bytes();
            udp[4..6].copy_from_slice(&len);
            let checksum = udp_checksum(src, dst, &udp);
            udp[6..8].copy_from_slice(&checksum.to_be_bytes());
            // The receiver's check, written out: pseudo-header then segment sum to 0xffff.
            let mut pseudo = vec![];
            match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    pseudo.extend_from_slice(&s.octets());
                    pseudo.extend_from_slice(&d.octets());
                    pseudo.extend_from_slice(&[0, 17]);
                    pseudo.extend_from_slice(&len);
                }
                _ => {
                    pseudo.extend_from_slice(&ip16(src));
                    pseudo.extend_from_slice(&ip16(dst));
                    pseudo.extend_from_slice(&[0, 0]);
                    pseudo.extend_from_slice(&len);
                    pseudo.extend_from_slice(&[0, 0, 0, 17]);
                }
            }
            pseudo.extend_from_slice(&udp);
            if pseudo.len() % 2 == 1 {
                pseudo.push(0);
            }
            prop_assert_eq!(reference_checksum(&pseudo), 0);
            prop_assert_ne!(checksum, 0);
        }

        #[test]
        fn sixteen_bytes_give_back_the_address(bytes in any::<[u8; 16]>(), v4 in any::<[u8; 4]>()) {
            let v6 = IpAddr::from(bytes).to_canonical();
            prop_assert_eq!(from_ip16(ip16(v6)), v6);
            let v4 = IpAddr::from(v4);
            prop_assert_eq!(from_ip16(ip16(v4)), v4);
        }

        #[test]
        fn a_prefix_of_a_prefix_is_itself(a in any::<[u8; 16]>(), l4 in 0u8..=40, l6 in 0u8..=140) {
            let once = source_prefix(IpAddr::from(a), l4, l6);
            prop_assert_eq!(source_prefix(once, l4, l6), once);
        }

        #[test]
        fn any_text_parses_or_is_refused_and_a_mac_reads_back(text in ".{0,20}", mac in any::<[u8; 6]>()) {
            let _ = parse_mac(&text);
            prop_assert_eq!(parse_mac(&mac_text(mac)), Some(mac));
        }
    }
}
