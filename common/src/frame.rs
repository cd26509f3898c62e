//! The relay ↔ transceiver frame header: a small fixed header in front of an untouched
//! WebRTC datagram, naming the client's address and the public VIP:port it used.
//!
//! # Layout (version 1), all fields big endian
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |1 1 1 1|version|    flags      |     reserved, must be zero    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          client port          |           VIP port            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        client IP: 4 bytes (IPv4) or 16 bytes (IPv6)           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          VIP IP: 4 bytes (IPv4) or 16 bytes (IPv6)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 the WebRTC datagram, untouched ...            |
//!
//!  flags: bit 0 (0x01) client IP is IPv6, bit 1 (0x02) VIP IP is IPv6,
//!         bit 2 (0x04) the client is on a TCP connection to the VIP (ICE-TCP, RFC 6544):
//!         the datagram is one RFC 4571 message without its length prefix,
//!         bit 3 (0x08) transceiver → relay only: the transceiver sends this on a path that
//!         answered its probe (something at the client address receives),
//!         bit 4 (0x10) transceiver → relay (and on to a global relay): the session on
//!         this flow has ended; the frame carries no datagram (anything behind the header
//!         never reaches a client) and the relay forgets the flow; others zero.
//!  Header length: 8 + 4|16 + 4|16 = 16 (v4/v4), 28 (mixed) or 40 (v6/v6) bytes.
//! ```
//!
//! The first byte is 0xF1 for version 1: the high nibble 0xF lies outside every RFC 7983
//! range, so a raw STUN/DTLS/RTP datagram sent to an internal port is never mistaken
//! for a frame. Reserved bits must be zero, so a later version can use them.
//!
//! The same header travels relay → transceiver, transceiver → relay (naming the client to
//! send to and the VIP to send from) and global relay ↔ cluster relay.
//!
//! A TCP client's connection is named by its address and the VIP, as a UDP client's flow
//! is: the kernel never has two connections with the same four-tuple. The TCP bit keeps
//! the two transports apart where a client's port numbers coincide: a reply framed with
//! it goes back on the connection, one without it as a UDP datagram.
//!
//! The verified-path bit is what a relay counts as the transceiver's half of a flow's
//! proof: a flow whose transceiver sends DTLS or media on it only with this bit clear (a
//! path nobody has shown to receive on) stays unproven. A relay that does not know the bit
//! drops such frames as `frame_reserved_bits`, so relays are upgraded before
//! transceivers.
//!
//! The session-ended bit lets a relay free a flow when its session ends rather than when
//! it goes idle: only the flow's own next hop may send it (another source is refused as
//! `return_wrong_source`), and a relay that does not know the bit drops the frame as
//! `frame_reserved_bits`, which costs nothing but the early release.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The frame version this code writes and reads.
pub const FRAME_VERSION: u8 = 1;
/// Length of the fixed part, before the two addresses.
pub const FIXED_LEN: usize = 8;
/// The longest header (both addresses IPv6).
pub const MAX_HEADER_LEN: usize = FIXED_LEN + 16 + 16;

const MAGIC_NIBBLE: u8 = 0xF0;
const FLAG_CLIENT_V6: u8 = 0x01;
const FLAG_VIP_V6: u8 = 0x02;
const FLAG_TCP: u8 = 0x04;
/// Transceiver → relay: sent on a path that answered the transceiver's probe.
pub const FLAG_VERIFIED_PATH: u8 = 0x08;
/// Transceiver → relay: the session on this flow has ended; no datagram follows.
pub const FLAG_SESSION_ENDED: u8 = 0x10;
const KNOWN_FLAGS: u8 =
    FLAG_CLIENT_V6 | FLAG_VIP_V6 | FLAG_TCP | FLAG_VERIFIED_PATH | FLAG_SESSION_ENDED;

/// How the client reaches the relay: its datagrams, or its RFC 4571 messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    /// UDP datagrams to a VIP (the norm).
    #[default]
    Udp,
    /// A TCP connection to a TCP VIP (ICE-TCP, for networks that block UDP).
    Tcp,
}

impl Transport {
    /// A stable lowercase label for metrics and logs.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }
}

/// Why a datagram is not a usable frame. Each variant is one drop reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameError {
    /// Shorter than its own header says.
    TooShort,
    /// The first nibble is not 0xF: not a frame at all.
    NotAFrame,
    /// A frame of a version this code does not know.
    UnknownVersion,
    /// Reserved flag bits or reserved bytes are set.
    ReservedBitsSet,
    /// A header with no datagram behind it.
    EmptyPayload,
    /// The output buffer cannot hold the header (emit only).
    BufferTooSmall,
}

impl FrameError {
    /// A stable snake_case label for metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TooShort => "frame_too_short",
            Self::NotAFrame => "frame_not_a_frame",
            Self::UnknownVersion => "frame_unknown_version",
            Self::ReservedBitsSet => "frame_reserved_bits",
            Self::EmptyPayload => "frame_empty_payload",
            Self::BufferTooSmall => "frame_buffer_too_small",
        }
    }
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for FrameError {}

/// The addresses a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameHeader {
    /// The client's public address and port, as the relay saw them.
    pub client: SocketAddr,
    /// The relay's public VIP and port the client sent to (and must hear back from).
    pub vip: SocketAddr,
    /// Whether the client is on a UDP flow or a TCP connection.
    pub transport: Transport,
    /// Transceiver → relay: the transceiver sends this on a path that answered its probe.
    pub verified_path: bool,
    /// Transceiver → relay: the session on this flow has ended (no datagram follows).
    pub session_ended: bool,
}

fn ip_len(ip: &IpAddr) -> usize {
    match ip {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 16,
    }
}

fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

