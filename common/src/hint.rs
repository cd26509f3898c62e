//! The routing hint: the server ICE ufrag that tells any relay, with no state, which
//! transceiver owns a session, and the stateless ICE password that goes with it.
//!
//! # Layout (version 2)
//!
//! The hint is a short binary record, written as ICE characters (the base64 alphabet,
//! see [`crate::ice_chars`]); every record is a multiple of three bytes, so there is no
//! padding:
//!
//! ```text
//!  byte  0      version (high nibble, = 2) | flags (low nibble: bit 0 = IPv6, bits 1-3 = 0)
//!  byte  1      key id
//!  bytes 2-3    cluster id (big endian)
//!  bytes 4..    transceiver IP: 4 bytes (IPv4) or 16 bytes (IPv6)
//!  next 2       transceiver UDP port (big endian)
//!  next 4       minted: when the transceiver wrote the hint, Unix seconds (big endian)
//!  next 5       random bits (40 ≥ the 24 RFC 8445 §5.3 asks for), chosen by the caller
//!  last 8       MAC: HMAC-SHA256(mac key of `key id`, all bytes before it), truncated
//!
//!  IPv4: 27 bytes = 36 ICE chars;  IPv6: 39 bytes = 52 ICE chars   (RFC 8839: 4..=256)
//! ```
//!
//! The 64-bit MAC makes forging a hint that routes to a chosen transceiver a 2^64 online
//! guess per attempt. Even an authentic hint is forwarded only if its address lies in the
//! relay's allowed transceiver networks. The minted time lets a relay refuse new flows for
//! a hint older than its `hint_max_age`, so ufrags collected from past sessions (a
//! POST-then-DELETE loop) expire; the flows a session already has are not affected, and an
//! ICE restart mints a new hint. Version 1 (no minted time) is refused.
//!
//! # Keys
//!
//! A [`HintKey`] is a secret of 16..=64 bytes shared by relays and transceivers, with a
//! one-byte id. Two sub-keys are derived from it once, at load time, so that the hint MAC
//! and the ICE password never share a key:
//! `mac = HMAC-SHA256(secret, "ufrag-relay/v1/hint-mac")`,
//! `pwd = HMAC-SHA256(secret, "ufrag-relay/v1/ice-pwd")`.
//! [`HintKeys`] holds the current key (used to encode) and optionally the previous one:
//! both verify, so keys rotate without dropping sessions.
//!
//! # Password
//!
//! The ICE password of a session is `ice_chars(HMAC-SHA256(pwd key, ufrag)[..18])`: 24
//! characters (RFC 8839 asks for at least 22). Any relay can therefore check the
//! MESSAGE-INTEGRITY of a Binding Request before it creates a flow, and the transceiver
//! hands the same password to str0m.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hmac::{KeyInit, Mac};
use ipnet::IpNet;
use sha2::Sha256;

use crate::ice_chars;

type HmacSha256 = hmac::Hmac<Sha256>;

/// The hint format version this code writes and reads.
pub const HINT_VERSION: u8 = 2;
/// Length in ICE characters of an IPv4 hint.
pub const HINT_LEN_V4: usize = 36;
/// Length in ICE characters of an IPv6 hint.
pub const HINT_LEN_V6: usize = 52;
/// Bytes of caller-chosen randomness in every hint.
pub const RANDOM_LEN: usize = 5;
/// Length in ICE characters of a derived ICE password.
pub const PASSWORD_LEN: usize = 24;
/// Smallest accepted key secret.
pub const MIN_SECRET_LEN: usize = 16;
/// Largest accepted key secret (one SHA-256 block).
pub const MAX_SECRET_LEN: usize = 64;

// RFC 8839 §5.4: ice-ufrag is 4..=256 characters, ice-pwd 22..=256.
const _: () = assert!(HINT_LEN_V4 >= 4 && HINT_LEN_V6 <= 256);
const _: () = assert!(PASSWORD_LEN >= 22 && PASSWORD_LEN.is_multiple_of(4));

