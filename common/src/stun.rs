//! A borrowed, zero-allocation view of one STUN message, and a small writer for building
//! ICE Binding Requests into a caller-owned buffer.
//!
//! The view follows RFC 8489 (STUN) §5 and §14 and RFC 8445 (ICE) §7.2.2:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |0 0|     STUN Message Type     |         Message Length        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                         Magic Cookie                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Transaction ID (96 bits)                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | attributes: type (16) | length (16) | value, padded to 4 bytes |
//! ```
//!
//! [`StunView::parse`] checks the header once (top two bits zero, magic cookie, length
//! equal to the datagram minus 20 and a multiple of 4), then walks at most
//! [`MAX_ATTRIBUTES`] attributes, remembering where USERNAME, MESSAGE-INTEGRITY and
//! FINGERPRINT are. Every accessor after that is infallible or returns a small `Copy`
//! error; nothing allocates and nothing panics on any input.
//!
//! Attribute rules enforced (RFC 8489 §14.5, §14.7): FINGERPRINT, when present, is the
//! last attribute; attributes after MESSAGE-INTEGRITY other than FINGERPRINT (and
//! MESSAGE-INTEGRITY-SHA256) are ignored; a repeated USERNAME is ignored.

use hmac::{KeyInit, Mac};

/// Length of the fixed STUN header.
pub const HEADER_LEN: usize = 20;
/// The STUN magic cookie (RFC 8489 §5).
pub const MAGIC_COOKIE: u32 = 0x2112_A442;
/// The upper bound of the attribute walk. ICE Binding Requests carry fewer than ten.
pub const MAX_ATTRIBUTES: usize = 32;
/// The XOR constant of FINGERPRINT (RFC 8489 §14.7).
pub const FINGERPRINT_XOR: u32 = 0x5354_554E;
/// The Binding method.
pub const METHOD_BINDING: u16 = 0x001;

/// Attribute type codes used here (RFC 8489 §18.3, RFC 8445 §16.1).
pub mod attr {
    /// USERNAME: `<receiver ufrag>:<sender ufrag>` in ICE.
    pub const USERNAME: u16 = 0x0006;
    /// MESSAGE-INTEGRITY: HMAC-SHA1, 20 bytes.
    pub const MESSAGE_INTEGRITY: u16 = 0x0008;
    /// MESSAGE-INTEGRITY-SHA256 (RFC 8489), 16..=32 bytes.
    pub const MESSAGE_INTEGRITY_SHA256: u16 = 0x001C;
    /// XOR-MAPPED-ADDRESS.
    pub const XOR_MAPPED_ADDRESS: u16 = 0x0020;
    /// PRIORITY (ICE).
    pub const PRIORITY: u16 = 0x0024;
    /// USE-CANDIDATE (ICE).
    pub const USE_CANDIDATE: u16 = 0x0025;
    /// SOFTWARE.
    pub const SOFTWARE: u16 = 0x8022;
    /// FINGERPRINT: CRC-32 xor 0x5354554e, 4 bytes.
    pub const FINGERPRINT: u16 = 0x8028;
    /// ICE-CONTROLLED.
    pub const ICE_CONTROLLED: u16 = 0x8029;
    /// ICE-CONTROLLING.
    pub const ICE_CONTROLLING: u16 = 0x802A;
}

const INTEGRITY_LEN: usize = 20;
const FINGERPRINT_LEN: usize = 4;
const ATTR_HEADER_LEN: usize = 4;

