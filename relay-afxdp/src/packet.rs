//! Ethernet/IPv4/IPv6/UDP views and in-place writers for frames in the UMEM, with the
//! IPv4 header checksum and the full UDP checksum (`ufrag_common::wire`'s: veth and many
//! NICs hand XDP frames with only a partial checksum, so every frame we send gets a
//! complete one). Pure code: no I/O, no allocation, no panics on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub use ufrag_common::wire::{ETH_LEN, IPV4_LEN, IPV6_LEN, UDP_LEN, field};
use ufrag_common::wire::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, PROTO_UDP, internet_checksum, udp_checksum,
};

const TTL: u8 = 64;
/// IPv4 flags with Don't Fragment set, fragment offset zero.
const DONT_FRAGMENT: u16 = 0x4000;
/// More Fragments flag and fragment offset: a fragment if any is set.
const FRAGMENT_BITS: u16 = 0x3fff;

fn be16(b: &[u8], at: std::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[at.start], b[at.start + 1]])
}

/// An Ethernet frame over a buffer that holds at least its header.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>>(T);

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// `None` if the buffer is shorter than an Ethernet header.
    pub fn new_checked(buffer: T) -> Option<Self> {
        (buffer.as_ref().len() >= ETH_LEN).then_some(Self(buffer))
    }
    /// Destination MAC.
    pub fn dst(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac.copy_from_slice(&self.0.as_ref()[field::eth::DST]);
        mac
    }
    /// Source MAC.
    pub fn src(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac.copy_from_slice(&self.0.as_ref()[field::eth::SRC]);
        mac
    }
    /// EtherType.
    pub fn ethertype(&self) -> u16 {
        be16(self.0.as_ref(), field::eth::ETHERTYPE)
    }
    /// What follows the header.
    pub fn payload(&self) -> &[u8] {
        &self.0.as_ref()[ETH_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Writes the header.
    pub fn emit(&mut self, src: [u8; 6], dst: [u8; 6], ethertype: u16) {
        let b = self.0.as_mut();
        b[field::eth::DST].copy_from_slice(&dst);
        b[field::eth::SRC].copy_from_slice(&src);
        b[field::eth::ETHERTYPE].copy_from_slice(&ethertype.to_be_bytes());
    }
}

/// An IPv4 packet over a buffer that holds at least its header (options included).
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>>(T);

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// `None` unless the buffer holds a version-4 header with a valid header length.
    pub fn new_checked(buffer: T) -> Option<Self> {
        let b = buffer.as_ref();
        let first = *b.get(field::ipv4::VER_IHL)?;
        let header_len = usize::from(first & 0x0f) * 4;
        (first >> 4 == 4 && header_len >= IPV4_LEN && b.len() >= header_len).then_some(Self(buffer))
    }
    /// Header length, options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.0.as_ref()[field::ipv4::VER_IHL] & 0x0f) * 4
    }
    /// The protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.0.as_ref()[field::ipv4::PROTOCOL]
    }
    /// True for any fragment (first, middle or last).
    pub fn is_fragment(&self) -> bool {
        be16(self.0.as_ref(), field::ipv4::FLAGS_FRAG) & FRAGMENT_BITS != 0
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = &self.0.as_ref()[field::ipv4::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = &self.0.as_ref()[field::ipv4::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Writes an option-less header for `payload_len` bytes of UDP (DF set, TTL 64)
    /// with its checksum. The buffer must hold [`IPV4_LEN`] bytes.
    pub fn emit_udp(buffer: T, src: Ipv4Addr, dst: Ipv4Addr, payload_len: u16) -> Self {
        let mut packet = Self(buffer);
        let b = &mut packet.0.as_mut()[..IPV4_LEN];
        b[field::ipv4::VER_IHL] = 0x45;
        b[field::ipv4::TOS] = 0;
        let total = IPV4_LEN as u16 + payload_len;
        b[field::ipv4::TOTAL_LEN].copy_from_slice(&total.to_be_bytes());
        b[field::ipv4::IDENT].copy_from_slice(&[0, 0]);
        b[field::ipv4::FLAGS_FRAG].copy_from_slice(&DONT_FRAGMENT.to_be_bytes());
        b[field::ipv4::TTL] = TTL;
        b[field::ipv4::PROTOCOL] = PROTO_UDP;
        b[field::ipv4::CHECKSUM].copy_from_slice(&[0, 0]);
        b[field::ipv4::SRC].copy_from_slice(&src.octets());
        b[field::ipv4::DST].copy_from_slice(&dst.octets());
        let checksum = internet_checksum(b);
        b[field::ipv4::CHECKSUM].copy_from_slice(&checksum.to_be_bytes());
        packet
    }
}

/// An IPv6 packet over a buffer that holds at least its fixed header.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>>(T);

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// `None` unless the buffer holds a version-6 header.
    pub fn new_checked(buffer: T) -> Option<Self> {
        let b = buffer.as_ref();
        (b.len() >= IPV6_LEN && b[0] >> 4 == 6).then_some(Self(buffer))
    }
    /// The next header (17 for UDP without extension headers).
    pub fn next_header(&self) -> u8 {
        self.0.as_ref()[field::ipv6::NEXT_HEADER]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.0.as_ref()[field::ipv6::SRC]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.0.as_ref()[field::ipv6::DST]);
        Ipv6Addr::from(a)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Writes a header for `payload_len` bytes of UDP (hop limit 64). The buffer must
    /// hold [`IPV6_LEN`] bytes.
    pub fn emit_udp(buffer: T, src: Ipv6Addr, dst: Ipv6Addr, payload_len: u16) -> Self {
        let mut packet = Self(buffer);
        let b = packet.0.as_mut();
        b[field::ipv6::VER_TC_FLOW].copy_from_slice(&[0x60, 0, 0, 0]);
        b[field::ipv6::PAYLOAD_LEN].copy_from_slice(&payload_len.to_be_bytes());
        b[field::ipv6::NEXT_HEADER] = PROTO_UDP;
        b[field::ipv6::HOP_LIMIT] = TTL;
        b[field::ipv6::SRC].copy_from_slice(&src.octets());
        b[field::ipv6::DST].copy_from_slice(&dst.octets());
        packet
    }
}

/// A UDP datagram over a buffer that holds its header and the length it claims.
#[derive(Debug, Clone, Copy)]
pub struct UdpPacket<T: AsRef<[u8]>>(T);

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// `None` unless the header's length is at least 8 and fits the buffer.
    pub fn new_checked(buffer: T) -> Option<Self> {
        let b = buffer.as_ref();
        if b.len() < UDP_LEN {
            return None;
        }
        let len = usize::from(be16(b, field::udp::LENGTH));
        (len >= UDP_LEN && len <= b.len()).then_some(Self(buffer))
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.0.as_ref(), field::udp::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.0.as_ref(), field::udp::DST_PORT)
    }
    /// Payload length, from the header.
    pub fn payload_len(&self) -> usize {
        usize::from(be16(self.0.as_ref(), field::udp::LENGTH)) - UDP_LEN
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Writes the header for the payload already in `buffer[UDP_LEN..]` and the full
    /// checksum over the pseudo-header of `src` → `dst`. The buffer must be exactly the
    /// datagram.
    pub fn emit(buffer: T, src: SocketAddr, dst: SocketAddr) -> Self {
        let mut packet = Self(buffer);
        let b = packet.0.as_mut();
        let len = b.len() as u16;
        b[field::udp::SRC_PORT].copy_from_slice(&src.port().to_be_bytes());
        b[field::udp::DST_PORT].copy_from_slice(&dst.port().to_be_bytes());
        b[field::udp::LENGTH].copy_from_slice(&len.to_be_bytes());
        b[field::udp::CHECKSUM].copy_from_slice(&[0, 0]);
        let checksum = udp_checksum(src.ip(), dst.ip(), b);
        b[field::udp::CHECKSUM].copy_from_slice(&checksum.to_be_bytes());
        packet
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
/// truncated or inconsistent. IPv4 options are skipped; fragments and IPv6 extension
/// headers are not accepted (the steering program passes those to the kernel anyway).
pub fn parse_udp(frame: &[u8]) -> Option<UdpFrame> {
    let eth = EthernetFrame::new_checked(frame)?;
    let (src_ip, dst_ip, udp_at): (IpAddr, IpAddr, usize) = match eth.ethertype() {
        ETHERTYPE_IPV4 => {
            let ip = Ipv4Packet::new_checked(eth.payload())?;
            if ip.protocol() != PROTO_UDP || ip.is_fragment() {
                return None;
            }
            (ip.src().into(), ip.dst().into(), ETH_LEN + ip.header_len())
        }
        ETHERTYPE_IPV6 => {
            let ip = Ipv6Packet::new_checked(eth.payload())?;
            if ip.next_header() != PROTO_UDP {
                return None;
            }
            (ip.src().into(), ip.dst().into(), ETH_LEN + IPV6_LEN)
        }
        _ => return None,
    };
    let udp = UdpPacket::new_checked(frame.get(udp_at..)?)?;
    Some(UdpFrame {
        src_mac: eth.src(),
        dst_mac: eth.dst(),
        src: SocketAddr::new(src_ip, udp.src_port()),
        dst: SocketAddr::new(dst_ip, udp.dst_port()),
        payload_at: udp_at + UDP_LEN,
        payload_len: udp.payload_len(),
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
    let udp_len = u16::try_from(UDP_LEN + payload_len).ok()?;
    let total = headers_len(&dst) + payload_len;
    let frame = frame.get_mut(..total)?;
    let (eth, rest) = frame.split_at_mut(ETH_LEN);
    let udp = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            EthernetFrame(eth).emit(src_mac, dst_mac, ETHERTYPE_IPV4);
            let (ip, udp) = rest.split_at_mut(IPV4_LEN);
            Ipv4Packet::emit_udp(ip, s, d, udp_len);
            udp
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            EthernetFrame(eth).emit(src_mac, dst_mac, ETHERTYPE_IPV6);
            let (ip, udp) = rest.split_at_mut(IPV6_LEN);
            Ipv6Packet::emit_udp(ip, s, d, udp_len);
            udp
        }
        _ => return None,
    };
    UdpPacket::emit(udp, src, dst);
    Some(total)
}

/// The in-place rewrite of one received datagram into the frame to send, as offsets in
/// its UMEM chunk: new Ethernet/IP/UDP headers at `start`, then the frame header (if
/// any) at `frame_header_at`, then the bytes kept from the received datagram, which
/// never move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Where the new Ethernet header starts.
    pub start: usize,
    /// Where the frame header goes (towards a transceiver or relay).
    pub frame_header_at: Option<usize>,
    /// The UDP payload length of the frame to send (frame header + kept bytes).
    pub udp_payload_len: usize,
    /// The length of the frame to send.
    pub len: usize,
}

/// What to send, as far as the layout is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// Where the received UDP payload starts in the chunk.
    pub payload_at: usize,
    /// The received UDP payload's length.
    pub payload_len: usize,
    /// How many leading bytes of that payload are not sent (a frame header stripped).
    pub skip: usize,
    /// The length of the frame header to put before the kept bytes (0 for none).
    pub frame_header_len: usize,
    /// The destination (its family sets the IP header length).
    pub to: SocketAddr,
}

