//! Bundles: several relay ↔ transceiver frames in one internal datagram, so that what one
//! receive batch produced for one peer costs that leg one kernel send and one receive
//! instead of one per datagram. Written into a caller's buffer and read in place: no
//! allocation either way.
//!
//! # Layout (frame version 2), all fields big endian
//!
//! ```text
//!  byte 0      0xF2: the frame magic nibble 0xF, version 2 (a bundle)
//!  byte 1      count: the frames that follow, 1 to 255
//!  bytes 2-3   reserved, zero
//!  then, count times:
//!    2 bytes   the length of the frame that follows (at least MIN_FRAME_LEN)
//!    length    a version-1 frame ([`crate::frame`]): its header, then its datagram
//! ```
//!
//! A receiver that knows only version 1 drops a bundle whole (`frame_unknown_version`),
//! so a sender bundles only towards a peer known to read bundles.
//!
//! A bundle is checked whole before any frame in it is used ([`Bundle::parse`]): a count
//! of zero, a length below the smallest frame or past the end, or bytes left after the
//! last frame make it malformed, and it is dropped as one datagram. Each frame of a
//! well-formed bundle is then a frame like any other: parsed, forwarded or dropped under
//! its own reason, without touching its neighbours.

use crate::frame::{FIXED_LEN, FrameError, FrameHeader};

/// The frame version that marks a bundle.
pub const BUNDLE_VERSION: u8 = 2;
/// The bundle's own header: the version byte, the count and two reserved bytes.
pub const BUNDLE_HEADER_LEN: usize = 4;
/// Each frame's length prefix.
pub const LENGTH_PREFIX: usize = 2;
/// The shortest frame a bundle may hold: an IPv4/IPv4 header and one byte of datagram.
pub const MIN_FRAME_LEN: usize = FIXED_LEN + 4 + 4 + 1;
/// The most frames in one bundle (the count is one byte).
pub const MAX_FRAMES: usize = u8::MAX as usize;

const FIRST_BYTE: u8 = 0xF0 | BUNDLE_VERSION;

/// Why a datagram is not a well-formed bundle. The whole datagram is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BundleError {
    /// Shorter than the bundle header.
    TooShort,
    /// The first byte is not 0xF2.
    NotABundle,
    /// The reserved bytes are not zero.
    ReservedBitsSet,
    /// A count of zero.
    Empty,
    /// A frame's length is below [`MIN_FRAME_LEN`].
    FrameTooShort,
    /// A frame's length runs past the end of the datagram (or the count promises more
    /// frames than it holds).
    FrameOverrun,
    /// Bytes after the last frame the count announces.
    TrailingBytes,
}

impl BundleError {
    /// A stable snake_case label for metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TooShort => "bundle_too_short",
            Self::NotABundle => "bundle_not_a_bundle",
            Self::ReservedBitsSet => "bundle_reserved_bits",
            Self::Empty => "bundle_empty",
            Self::FrameTooShort => "bundle_frame_too_short",
            Self::FrameOverrun => "bundle_frame_overrun",
            Self::TrailingBytes => "bundle_trailing_bytes",
        }
    }
}

impl core::fmt::Display for BundleError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for BundleError {}

/// Whether `datagram` says it is a bundle (its first byte); [`Bundle::parse`] says
/// whether it is a well-formed one.
pub fn is_bundle(datagram: &[u8]) -> bool {
    datagram.first() == Some(&FIRST_BYTE)
}

/// A well-formed bundle's frames, in order: each a version-1 frame for
/// [`FrameHeader::parse`].
#[derive(Clone, Debug)]
pub struct Bundle<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Bundle<'a> {
    /// Checks the whole of `datagram` and returns its frames; never panics.
    pub fn parse(datagram: &'a [u8]) -> Result<Bundle<'a>, BundleError> {
        let header = datagram
            .get(..BUNDLE_HEADER_LEN)
            .ok_or(BundleError::TooShort)?;
        if header[0] != FIRST_BYTE {
            return Err(BundleError::NotABundle);
        }
        if header[2] != 0 || header[3] != 0 {
            return Err(BundleError::ReservedBitsSet);
        }
        let count = usize::from(header[1]);
        if count == 0 {
            return Err(BundleError::Empty);
        }
        let frames = &datagram[BUNDLE_HEADER_LEN..];
        let mut rest = frames;
        for _ in 0..count {
            let (frame_len, after) = split_prefix(rest).ok_or(BundleError::FrameOverrun)?;
            if frame_len < MIN_FRAME_LEN {
                return Err(BundleError::FrameTooShort);
            }
            rest = after.get(frame_len..).ok_or(BundleError::FrameOverrun)?;
        }
        if !rest.is_empty() {
            return Err(BundleError::TrailingBytes);
        }
        Ok(Bundle {
            rest: frames,
            left: count,
        })
    }
}