const MAC_LEN: usize = 8;
const MINTED_LEN: usize = 4;
const FLAG_IPV6: u8 = 0x01;
const RAW_LEN_V4: usize = HINT_LEN_V4 / 4 * 3;
const RAW_LEN_V6: usize = HINT_LEN_V6 / 4 * 3;
// version+flags, key id, cluster, IP, port, minted, random, MAC.
const _: () = assert!(RAW_LEN_V4 == 4 + 4 + 2 + MINTED_LEN + RANDOM_LEN + MAC_LEN);
const _: () = assert!(RAW_LEN_V6 == 4 + 16 + 2 + MINTED_LEN + RANDOM_LEN + MAC_LEN);

/// Why a server ufrag is not a hint this relay will route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HintError {
    /// The ufrag is neither 36 nor 52 characters, or its family flag disagrees with its
    /// length.
    BadLength,
    /// A character outside the ICE character set.
    BadAlphabet,
    /// The version nibble is not [`HINT_VERSION`] or reserved flag bits are set.
    UnknownVersion,
    /// The key id is not one of the accepted keys.
    UnknownKeyId,
    /// The MAC does not verify.
    BadMac,
    /// The transceiver address is outside the allowed networks.
    DestinationNotAllowed,
}

impl HintError {
    /// A stable snake_case label for metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BadLength => "hint_bad_length",
            Self::BadAlphabet => "hint_bad_alphabet",
            Self::UnknownVersion => "hint_unknown_version",
            Self::UnknownKeyId => "hint_unknown_key",
            Self::BadMac => "hint_bad_mac",
            Self::DestinationNotAllowed => "hint_destination_not_allowed",
        }
    }
}

impl core::fmt::Display for HintError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for HintError {}

/// Why a key could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The secret has the wrong size.
    #[error("key {id}: secret is {len} bytes, expected {MIN_SECRET_LEN}..={MAX_SECRET_LEN}")]
    SecretLength {
        /// The key id.
        id: u8,
        /// The secret's length.
        len: usize,
    },
    /// Both keys have the same id.
    #[error("key id {0} appears twice")]
    DuplicateId(u8),
    /// A line of a key file is not `<id>:<hex secret>`.
    #[error("line {line}: {reason}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// The key text holds no key, or more than two.
    #[error("expected 1 or 2 keys (current, then previous), found {0}")]
    Count(usize),
}

/// What a hint says: where the session lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RoutingHint {
    /// The cluster whose relays can reach the transceiver.
    pub cluster: u16,
    /// The transceiver worker's internal address.
    pub transceiver: SocketAddr,
}

/// A hint that decoded and authenticated, with the id of the key that verified it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifiedHint {
    /// The decoded hint.
    pub hint: RoutingHint,
    /// The key id that authenticated it (needed to derive the ICE password).
    pub key_id: u8,
    /// When the transceiver wrote the hint, in Unix seconds.
    pub minted_unix_s: u32,
    /// The hint's random bytes: the transceiver keeps them for the whole session (every
    /// ICE restart's hint carries the same), so with the hint's destination they name
    /// the session at a relay, whatever its current ufrag.
    pub session: [u8; RANDOM_LEN],
}

/// A server ufrag decoded by [`HintKeys::recognise`]: the shape of a hint under a key we
/// hold, its MAC not yet checked.
#[derive(Clone, Copy, Debug)]
pub struct HintShape {
    raw: [u8; RAW_LEN_V6],
    len: usize,
}

/// One hint key with its derived MAC and password keys, ready to use.
#[derive(Clone)]
pub struct HintKey {
    id: u8,
    mac: HmacSha256,
    pwd: HmacSha256,
    /// Authenticates the routes relays write to the route cache. Boxed: it is used once
    /// per flow, and the keys sit in every forwarder's policy, where its state would
    /// otherwise add some 200 bytes per key next to what each datagram reads.
    route: Box<HmacSha256>,
    /// The secret is guessable ([`is_example_secret`]): for tests, never a deployment.
    example: bool,
}