/// Why a datagram is not a usable STUN message. Each variant is one drop reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StunError {
    /// Fewer than 20 bytes.
    TooShort,
    /// One of the top two bits of the first byte is set.
    NotStun,
    /// The magic cookie is not 0x2112A442.
    BadMagicCookie,
    /// The header length differs from the datagram length minus 20.
    LengthMismatch,
    /// The header length is not a multiple of 4.
    LengthNotAligned,
    /// An attribute header or value runs past the end of the message.
    AttributeOverrun,
    /// More than [`MAX_ATTRIBUTES`] attributes.
    TooManyAttributes,
    /// An attribute follows FINGERPRINT.
    AttributeAfterFingerprint,
    /// MESSAGE-INTEGRITY is not 20 bytes long.
    BadIntegrityLength,
    /// FINGERPRINT is not 4 bytes long.
    BadFingerprintLength,
    /// No USERNAME attribute.
    MissingUsername,
    /// USERNAME is not `<ufrag>:<ufrag>` with both parts non-empty.
    BadUsername,
    /// No MESSAGE-INTEGRITY attribute.
    MissingIntegrity,
    /// MESSAGE-INTEGRITY does not verify under the given key.
    BadIntegrity,
    /// No FINGERPRINT attribute.
    MissingFingerprint,
    /// FINGERPRINT does not match the CRC-32 of the message.
    BadFingerprint,
}

impl StunError {
    /// A stable snake_case label for metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TooShort => "too_short",
            Self::NotStun => "not_stun",
            Self::BadMagicCookie => "bad_magic_cookie",
            Self::LengthMismatch => "length_mismatch",
            Self::LengthNotAligned => "length_not_aligned",
            Self::AttributeOverrun => "attribute_overrun",
            Self::TooManyAttributes => "too_many_attributes",
            Self::AttributeAfterFingerprint => "attribute_after_fingerprint",
            Self::BadIntegrityLength => "bad_integrity_length",
            Self::BadFingerprintLength => "bad_fingerprint_length",
            Self::MissingUsername => "missing_username",
            Self::BadUsername => "bad_username",
            Self::MissingIntegrity => "missing_integrity",
            Self::BadIntegrity => "bad_integrity",
            Self::MissingFingerprint => "missing_fingerprint",
            Self::BadFingerprint => "bad_fingerprint",
        }
    }
}

impl core::fmt::Display for StunError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for StunError {}

/// The class of a STUN message (RFC 8489 §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StunClass {
    /// 0b00
    Request,
    /// 0b01
    Indication,
    /// 0b10
    SuccessResponse,
    /// 0b11
    ErrorResponse,
}

impl StunClass {
    const fn bits(self) -> u16 {
        match self {
            Self::Request => 0b00,
            Self::Indication => 0b01,
            Self::SuccessResponse => 0b10,
            Self::ErrorResponse => 0b11,
        }
    }
}

/// Composes the 14-bit message type from a 12-bit method and a class (RFC 8489 §5).
pub const fn message_type(method: u16, class: StunClass) -> u16 {
    let c = class.bits();
    (method & 0x000F)
        | ((method & 0x0070) << 1)
        | ((method & 0x0F80) << 2)
        | ((c & 0b01) << 4)
        | ((c & 0b10) << 7)
}

/// The two ICE ufrags carried in USERNAME: `"<server ufrag>:<client ufrag>"` on a request
/// from the client to the server (RFC 8445 §7.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UfragPair<'a> {
    /// The receiver's (the server's) ufrag: where the routing hint lives.
    pub server: &'a [u8],
    /// The sender's (the client's) ufrag.
    pub client: &'a [u8],
}