/// Plans the rewrite: pure arithmetic, checked. Fails with `TooLarge` when the kept
/// bytes would not start inside the payload, or the headroom in front of them cannot
/// hold the new headers.
pub fn plan(r: Rewrite) -> Result<Plan, ufrag_common::reasons::DropReason> {
    use ufrag_common::reasons::DropReason;
    let kept_len = r
        .payload_len
        .checked_sub(r.skip)
        .ok_or(DropReason::TooLarge)?;
    let kept_at = r.payload_at + r.skip;
    let frame_header_at = kept_at
        .checked_sub(r.frame_header_len)
        .ok_or(DropReason::TooLarge)?;
    let start = frame_header_at
        .checked_sub(headers_len(&r.to))
        .ok_or(DropReason::TooLarge)?;
    let udp_payload_len = r.frame_header_len + kept_len;
    if UDP_LEN + udp_payload_len > usize::from(u16::MAX) {
        return Err(DropReason::TooLarge);
    }
    Ok(Plan {
        start,
        frame_header_at: (r.frame_header_len > 0).then_some(frame_header_at),
        udp_payload_len,
        len: headers_len(&r.to) + udp_payload_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ufrag_common::wire;

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
            let (src_ip, dst_ip) = (src.ip(), dst.ip());
            let addresses = match (src_ip, dst_ip) {
                (IpAddr::V4(s), IpAddr::V4(d)) => [&s.octets()[..], &d.octets()[..]].concat(),
                (s, d) => [wire::ip16(s), wire::ip16(d)].concat(),
            };
            let acc = wire::sum_words(0, &addresses) + 17 + udp.len() as u64;
            assert_eq!(
                wire::fold_carries(wire::sum_words(acc, udp)),
                0xffff,
                "UDP checksum verifies"
            );
            if src.is_ipv4() {
                assert_eq!(
                    internet_checksum(&buf[ETH_LEN..ETH_LEN + IPV4_LEN]),
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

    /// Every rewrite the executor asks for, carried out in memory on a UMEM-like chunk:
    /// towards a transceiver or relay (a frame header put in front), back to a client
    /// (the received frame header stripped), relay to relay (one header replaced by
    /// another); IPv4 and IPv6 on both sides; with no headroom, exactly enough, and the
    /// XDP default of 256 bytes.
    #[test]
    fn every_rewrite_plans_in_place_and_parses_back_or_is_refused_for_headroom() {
        use ufrag_common::frame::FrameHeader;
        use ufrag_common::reasons::DropReason;

        let v4 = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let client4 = v4("198.51.100.7:50000");
        let client6 = v4("[2001:db8::7]:50000");
        let vip4 = v4("203.0.113.1:3478");
        let vip6 = v4("[2001:db8::1]:3478");
        let internal4 = v4("10.77.0.2:40000");
        let internal6 = v4("[fd77::2]:40000");
        let transceiver4 = v4("10.77.0.3:41000");
        let transceiver6 = v4("[fd77::3]:41000");
        let body = b"\x80\x6fsrtp-ish payload that must never move";

        // (received from → at, sent src → to, received frame header, frame header to put
        // in front)
        let mut cases = vec![];
        for (client, vip) in [(client4, vip4), (client6, vip6)] {
            for (internal, transceiver) in [(internal4, transceiver4), (internal6, transceiver6)] {
                let header = FrameHeader::new(client, vip);
                // A client's datagram towards a transceiver (or a cluster relay).
                let sent = (internal, transceiver);
                cases.push((client, vip, sent, None, Some(header)));
                // A transceiver's frame back to the client, from the VIP it used.
                cases.push((transceiver, internal, (vip, client), Some(header), None));
                // A global relay's frame re-framed towards a transceiver.
                cases.push((internal, internal, sent, Some(header), Some(header)));
            }
        }
        let (mut refused, mut carried) = (0, 0);
        for (from, at, (src, to), received_header, new_header) in cases {
            let received_header_len = received_header.map_or(0, |h| h.encoded_len());
            let new_header_len = new_header.map_or(0, |h: FrameHeader| h.encoded_len());
            let need = headers_len(&to) + new_header_len;
            let available_before_kept =
                |headroom: usize| headroom + headers_len(&at) + received_header_len;
            let exact = need.saturating_sub(headers_len(&at) + received_header_len);
            for headroom in [0, exact, 256] {
                let mut chunk = [0u8; 2048];
                // The received frame at `headroom`: headers, maybe a frame header, body.
                let payload_at = headroom + headers_len(&at);
                let mut payload_len = 0;
                if let Some(h) = received_header {
                    payload_len += h.emit(&mut chunk[payload_at..]).unwrap();
                }
                chunk[payload_at + payload_len..][..body.len()].copy_from_slice(body);
                payload_len += body.len();
                write_udp(
                    &mut chunk[headroom..],
                    [2; 6],
                    [4; 6],
                    from,
                    at,
                    payload_len,
                )
                .unwrap();
                let received = parse_udp(&chunk[headroom..]).unwrap();
                assert_eq!(received.payload_at + headroom, payload_at);

                let planned = plan(Rewrite {
                    payload_at,
                    payload_len,
                    skip: received_header_len,
                    frame_header_len: new_header_len,
                    to,
                });
                if available_before_kept(headroom) < need {
                    assert_eq!(
                        planned,
                        Err(DropReason::TooLarge),
                        "{from} → {to}, headroom {headroom}"
                    );
                    refused += 1;
                    continue;
                }
                let p = planned.unwrap();
                assert_eq!(p.len, headers_len(&to) + new_header_len + body.len());
                if let (Some(h), Some(at)) = (new_header, p.frame_header_at) {
                    h.emit(&mut chunk[at..]).unwrap();
                } else {
                    assert_eq!(new_header.is_some(), p.frame_header_at.is_some());
                }
                let n = write_udp(
                    &mut chunk[p.start..],
                    [6; 6],
                    [8; 6],
                    src,
                    to,
                    p.udp_payload_len,
                )
                .unwrap();
                assert_eq!(n, p.len);
                let sent = parse_udp(&chunk[p.start..p.start + n]).unwrap();
                assert_eq!((sent.src, sent.dst), (src, to));
                let udp_payload = &chunk[p.start + sent.payload_at..][..sent.payload_len];
                match new_header {
                    Some(h) => {
                        let (parsed, rest) = FrameHeader::parse(udp_payload).unwrap();
                        assert_eq!((parsed, rest), (h, &body[..]));
                    }
                    None => assert_eq!(udp_payload, body),
                }
                carried += 1;
            }
        }
        assert_eq!((refused, carried), (4, 32), "both outcomes were exercised");
    }

    #[test]
    fn a_plan_never_underflows() {
        use ufrag_common::reasons::DropReason;
        let to: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let r = Rewrite {
            payload_at: 10,
            payload_len: 5,
            skip: 6,
            frame_header_len: 0,
            to,
        };
        assert_eq!(
            plan(r),
            Err(DropReason::TooLarge),
            "skip beyond the payload"
        );
        let r = Rewrite { skip: 0, ..r };
        assert_eq!(
            plan(r),
            Err(DropReason::TooLarge),
            "no room for the headers"
        );
        let r = Rewrite {
            payload_at: 42,
            ..r
        };
        assert_eq!(
            plan(r),
            Ok(Plan {
                start: 0,
                frame_header_at: None,
                udp_payload_len: 5,
                len: 47
            })
        );
    }

    proptest! {
        #[test]
        fn arbitrary_frames_never_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Some(f) = parse_udp(&bytes) {
                prop_assert!(f.payload_at + f.payload_len <= bytes.len());
            }
        }
    }
}