/// A secret that is guessable rather than random: what examples, tests and people write.
/// Bytes in a fixed step (the repository's test key is 0, 1, 2, …; a repeated byte, a
/// countdown), fewer than 8 distinct byte values, or printable text only (a passphrase,
/// or hex digits pasted as text). A random secret is any of these with odds below 2⁻²³
/// at the 16-byte minimum and 2⁻⁴⁶ at 32 bytes. A deployment must never run with one:
/// ICE passwords derive from the key.
pub fn is_example_secret(secret: &[u8]) -> bool {
    let step = match secret {
        [a, b, ..] => b.wrapping_sub(*a),
        _ => 0,
    };
    let stepped = secret.windows(2).all(|w| w[1].wrapping_sub(w[0]) == step);
    let mut seen = [false; 256];
    for b in secret {
        seen[usize::from(*b)] = true;
    }
    let few_values = seen.iter().filter(|s| **s).count() < 8;
    let text = secret.iter().all(|b| (0x20..=0x7e).contains(b));
    stepped || few_values || text
}

impl core::fmt::Debug for HintKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HintKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn derive(secret: &[u8], label: &[u8]) -> HmacSha256 {
    let mut kdf = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    kdf.update(label);
    let sub_key = kdf.finalize().into_bytes();
    HmacSha256::new_from_slice(&sub_key).expect("HMAC takes keys of any length")
}

impl HintKey {
    /// Derives the MAC and password keys from a secret of 16..=64 bytes.
    pub fn new(id: u8, secret: &[u8]) -> Result<Self, KeyError> {
        if !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&secret.len()) {
            return Err(KeyError::SecretLength {
                id,
                len: secret.len(),
            });
        }
        Ok(HintKey {
            id,
            mac: derive(secret, b"ufrag-relay/v1/hint-mac"),
            pwd: derive(secret, b"ufrag-relay/v1/ice-pwd"),
            route: Box::new(derive(secret, b"ufrag-relay/v1/route-cache")),
            example: is_example_secret(secret),
        })
    }

    /// The key id carried in hints made with this key.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// Its secret is an example's ([`is_example_secret`]).
    pub fn is_example(&self) -> bool {
        self.example
    }
}

/// A server ufrag written by [`HintKeys::encode`]: ICE characters in a fixed buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HintUfrag {
    chars: [u8; HINT_LEN_V6],
    len: u8,
}

impl HintUfrag {
    /// The ufrag as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.chars[..usize::from(self.len)]
    }

    /// The ufrag as text (always ASCII).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).expect("ICE characters are ASCII")
    }
}

impl core::fmt::Debug for HintUfrag {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Bytes of a route-cache entry's MAC ([`HintKeys::route_mac`]).
pub const ROUTE_MAC_LEN: usize = 16;

/// A derived ICE password: 24 ICE characters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IcePassword([u8; PASSWORD_LEN]);

impl IcePassword {
    /// The password as bytes (the STUN short-term credential key).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The password as text (always ASCII).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.0).expect("ICE characters are ASCII")
    }
}

impl core::fmt::Debug for IcePassword {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("IcePassword(..)")
    }
}

/// The accepted hint keys: the current one (encodes and verifies) and optionally the
/// previous one (verifies only), for rotation.
#[derive(Clone, Debug)]
pub struct HintKeys {
    current: HintKey,
    previous: Option<HintKey>,
}

impl HintKeys {
    /// Accepts `current` and, during a rotation, `previous`.
    pub fn new(current: HintKey, previous: Option<HintKey>) -> Result<Self, KeyError> {
        if let Some(p) = &previous
            && p.id == current.id
        {
            return Err(KeyError::DuplicateId(p.id));
        }
        Ok(HintKeys { current, previous })
    }