/// A frame's length prefix and what follows it.
fn split_prefix(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let (prefix, after) = bytes.split_first_chunk::<LENGTH_PREFIX>()?;
    Some((usize::from(u16::from_be_bytes(*prefix)), after))
}

impl<'a> Iterator for Bundle<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        // Bundle::parse walked these same lengths: they fit.
        let (frame_len, after) = split_prefix(self.rest)?;
        let (frame, rest) = after.split_at_checked(frame_len)?;
        self.rest = rest;
        self.left -= 1;
        Some(frame)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Bundle<'_> {}

/// Why a frame did not go into a bundle: the bundle stays as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// Not enough room left in the buffer (the internal path's MTU), or already
    /// [`MAX_FRAMES`] frames: send this bundle and start another.
    Full,
    /// A frame no bundle can hold: an empty datagram, or one longer than a length
    /// prefix can say.
    Unbundleable,
}

/// Writes a bundle into a caller's buffer, whose length is the largest bundle to send
/// (the internal path's MTU less the IP and UDP headers: bundles never fragment).
#[derive(Debug)]
pub struct BundleWriter<'b> {
    out: &'b mut [u8],
    len: usize,
    count: usize,
}

impl<'b> BundleWriter<'b> {
    /// A writer into `out`.
    pub fn new(out: &'b mut [u8]) -> Self {
        BundleWriter {
            out,
            len: BUNDLE_HEADER_LEN,
            count: 0,
        }
    }

    /// Frames written so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The bytes a frame of `header` around `datagram` takes in a bundle, length prefix
    /// included.
    pub fn room_for(header: &FrameHeader, datagram: &[u8]) -> usize {
        LENGTH_PREFIX + header.encoded_len() + datagram.len()
    }

    /// Appends `datagram` framed with `header`.
    pub fn push(&mut self, header: &FrameHeader, datagram: &[u8]) -> Result<(), PushError> {
        self.len = append_frame(self.out, self.len, self.count, header, datagram)?;
        self.count += 1;
        Ok(())
    }

    /// The finished bundle; `None` when nothing was pushed (or the buffer cannot even
    /// hold the bundle header).
    pub fn finish(self) -> Option<&'b [u8]> {
        let len = close_bundle(self.out, self.len, self.count)?;
        Some(&self.out[..len])
    }
}

/// Writes one frame (its length prefix, `header`, `datagram`) at `len` into a bundle of
/// `count` frames held in `out`; returns the bundle's new length.
fn append_frame(
    out: &mut [u8],
    len: usize,
    count: usize,
    header: &FrameHeader,
    datagram: &[u8],
) -> Result<usize, PushError> {
    let frame_len = header.encoded_len() + datagram.len();
    let prefix = u16::try_from(frame_len).map_err(|_| PushError::Unbundleable)?;
    if datagram.is_empty() {
        return Err(PushError::Unbundleable);
    }
    if count == MAX_FRAMES {
        return Err(PushError::Full);
    }
    let end = len + LENGTH_PREFIX + frame_len;
    let slot = out.get_mut(len..end).ok_or(PushError::Full)?;
    let (length, frame) = slot.split_at_mut(LENGTH_PREFIX);
    length.copy_from_slice(&prefix.to_be_bytes());
    let header_len = header
        .emit(frame)
        .map_err(|_: FrameError| PushError::Full)?;
    frame[header_len..].copy_from_slice(datagram);
    Ok(end)
}