fn write_ip(out: &mut [u8], ip: &IpAddr) {
    match ip {
        IpAddr::V4(v4) => out.copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
    }
}

fn read_ip(bytes: &[u8]) -> IpAddr {
    match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::from(
            <[u8; 4]>::try_from(bytes).expect("length is 4"),
        )),
        _ => IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(bytes).expect("length is 16"),
        )),
    }
}

/// The transport a frame names, read from its first two bytes without parsing the rest:
/// how a relay serving both picks the forwarder for a return frame. `None` for anything
/// but a version-1 frame (the forwarder then says what is wrong with it).
pub fn transport_of(frame: &[u8]) -> Option<Transport> {
    match frame {
        [first, flags, ..] if *first == MAGIC_NIBBLE | FRAME_VERSION => {
            Some(if flags & FLAG_TCP != 0 {
                Transport::Tcp
            } else {
                Transport::Udp
            })
        }
        _ => None,
    }
}

impl FrameHeader {
    /// Builds a header for a UDP client; IPv4-mapped IPv6 addresses are written as IPv4.
    pub fn new(client: SocketAddr, vip: SocketAddr) -> Self {
        Self::over(Transport::Udp, client, vip)
    }

    /// Builds a header for a client on `transport`.
    pub fn over(transport: Transport, client: SocketAddr, vip: SocketAddr) -> Self {
        FrameHeader {
            client: canonical(client),
            vip: canonical(vip),
            transport,
            verified_path: false,
            session_ended: false,
        }
    }

    /// This header, saying the transceiver sends on a path that answered its probe.
    pub fn on_verified_path(self, verified_path: bool) -> Self {
        FrameHeader {
            verified_path,
            ..self
        }
    }

    /// This header, saying the session on the flow has ended: the frame is the header
    /// alone.
    pub fn ending_session(self) -> Self {
        FrameHeader {
            session_ended: true,
            ..self
        }
    }

    /// The header's length on the wire: 16, 28 or 40 bytes.
    pub fn encoded_len(&self) -> usize {
        FIXED_LEN + ip_len(&self.client.ip().to_canonical()) + ip_len(&self.vip.ip().to_canonical())
    }

    /// Writes the header at the start of `out` and returns its length. For a zero-copy
    /// prepend, pass the `encoded_len()` bytes just before the datagram (the headroom of an
    /// AF_XDP frame, or the front of a receive buffer).
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, FrameError> {
        let client = canonical(self.client);
        let vip = canonical(self.vip);
        let len = self.encoded_len();
        let out = out.get_mut(..len).ok_or(FrameError::BufferTooSmall)?;
        let mut flags = 0;
        if client.is_ipv6() {
            flags |= FLAG_CLIENT_V6;
        }
        if vip.is_ipv6() {
            flags |= FLAG_VIP_V6;
        }
        if self.transport == Transport::Tcp {
            flags |= FLAG_TCP;
        }
        if self.verified_path {
            flags |= FLAG_VERIFIED_PATH;
        }
        if self.session_ended {
            flags |= FLAG_SESSION_ENDED;
        }
        out[0] = MAGIC_NIBBLE | FRAME_VERSION;
        out[1] = flags;
        out[2..4].fill(0);
        out[4..6].copy_from_slice(&client.port().to_be_bytes());
        out[6..8].copy_from_slice(&vip.port().to_be_bytes());
        let vip_at = FIXED_LEN + ip_len(&client.ip());
        write_ip(&mut out[FIXED_LEN..vip_at], &client.ip());
        write_ip(&mut out[vip_at..], &vip.ip());
        Ok(len)
    }

    /// Parses a frame: returns the header and the datagram behind it (empty only for a
    /// session-ended frame). Never panics.
    pub fn parse(frame: &[u8]) -> Result<(FrameHeader, &[u8]), FrameError> {
        let fixed = frame.get(..FIXED_LEN).ok_or(FrameError::TooShort)?;
        if fixed[0] & 0xF0 != MAGIC_NIBBLE {
            return Err(FrameError::NotAFrame);
        }
        if fixed[0] & 0x0F != FRAME_VERSION {
            return Err(FrameError::UnknownVersion);
        }
        let flags = fixed[1];
        if flags & !KNOWN_FLAGS != 0 || fixed[2] != 0 || fixed[3] != 0 {
            return Err(FrameError::ReservedBitsSet);
        }
        let client_len = if flags & FLAG_CLIENT_V6 != 0 { 16 } else { 4 };
        let vip_len = if flags & FLAG_VIP_V6 != 0 { 16 } else { 4 };
        let vip_at = FIXED_LEN + client_len;
        let header_len = vip_at + vip_len;
        if frame.len() < header_len {
            return Err(FrameError::TooShort);
        }
        if frame.len() == header_len && flags & FLAG_SESSION_ENDED == 0 {
            return Err(FrameError::EmptyPayload);
        }
        let client_port = u16::from_be_bytes([fixed[4], fixed[5]]);
        let vip_port = u16::from_be_bytes([fixed[6], fixed[7]]);
        // An IPv4-mapped IPv6 address is accepted and read as the IPv4 address it maps,
        // the same canonical form emit writes and flow keys use.
        let transport = if flags & FLAG_TCP != 0 {
            Transport::Tcp
        } else {
            Transport::Udp
        };
        let mut header = FrameHeader::over(
            transport,
            SocketAddr::new(read_ip(&frame[FIXED_LEN..vip_at]), client_port),
            SocketAddr::new(read_ip(&frame[vip_at..header_len]), vip_port),
        );
        header.verified_path = flags & FLAG_VERIFIED_PATH != 0;
        header.session_ended = flags & FLAG_SESSION_ENDED != 0;
        Ok((header, &frame[header_len..]))
    }
}