    /// Parses key text: one key per line as `<id>:<hex secret>`, the current key first and
    /// an optional previous key second. Blank lines and `#` comments are ignored.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let mut keys: Vec<HintKey> = Vec::with_capacity(2);
        let mut count = 0;
        for (index, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let syntax = |reason| KeyError::Syntax {
                line: index + 1,
                reason,
            };
            let (id, hex) = line
                .split_once(':')
                .ok_or_else(|| syntax("expected <id>:<hex secret>"))?;
            let id: u8 = id
                .trim()
                .parse()
                .map_err(|_| syntax("key id must be an integer 0..=255"))?;
            let secret =
                crate::wire::unhex(hex.trim()).ok_or_else(|| syntax("secret is not hex"))?;
            count += 1;
            if keys.len() < 2 {
                keys.push(HintKey::new(id, &secret)?);
            }
        }
        if !(1..=2).contains(&count) {
            return Err(KeyError::Count(count));
        }
        let mut keys = keys.into_iter();
        let current = keys.next().expect("count >= 1");
        HintKeys::new(current, keys.next())
    }

    /// The key used to encode new hints.
    pub fn current(&self) -> &HintKey {
        &self.current
    }

    /// The id of the previous key, which still verifies, if there is one.
    pub fn previous_id(&self) -> Option<u8> {
        self.previous.as_ref().map(HintKey::id)
    }

    /// The id of a key whose secret is an example's, if one is.
    pub fn example_key(&self) -> Option<u8> {
        std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .find(|k| k.example)
            .map(HintKey::id)
    }

    fn by_id(&self, id: u8) -> Option<&HintKey> {
        if self.current.id == id {
            Some(&self.current)
        } else {
            self.previous.as_ref().filter(|k| k.id == id)
        }
    }

    /// Writes the hint for `hint`, minted at `minted_unix_s` (see [`unix_seconds`]), with
    /// the current key and the caller's random bytes.
    pub fn encode(
        &self,
        hint: &RoutingHint,
        minted_unix_s: u32,
        random: [u8; RANDOM_LEN],
    ) -> HintUfrag {
        let key = &self.current;
        let mut raw = [0u8; RAW_LEN_V6];
        let (flags, ip_len) = match hint.transceiver.ip().to_canonical() {
            IpAddr::V4(v4) => {
                raw[4..8].copy_from_slice(&v4.octets());
                (0, 4)
            }
            IpAddr::V6(v6) => {
                raw[4..20].copy_from_slice(&v6.octets());
                (FLAG_IPV6, 16)
            }
        };
        raw[0] = HINT_VERSION << 4 | flags;
        raw[1] = key.id;
        raw[2..4].copy_from_slice(&hint.cluster.to_be_bytes());
        let mut at = 4 + ip_len;
        raw[at..at + 2].copy_from_slice(&hint.transceiver.port().to_be_bytes());
        at += 2;
        raw[at..at + MINTED_LEN].copy_from_slice(&minted_unix_s.to_be_bytes());
        at += MINTED_LEN;
        raw[at..at + RANDOM_LEN].copy_from_slice(&random);
        at += RANDOM_LEN;
        let mut mac = key.mac.clone();
        mac.update(&raw[..at]);
        raw[at..at + MAC_LEN].copy_from_slice(&mac.finalize().into_bytes()[..MAC_LEN]);
        let raw_len = at + MAC_LEN;

        let mut out = HintUfrag {
            chars: [0; HINT_LEN_V6],
            len: 0,
        };
        let chars_len = raw_len / 3 * 4;
        ice_chars::encode(&raw[..raw_len], &mut out.chars[..chars_len]);
        out.len = chars_len as u8; // 36 or 52
        out
    }

    /// Decodes and authenticates a server ufrag, then checks that its transceiver address
    /// lies in `allowed`. Errors are checked in this order: length, alphabet, version, key
    /// id, MAC, destination. No allocation; the MAC comparison is constant time.
    pub fn verify(&self, ufrag: &[u8], allowed: &[IpNet]) -> Result<VerifiedHint, HintError> {
        let verified = self.authenticate(ufrag)?;
        let ip = verified.hint.transceiver.ip();
        if !allowed.iter().any(|net| net.contains(&ip)) {
            return Err(HintError::DestinationNotAllowed);
        }
        Ok(verified)
    }

    /// Whether `ufrag` has a hint's shape under a key this relay holds: its length,
    /// alphabet, version and key id, and no MAC (the checks a first packet passes before
    /// it may spend an authentication attempt). The decoded record, for
    /// [`HintKeys::authenticate_shape`]. Errors as [`HintKeys::authenticate`]'s.
    pub fn recognise(&self, ufrag: &[u8]) -> Result<HintShape, HintError> {
        let raw_len = match ufrag.len() {
            HINT_LEN_V4 => RAW_LEN_V4,
            HINT_LEN_V6 => RAW_LEN_V6,
            _ => return Err(HintError::BadLength),
        };
        let mut shape = HintShape {
            raw: [0u8; RAW_LEN_V6],
            len: raw_len,
        };
        let raw = &mut shape.raw[..raw_len];
        ice_chars::decode(ufrag, raw).map_err(|e| match e {
            ice_chars::DecodeError::Length => HintError::BadLength,
            ice_chars::DecodeError::Alphabet => HintError::BadAlphabet,
        })?;
        if raw[0] >> 4 != HINT_VERSION || raw[0] & 0x0E != 0 {
            return Err(HintError::UnknownVersion);
        }
        let is_v6 = raw[0] & FLAG_IPV6 != 0;
        if is_v6 != (raw_len == RAW_LEN_V6) {
            return Err(HintError::BadLength);
        }
        self.by_id(raw[1]).ok_or(HintError::UnknownKeyId)?;
        Ok(shape)
    }

    /// Decodes and authenticates a server ufrag without the destination check: for a
    /// global relay, whose hint names a transceiver in another cluster's networks.
    pub fn authenticate(&self, ufrag: &[u8]) -> Result<VerifiedHint, HintError> {
        self.authenticate_shape(&self.recognise(ufrag)?)
    }

    /// Authenticates a record [`HintKeys::recognise`] decoded: its MAC under the key it
    /// names (a key removed since is `UnknownKeyId`).
    pub fn authenticate_shape(&self, shape: &HintShape) -> Result<VerifiedHint, HintError> {
        let raw_len = shape.len;
        let raw = &shape.raw[..raw_len];
        let key = self.by_id(raw[1]).ok_or(HintError::UnknownKeyId)?;
        let is_v6 = raw_len == RAW_LEN_V6;
        let (body, tag) = raw.split_at(raw_len - MAC_LEN);
        let mut mac = key.mac.clone();
        mac.update(body);
        mac.verify_truncated_left(tag)
            .map_err(|_| HintError::BadMac)?;

        let ip = if is_v6 {
            let octets: [u8; 16] = body[4..20].try_into().expect("39-byte record");
            IpAddr::V6(Ipv6Addr::from(octets))
        } else {
            let octets: [u8; 4] = body[4..8].try_into().expect("27-byte record");
            IpAddr::V4(Ipv4Addr::from(octets))
        };
        let port_at = if is_v6 { 20 } else { 8 };
        let port = u16::from_be_bytes([body[port_at], body[port_at + 1]]);
        let minted_at = port_at + 2;
        let minted: [u8; MINTED_LEN] = body[minted_at..minted_at + MINTED_LEN]
            .try_into()
            .expect("every record holds the minted time");
        let random_at = minted_at + MINTED_LEN;
        let session: [u8; RANDOM_LEN] = body[random_at..random_at + RANDOM_LEN]
            .try_into()
            .expect("every record holds the random bytes");
        Ok(VerifiedHint {
            hint: RoutingHint {
                cluster: u16::from_be_bytes([body[2], body[3]]),
                transceiver: SocketAddr::new(ip, port),
            },
            key_id: key.id,
            minted_unix_s: u32::from_be_bytes(minted),
            session,
        })
    }

    /// The MAC of a route-cache entry (`entry`: the flow and its route, as the cache
    /// stores them) under the current key: that key's id and [`ROUTE_MAC_LEN`] bytes.
    pub fn route_mac(&self, entry: &[u8]) -> (u8, [u8; ROUTE_MAC_LEN]) {
        let mut mac = HmacSha256::clone(&self.current.route);
        mac.update(entry);
        let digest = mac.finalize().into_bytes();
        let mut out = [0u8; ROUTE_MAC_LEN];
        out.copy_from_slice(&digest[..ROUTE_MAC_LEN]);
        (self.current.id, out)
    }

    /// Whether `tag` is `entry`'s route MAC under key `key_id` (the current or the
    /// previous key), compared in constant time; false for an unknown key or a tag of
    /// another length.
    pub fn route_mac_verifies(&self, key_id: u8, entry: &[u8], tag: &[u8]) -> bool {
        let Some(key) = self.by_id(key_id) else {
            return false;
        };
        if tag.len() != ROUTE_MAC_LEN {
            return false;
        }
        let mut mac = HmacSha256::clone(&key.route);
        mac.update(entry);
        mac.verify_truncated_left(tag).is_ok()
    }

    /// The ICE password for `ufrag` under key `key_id`, or `None` for an unknown key.
    pub fn ice_password(&self, key_id: u8, ufrag: &[u8]) -> Option<IcePassword> {
        let key = self.by_id(key_id)?;
        let mut mac = key.pwd.clone();
        mac.update(ufrag);
        let digest = mac.finalize().into_bytes();
        let mut out = [0u8; PASSWORD_LEN];
        ice_chars::encode(&digest[..PASSWORD_LEN / 4 * 3], &mut out);
        Some(IcePassword(out))
    }
}