/// A validated, borrowed STUN message.
#[derive(Clone, Copy, Debug)]
pub struct StunView<'a> {
    message: &'a [u8],
    /// (value offset, value length) of the first USERNAME before MESSAGE-INTEGRITY.
    username: Option<(usize, usize)>,
    /// Offset of the MESSAGE-INTEGRITY attribute header.
    integrity_at: Option<usize>,
    /// Offset of the FINGERPRINT attribute header.
    fingerprint_at: Option<usize>,
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<'a> StunView<'a> {
    /// Validates the header and walks the attributes of `datagram`, which must be exactly
    /// one STUN message. Never panics, never allocates.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, StunError> {
        if datagram.len() < HEADER_LEN {
            return Err(StunError::TooShort);
        }
        if datagram[0] & 0xC0 != 0 {
            return Err(StunError::NotStun);
        }
        if be32(datagram, 4) != MAGIC_COOKIE {
            return Err(StunError::BadMagicCookie);
        }
        let length = usize::from(be16(datagram, 2));
        if length != datagram.len() - HEADER_LEN {
            return Err(StunError::LengthMismatch);
        }
        if length % 4 != 0 {
            return Err(StunError::LengthNotAligned);
        }

        let mut view = StunView {
            message: datagram,
            username: None,
            integrity_at: None,
            fingerprint_at: None,
        };
        let mut at = HEADER_LEN;
        let mut walked = 0;
        while at < datagram.len() {
            if view.fingerprint_at.is_some() {
                return Err(StunError::AttributeAfterFingerprint);
            }
            walked += 1;
            if walked > MAX_ATTRIBUTES {
                return Err(StunError::TooManyAttributes);
            }
            if datagram.len() - at < ATTR_HEADER_LEN {
                return Err(StunError::AttributeOverrun);
            }
            let kind = be16(datagram, at);
            let value_len = usize::from(be16(datagram, at + 2));
            let padded = (value_len + 3) & !3;
            if datagram.len() - at - ATTR_HEADER_LEN < padded {
                return Err(StunError::AttributeOverrun);
            }
            let value_at = at + ATTR_HEADER_LEN;
            match kind {
                attr::FINGERPRINT => {
                    if value_len != FINGERPRINT_LEN {
                        return Err(StunError::BadFingerprintLength);
                    }
                    view.fingerprint_at = Some(at);
                }
                // Everything after MESSAGE-INTEGRITY but FINGERPRINT is ignored.
                _ if view.integrity_at.is_some() => {}
                attr::MESSAGE_INTEGRITY => {
                    if value_len != INTEGRITY_LEN {
                        return Err(StunError::BadIntegrityLength);
                    }
                    view.integrity_at = Some(at);
                }
                attr::USERNAME if view.username.is_none() => {
                    view.username = Some((value_at, value_len));
                }
                _ => {}
            }
            at = value_at + padded;
        }
        Ok(view)
    }

    /// The whole message.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.message
    }

    /// The value of the first attribute of type `kind` before MESSAGE-INTEGRITY (what the
    /// integrity covers), if any. The walk is over a message `parse` validated.
    pub fn attribute(&self, kind: u16) -> Option<&'a [u8]> {
        let end = self.integrity_at.unwrap_or(self.message.len());
        let mut at = HEADER_LEN;
        while at + ATTR_HEADER_LEN <= end {
            let value_len = usize::from(be16(self.message, at + 2));
            let value_at = at + ATTR_HEADER_LEN;
            if be16(self.message, at) == kind {
                return self.message.get(value_at..value_at + value_len);
            }
            at = value_at + ((value_len + 3) & !3);
        }
        None
    }

    /// The 14-bit message type.
    pub fn message_type(&self) -> u16 {
        be16(self.message, 0) & 0x3FFF
    }

    /// The 12-bit method (Binding is 0x001).
    pub fn method(&self) -> u16 {
        let t = self.message_type();
        (t & 0x000F) | ((t & 0x00E0) >> 1) | ((t & 0x3E00) >> 2)
    }

    /// The message class.
    pub fn class(&self) -> StunClass {
        let t = self.message_type();
        match ((t >> 7) & 0b10) | ((t >> 4) & 0b01) {
            0b00 => StunClass::Request,
            0b01 => StunClass::Indication,
            0b10 => StunClass::SuccessResponse,
            _ => StunClass::ErrorResponse,
        }
    }

    /// True for an ICE connectivity check: a Binding Request.
    pub fn is_binding_request(&self) -> bool {
        self.method() == METHOD_BINDING && self.class() == StunClass::Request
    }

    /// The 96-bit transaction id.
    pub fn transaction_id(&self) -> &'a [u8; 12] {
        self.message[8..20]
            .try_into()
            .expect("parse checked the 20-byte header")
    }

    /// The raw USERNAME value, if present before MESSAGE-INTEGRITY.
    pub fn username(&self) -> Option<&'a [u8]> {
        self.username.map(|(at, len)| &self.message[at..at + len])
    }

    /// USERNAME split at its first colon into the server (receiver) and client (sender)
    /// ufrags. Both parts must be non-empty.
    pub fn ufrags(&self) -> Result<UfragPair<'a>, StunError> {
        let username = self.username().ok_or(StunError::MissingUsername)?;
        let colon = username
            .iter()
            .position(|&b| b == b':')
            .ok_or(StunError::BadUsername)?;
        let (server, rest) = username.split_at(colon);
        let client = &rest[1..];
        if server.is_empty() || client.is_empty() {
            return Err(StunError::BadUsername);
        }
        Ok(UfragPair { server, client })
    }

    /// True when the message carries MESSAGE-INTEGRITY.
    pub fn has_integrity(&self) -> bool {
        self.integrity_at.is_some()
    }

    /// True when the message carries FINGERPRINT.
    pub fn has_fingerprint(&self) -> bool {
        self.fingerprint_at.is_some()
    }

    /// Checks FINGERPRINT: CRC-32 of the message up to the attribute, xor 0x5354554e
    /// (RFC 8489 §14.7). The header length already covers FINGERPRINT, the last attribute.
    pub fn verify_fingerprint(&self) -> Result<(), StunError> {
        let at = self.fingerprint_at.ok_or(StunError::MissingFingerprint)?;
        let expected = be32(self.message, at + ATTR_HEADER_LEN);
        if crc32fast::hash(&self.message[..at]) ^ FINGERPRINT_XOR == expected {
            Ok(())
        } else {
            Err(StunError::BadFingerprint)
        }
    }

    /// Checks MESSAGE-INTEGRITY (HMAC-SHA1, RFC 8489 §14.5) under `key`. For ICE's
    /// short-term credentials the key is the password itself.
    ///
    /// The MAC covers the message up to the attribute, with the header length rewritten
    /// to end just after MESSAGE-INTEGRITY. The comparison is constant time.
    pub fn verify_integrity(&self, key: &[u8]) -> Result<(), StunError> {
        let at = self.integrity_at.ok_or(StunError::MissingIntegrity)?;
        let tag = &self.message[at + ATTR_HEADER_LEN..at + ATTR_HEADER_LEN + INTEGRITY_LEN];
        let covered_len = at + ATTR_HEADER_LEN + INTEGRITY_LEN - HEADER_LEN;
        let mut mac =
            hmac::Hmac::<sha1::Sha1>::new_from_slice(key).expect("HMAC takes keys of any length");
        mac.update(&self.message[..2]);
        // covered_len < 65536: it is bounded by the 16-bit header length.
        mac.update(&(covered_len as u16).to_be_bytes());
        mac.update(&self.message[4..at]);
        mac.verify_slice(tag).map_err(|_| StunError::BadIntegrity)
    }
}