/// Writes the bundle header for `count` frames in `out[..len]`; returns `len`, or `None`
/// when there is no frame (or no room for the header).
fn close_bundle(out: &mut [u8], len: usize, count: usize) -> Option<usize> {
    if count == 0 {
        return None;
    }
    let header = out.get_mut(..BUNDLE_HEADER_LEN)?;
    header[0] = FIRST_BYTE;
    header[1] = u8::try_from(count).ok()?;
    header[2..].fill(0);
    Some(len)
}

/// What stands for a frame's fate until the datagram that carries it is sent, gathered
/// with the others in its bundle and settled with them: the relay's tickets, the
/// transceiver's count.
pub trait Gather: Default {
    /// Takes in what `other` stands for.
    fn gather(&mut self, other: Self);
}

impl Gather for usize {
    fn gather(&mut self, other: usize) {
        *self += other;
    }
}

/// Bundles open at once in one [`Bundler`], one per destination. A worker's batch goes to
/// a few peers (its transceivers, or its relay workers); a destination beyond these
/// closes one of the open bundles, each slot in turn.
pub const OPEN_BUNDLES: usize = 8;

/// The largest bundle towards `to` over a path of `mtu` bytes: the MTU less the IP and
/// UDP headers, so that a bundle never fragments.
pub const fn max_bundle_len(mtu: u16, ipv4: bool) -> usize {
    let ip_and_udp = if ipv4 { 20 + 8 } else { 40 + 8 };
    (mtu as usize).saturating_sub(ip_and_udp)
}

/// The frames queued for one destination since its bundle was opened.
#[derive(Debug)]
struct OpenBundle<T> {
    /// `None`: this slot is free.
    to: Option<core::net::SocketAddr>,
    buf: Box<[u8]>,
    len: usize,
    count: usize,
    gathered: T,
}

/// The sending side of bundles: frames for the same destination gathered into one
/// datagram until the caller closes them all (at the end of the receive batch that
/// produced them: a bundle never waits for traffic). Sans-IO: a closed datagram goes to
/// the caller's `emit(to, head, body, gathered)`, to send `head` then `body` to `to`;
/// its buffers are allocated once, at [`Bundler::new`].
///
/// Frames for one destination leave in the order they were pushed. A bundle of one frame
/// leaves as that plain version-1 frame, and so does a frame too long for any bundle, so
/// a lone datagram costs the leg nothing over the frames of version 1.
#[derive(Debug)]
pub struct Bundler<T> {
    mtu: u16,
    open: Vec<OpenBundle<T>>,
    /// The slot that closes next when every slot is taken (each in turn).
    oldest: usize,
}

impl<T: Gather> Bundler<T> {
    /// A bundler for an internal path of `mtu` bytes, whose datagrams the caller can send
    /// up to `longest_datagram` bytes long.
    pub fn new(mtu: u16, longest_datagram: usize) -> Self {
        let longest = max_bundle_len(mtu, true).min(longest_datagram);
        Bundler {
            mtu,
            open: (0..OPEN_BUNDLES)
                .map(|_| OpenBundle {
                    to: None,
                    buf: vec![0; longest].into_boxed_slice(),
                    len: BUNDLE_HEADER_LEN,
                    count: 0,
                    gathered: T::default(),
                })
                .collect(),
            oldest: 0,
        }
    }