/// The id of the key a hint ufrag names (byte 1 of its record), not verified: for a
/// transceiver counting its own sessions by key, never for admitting anything. `None` when
/// `ufrag` is not a hint.
pub fn key_id_of(ufrag: &[u8]) -> Option<u8> {
    decode_unverified(ufrag).map(|(raw, _)| raw[1])
}

/// A hint ufrag's record, decoded from its characters with nothing checked but its
/// length and alphabet, and the record's length. `None` when `ufrag` is not a hint.
fn decode_unverified(ufrag: &[u8]) -> Option<([u8; RAW_LEN_V6], usize)> {
    let raw_len = match ufrag.len() {
        HINT_LEN_V4 => RAW_LEN_V4,
        HINT_LEN_V6 => RAW_LEN_V6,
        _ => return None,
    };
    let mut raw = [0u8; RAW_LEN_V6];
    ice_chars::decode(ufrag, &mut raw[..raw_len]).ok()?;
    Some((raw, raw_len))
}

/// What a hint ufrag says without its key: when it was minted and its session bytes.
/// `None` for anything that is not a hint of this version. For the transceiver, which
/// keeps a session's bytes through its ICE restarts; nothing here is authenticated, so
/// it never routes or admits anything.
pub fn unverified_minting(ufrag: &[u8]) -> Option<(u32, [u8; RANDOM_LEN])> {
    let (raw, raw_len) = decode_unverified(ufrag)?;
    if raw[0] >> 4 != HINT_VERSION {
        return None;
    }
    let ip_len = if raw_len == RAW_LEN_V6 { 16 } else { 4 };
    let minted_at = 4 + ip_len + 2;
    let minted = u32::from_be_bytes(raw[minted_at..minted_at + MINTED_LEN].try_into().ok()?);
    let random_at = minted_at + MINTED_LEN;
    let session = raw[random_at..random_at + RANDOM_LEN].try_into().ok()?;
    Some((minted, session))
}

/// The wall clock in Unix seconds, as hints carry it (until 2106).
pub fn unix_seconds(at: std::time::SystemTime) -> u32 {
    let seconds = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    u32::try_from(seconds).unwrap_or(u32::MAX)
}