/// Why a message could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// The buffer is too small for the message.
    BufferTooSmall,
    /// An attribute value is longer than 65535 bytes.
    ValueTooLong,
}

impl core::fmt::Display for WriteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::BufferTooSmall => "buffer too small",
            Self::ValueTooLong => "attribute value longer than 65535 bytes",
        })
    }
}

impl std::error::Error for WriteError {}

/// Writes one STUN message into a caller-owned buffer, attribute by attribute, without
/// allocating. Used by test clients, load generators and fuzz seeds.
#[derive(Debug)]
pub struct StunWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl<'b> StunWriter<'b> {
    /// Starts a message of the given method and class.
    pub fn new(
        buf: &'b mut [u8],
        method: u16,
        class: StunClass,
        transaction_id: &[u8; 12],
    ) -> Result<Self, WriteError> {
        if buf.len() < HEADER_LEN {
            return Err(WriteError::BufferTooSmall);
        }
        buf[0..2].copy_from_slice(&message_type(method, class).to_be_bytes());
        buf[2..4].copy_from_slice(&[0, 0]);
        buf[4..8].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
        buf[8..20].copy_from_slice(transaction_id);
        Ok(StunWriter {
            buf,
            len: HEADER_LEN,
        })
    }

    fn set_length(&mut self, body_len: usize) {
        // Callers keep body_len below 65536 (checked in `reserve`).
        self.buf[2..4].copy_from_slice(&(body_len as u16).to_be_bytes());
    }