    /// Queues `datagram`, framed with `header`, for `to`; `gathered` stands for it. Emits
    /// whatever has to leave first to make room: the destination's full bundle, or one
    /// open bundle (each slot in turn) when every slot is taken.
    pub fn push<E>(
        &mut self,
        to: core::net::SocketAddr,
        header: &FrameHeader,
        datagram: &[u8],
        gathered: T,
        emit: &mut E,
    ) where
        E: FnMut(core::net::SocketAddr, &[u8], &[u8], T),
    {
        let limit = max_bundle_len(self.mtu, to.ip().to_canonical().is_ipv4());
        let slot = match self.open.iter().position(|b| b.to == Some(to)) {
            Some(slot) => slot,
            None => {
                let slot = match self.open.iter().position(|b| b.to.is_none()) {
                    Some(free) => free,
                    None => {
                        let oldest = self.oldest;
                        self.oldest = (oldest + 1) % self.open.len();
                        self.close(oldest, emit);
                        oldest
                    }
                };
                self.open[slot].to = Some(to);
                slot
            }
        };
        let bundle = &mut self.open[slot];
        let cap = limit.min(bundle.buf.len());
        let room = &mut bundle.buf[..cap];
        match append_frame(room, bundle.len, bundle.count, header, datagram) {
            Ok(len) => {
                bundle.len = len;
                bundle.count += 1;
                bundle.gathered.gather(gathered);
                return;
            }
            Err(PushError::Full) if bundle.count > 0 => {
                // Send what this destination has so far, then start again with this frame.
                self.close(slot, emit);
                self.open[slot].to = Some(to);
                let bundle = &mut self.open[slot];
                let room = &mut bundle.buf[..cap];
                if let Ok(len) = append_frame(room, bundle.len, 0, header, datagram) {
                    bundle.len = len;
                    bundle.count = 1;
                    bundle.gathered = gathered;
                    return;
                }
                self.open[slot].to = None;
            }
            Err(_) => self.close(slot, emit),
        }
        // No bundle holds it: it leaves alone, as a version-1 frame, after the frames
        // queued before it for the same destination.
        let mut head = [0u8; crate::frame::MAX_HEADER_LEN];
        // MAX_HEADER_LEN holds every header.
        let head_len = header.emit(&mut head).unwrap_or_default();
        emit(to, &head[..head_len], datagram, gathered);
    }

    /// Emits every open bundle: the end of a batch.
    pub fn close_all<E>(&mut self, emit: &mut E)
    where
        E: FnMut(core::net::SocketAddr, &[u8], &[u8], T),
    {
        for slot in 0..self.open.len() {
            self.close(slot, emit);
        }
        self.oldest = 0;
    }

    /// True when no frame waits.
    pub fn is_empty(&self) -> bool {
        self.open.iter().all(|b| b.count == 0)
    }