    fn reserve(&mut self, value_len: usize) -> Result<usize, WriteError> {
        let padded = (value_len + 3) & !3;
        let end = self.len + ATTR_HEADER_LEN + padded;
        if value_len > usize::from(u16::MAX) || end - HEADER_LEN > usize::from(u16::MAX) {
            return Err(WriteError::ValueTooLong);
        }
        if end > self.buf.len() {
            return Err(WriteError::BufferTooSmall);
        }
        Ok(end)
    }

    /// Appends an attribute, zero-padded to a multiple of 4 bytes.
    pub fn attribute(&mut self, kind: u16, value: &[u8]) -> Result<&mut Self, WriteError> {
        let end = self.reserve(value.len())?;
        let at = self.len;
        self.buf[at..at + 2].copy_from_slice(&kind.to_be_bytes());
        // reserve checked value.len() <= u16::MAX.
        self.buf[at + 2..at + 4].copy_from_slice(&(value.len() as u16).to_be_bytes());
        let value_at = at + ATTR_HEADER_LEN;
        self.buf[value_at..value_at + value.len()].copy_from_slice(value);
        self.buf[value_at + value.len()..end].fill(0);
        self.len = end;
        self.set_length(end - HEADER_LEN);
        Ok(self)
    }

    /// Appends MESSAGE-INTEGRITY computed under `key` over everything written so far.
    pub fn integrity(&mut self, key: &[u8]) -> Result<&mut Self, WriteError> {
        let end = self.reserve(INTEGRITY_LEN)?;
        self.set_length(end - HEADER_LEN);
        let mut mac =
            hmac::Hmac::<sha1::Sha1>::new_from_slice(key).expect("HMAC takes keys of any length");
        mac.update(&self.buf[..self.len]);
        let tag = mac.finalize().into_bytes();
        self.attribute(attr::MESSAGE_INTEGRITY, &tag)
    }

    /// Appends FINGERPRINT over everything written so far; it must be the last attribute.
    pub fn fingerprint(&mut self) -> Result<&mut Self, WriteError> {
        let end = self.reserve(FINGERPRINT_LEN)?;
        self.set_length(end - HEADER_LEN);
        let crc = crc32fast::hash(&self.buf[..self.len]) ^ FINGERPRINT_XOR;
        self.attribute(attr::FINGERPRINT, &crc.to_be_bytes())
    }

    /// The length of the message written so far.
    pub fn finish(&self) -> usize {
        self.len
    }
}

/// Writes an ICE Binding Request from a client to a server: USERNAME
/// `"<server ufrag>:<client ufrag>"`, PRIORITY, ICE-CONTROLLING, MESSAGE-INTEGRITY under
/// `password` and FINGERPRINT, as browsers send them. Returns the message length.
pub fn write_binding_request(
    buf: &mut [u8],
    transaction_id: &[u8; 12],
    server_ufrag: &[u8],
    client_ufrag: &[u8],
    password: &[u8],
) -> Result<usize, WriteError> {
    let mut w = StunWriter::new(buf, METHOD_BINDING, StunClass::Request, transaction_id)?;
    // USERNAME is written in two pieces to avoid building the joined string.
    let username_len = server_ufrag.len() + 1 + client_ufrag.len();
    let end = w.reserve(username_len)?;
    let at = w.len;
    w.buf[at..at + 2].copy_from_slice(&attr::USERNAME.to_be_bytes());
    // reserve checked username_len <= u16::MAX.
    w.buf[at + 2..at + 4].copy_from_slice(&(username_len as u16).to_be_bytes());
    let mut v = at + ATTR_HEADER_LEN;
    w.buf[v..v + server_ufrag.len()].copy_from_slice(server_ufrag);
    v += server_ufrag.len();
    w.buf[v] = b':';
    v += 1;
    w.buf[v..v + client_ufrag.len()].copy_from_slice(client_ufrag);
    v += client_ufrag.len();
    w.buf[v..end].fill(0);
    w.len = end;
    w.set_length(end - HEADER_LEN);
    w.attribute(attr::PRIORITY, &0x6E00_01FFu32.to_be_bytes())?
        .attribute(
            attr::ICE_CONTROLLING,
            &0x932F_F9B1_5126_3B36u64.to_be_bytes(),
        )?
        .integrity(password)?
        .fingerprint()?;
    Ok(w.finish())
}