    /// Emits slot `slot`'s bundle (a lone frame as itself) and frees the slot.
    fn close<E>(&mut self, slot: usize, emit: &mut E)
    where
        E: FnMut(core::net::SocketAddr, &[u8], &[u8], T),
    {
        let bundle = &mut self.open[slot];
        let to = bundle.to.take();
        let count = std::mem::replace(&mut bundle.count, 0);
        let len = std::mem::replace(&mut bundle.len, BUNDLE_HEADER_LEN);
        let gathered = std::mem::take(&mut bundle.gathered);
        let Some(to) = to else { return };
        match count {
            0 => {}
            1 => emit(
                to,
                &[],
                &bundle.buf[BUNDLE_HEADER_LEN + LENGTH_PREFIX..len],
                gathered,
            ),
            _ => {
                if let Some(len) = close_bundle(&mut bundle.buf, len, count) {
                    emit(to, &[], &bundle.buf[..len], gathered);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Transport;
    use core::net::SocketAddr;

    fn header(client: &str, vip: &str) -> FrameHeader {
        FrameHeader::new(client.parse().unwrap(), vip.parse().unwrap())
    }

    #[test]
    fn frames_of_every_family_and_transport_come_back_in_order() {
        let frames = [
            (
                header("198.51.100.7:5000", "203.0.113.1:3478"),
                &b"\x80rtp"[..],
            ),
            (
                header("[2001:db8::7]:5001", "203.0.113.1:3478"),
                &b"\x16dtls"[..],
            ),
            (
                FrameHeader::over(
                    Transport::Tcp,
                    "[2001:db8::8]:5002".parse().unwrap(),
                    "[2001:db8::1]:443".parse().unwrap(),
                ),
                &b"\x00\x01stun"[..],
            ),
        ];
        let mut buf = [0u8; 1472];
        let mut writer = BundleWriter::new(&mut buf);
        for (h, d) in &frames {
            writer.push(h, d).unwrap();
        }
        assert_eq!(writer.count(), 3);
        let bundle = writer.finish().unwrap();
        assert!(is_bundle(bundle));
        let expected_len: usize = BUNDLE_HEADER_LEN
            + frames
                .iter()
                .map(|(h, d)| BundleWriter::room_for(h, d))
                .sum::<usize>();
        assert_eq!(bundle.len(), expected_len);
        let parsed = Bundle::parse(bundle).unwrap();
        assert_eq!(parsed.len(), 3);
        for (frame, (h, d)) in parsed.zip(&frames) {
            assert_eq!(FrameHeader::parse(frame), Ok((*h, *d)));
        }
    }

    #[test]
    fn a_full_bundle_refuses_the_next_frame_and_stays_whole() {
        let h = header("198.51.100.7:5000", "203.0.113.1:3478");
        let datagram = [0x80u8; 100];
        // Room for exactly two frames of 2 + 16 + 100 bytes.
        let mut buf = [0u8; BUNDLE_HEADER_LEN + 2 * 118];
        let mut writer = BundleWriter::new(&mut buf);
        writer.push(&h, &datagram).unwrap();
        writer.push(&h, &datagram).unwrap();
        assert_eq!(writer.push(&h, &datagram), Err(PushError::Full));
        assert_eq!(writer.push(&h, &[]), Err(PushError::Unbundleable));
        let bundle = writer.finish().unwrap();
        assert_eq!(Bundle::parse(bundle).unwrap().count(), 2);
        assert!(BundleWriter::new(&mut [0u8; 64]).finish().is_none());
    }

    #[test]
    fn at_most_255_frames() {
        let h = header("198.51.100.7:5000", "203.0.113.1:3478");
        let mut buf = vec![0u8; 64 * 1024];
        let mut writer = BundleWriter::new(&mut buf);
        for _ in 0..MAX_FRAMES {
            writer.push(&h, b"x").unwrap();
        }
        assert_eq!(writer.push(&h, b"x"), Err(PushError::Full));
        assert_eq!(Bundle::parse(writer.finish().unwrap()).unwrap().len(), 255);
    }

    #[test]
    fn each_malformed_bundle_is_refused_whole_with_its_reason() {
        let h = header("198.51.100.7:5000", "203.0.113.1:3478");
        let mut buf = [0u8; 256];
        let mut writer = BundleWriter::new(&mut buf);
        writer.push(&h, b"\x80one").unwrap();
        writer.push(&h, b"\x80two").unwrap();
        let good = writer.finish().unwrap().to_vec();
        let with = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut bytes = good.clone();
            edit(&mut bytes);
            Bundle::parse(&bytes).map(|b| b.len())
        };
        assert_eq!(with(&|_| {}), Ok(2));
        assert_eq!(with(&|b| b.truncate(3)), Err(BundleError::TooShort));
        assert_eq!(with(&|b| b[0] = 0xF1), Err(BundleError::NotABundle));
        assert_eq!(with(&|b| b[3] = 1), Err(BundleError::ReservedBitsSet));
        assert_eq!(with(&|b| b[1] = 0), Err(BundleError::Empty));
        assert_eq!(with(&|b| b[1] = 3), Err(BundleError::FrameOverrun));
        assert_eq!(with(&|b| b[1] = 1), Err(BundleError::TrailingBytes));
        assert_eq!(with(&|b| b.push(0)), Err(BundleError::TrailingBytes));
        assert_eq!(
            with(&|b| b.pop().map(drop).unwrap()),
            Err(BundleError::FrameOverrun)
        );
        assert_eq!(
            with(&|b| b[4..6].copy_from_slice(&16u16.to_be_bytes())),
            Err(BundleError::FrameTooShort)
        );
        // A frame inside that is not a good frame is the frame's own problem: the bundle
        // is well-formed, and its neighbour parses.
        let mut bad_inside = good.clone();
        bad_inside[4 + 2] = 0xF7;
        let mut frames = Bundle::parse(&bad_inside).unwrap();
        assert_eq!(
            FrameHeader::parse(frames.next().unwrap()),
            Err(FrameError::UnknownVersion)
        );
        assert!(FrameHeader::parse(frames.next().unwrap()).is_ok());
    }
    /// Collects what a bundler emits: destination, datagram, frames it stands for.
    fn collector(
        out: &mut Vec<(SocketAddr, Vec<u8>, usize)>,
    ) -> impl FnMut(SocketAddr, &[u8], &[u8], usize) + '_ {
        |to, head, body, n| out.push((to, [head, body].concat(), n))
    }

    #[test]
    fn a_batchs_frames_for_one_peer_leave_as_one_bundle_and_a_lone_frame_as_itself() {
        let (a, b, c): (SocketAddr, SocketAddr, SocketAddr) = (
            "10.0.0.1:40000".parse().unwrap(),
            "10.0.0.2:40000".parse().unwrap(),
            "[2001:db8::3]:40000".parse().unwrap(),
        );
        let h = header("198.51.100.7:5000", "203.0.113.1:3478");
        let mut bundler: Bundler<usize> = Bundler::new(1500, 2048);
        let mut out = Vec::new();
        let mut emit = collector(&mut out);
        for (to, byte) in [(a, 1u8), (b, 2), (a, 3), (c, 4), (b, 5), (a, 6)] {
            bundler.push(to, &h, &[byte; 100], 1, &mut emit);
        }
        assert!(!bundler.is_empty());
        bundler.close_all(&mut emit);
        assert!(bundler.is_empty());
        drop(emit);
        let firsts = |datagram: &[u8]| -> Vec<u8> {
            Bundle::parse(datagram)
                .unwrap()
                .map(|f| FrameHeader::parse(f).unwrap().1[0])
                .collect()
        };
        assert_eq!(out.len(), 3);
        assert_eq!(
            (out[0].0, firsts(&out[0].1), out[0].2),
            (a, vec![1, 3, 6], 3)
        );
        assert_eq!((out[1].0, firsts(&out[1].1), out[1].2), (b, vec![2, 5], 2));
        // c had one frame: it leaves as a plain version-1 frame.
        assert_eq!(out[2].0, c);
        assert!(!is_bundle(&out[2].1));
        assert_eq!(FrameHeader::parse(&out[2].1), Ok((h, &[4u8; 100][..])));
    }

    #[test]
    fn a_full_bundle_leaves_before_the_frame_that_did_not_fit_and_a_giant_leaves_alone() {
        let to: SocketAddr = "10.0.0.1:40000".parse().unwrap();
        let h = header("198.51.100.7:5000", "203.0.113.1:3478");
        let mut bundler: Bundler<usize> = Bundler::new(1500, 2048);
        let mut out = Vec::new();
        let mut emit = collector(&mut out);
        // 2 + 16 + 600 bytes each: two fit in 1472 bytes, the third does not.
        for byte in 1..=3u8 {
            bundler.push(to, &h, &[byte; 600], 1, &mut emit);
        }
        // Too long for any bundle on this path: the third frame leaves first, then it.
        bundler.push(to, &h, &[9; 1460], 1, &mut emit);
        bundler.close_all(&mut emit);
        drop(emit);
        let sizes: Vec<(usize, bool, usize)> = out
            .iter()
            .map(|(_, d, n)| (d.len(), is_bundle(d), *n))
            .collect();
        assert_eq!(
            sizes,
            vec![
                (4 + 2 * 618, true, 2),
                (616, false, 1),
                (16 + 1460, false, 1)
            ]
        );
        assert_eq!(FrameHeader::parse(&out[1].1).unwrap().1[0], 3);
    }

    #[test]
    fn a_destination_beyond_the_open_bundles_closes_one_and_every_frame_leaves_in_order() {
        let h = header("198.51.100.7:5000", "203.0.113.1:3478");
        let mut bundler: Bundler<usize> = Bundler::new(1500, 2048);
        let mut out = Vec::new();
        let mut emit = collector(&mut out);
        let peer = |i: usize| SocketAddr::from(([10, 0, 0, i as u8], 40000));
        for round in 0..2 {
            for i in 0..=OPEN_BUNDLES {
                bundler.push(peer(i), &h, &[round as u8 + 1; 50], 1, &mut emit);
            }
        }
        bundler.close_all(&mut emit);
        drop(emit);
        // Every frame left once, and none waited past the destinations' limit.
        assert_eq!(
            out.iter().map(|(_, _, n)| n).sum::<usize>(),
            2 * (OPEN_BUNDLES + 1)
        );
        for i in 0..=OPEN_BUNDLES {
            let frames: Vec<u8> = out
                .iter()
                .filter(|(to, _, _)| *to == peer(i))
                .flat_map(|(_, d, _)| {
                    if is_bundle(d) {
                        Bundle::parse(d).unwrap().map(|f| f[16]).collect::<Vec<_>>()
                    } else {
                        vec![d[16]]
                    }
                })
                .collect();
            assert_eq!(frames, vec![1, 2], "peer {i}'s frames in order");
        }
    }
}
