//! RFC 7983 first-byte demultiplexing of a datagram arriving on a WebRTC 5-tuple.
//!
//! RFC 7983 §7 (updating RFC 5764 §5.1.2) assigns the first byte of every datagram
//! multiplexed on one port:
//!
//! ```text
//!               +----------------+
//!               |        [0..3] -+--> STUN
//!               |      [16..19] -+--> ZRTP
//!   packet -->  |      [20..63] -+--> DTLS
//!               |      [64..79] -+--> TURN channel
//!               |    [128..191] -+--> RTP / RTCP
//!               +----------------+
//! ```
//!
//! The relay only needs to tell STUN apart (it may create a flow) from the rest (forwarded
//! opaquely when a flow exists). DTLS and RTP/RTCP are named so that counters can say
//! what was seen; ZRTP, TURN channel data and unassigned bytes are `Other`.

/// What a datagram is, judged by its first byte alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DatagramKind {
    /// First byte 0..=3: a STUN message (may still be malformed).
    Stun,
    /// First byte 20..=63: a DTLS record.
    Dtls,
    /// First byte 128..=191: RTP or RTCP (SRTP/SRTCP on a WebRTC path).
    RtpRtcp,
    /// Empty datagram, ZRTP, TURN channel data or an unassigned first byte.
    Other,
}

impl DatagramKind {
    /// Classifies a datagram by its first byte (RFC 7983 §7). Never panics; an empty
    /// datagram is `Other`.
    #[inline]
    pub fn classify(datagram: &[u8]) -> Self {
        match datagram.first() {
            Some(0..=3) => Self::Stun,
            Some(20..=63) => Self::Dtls,
            Some(128..=191) => Self::RtpRtcp,
            _ => Self::Other,
        }
    }

    /// A short label for metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stun => "stun",
            Self::Dtls => "dtls",
            Self::RtpRtcp => "rtp_rtcp",
            Self::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DatagramKind::{self, *};

    #[test]
    fn every_first_byte_maps_to_its_rfc7983_range() {
        for b in 0u8..=255 {
            let expected = match b {
                0..=3 => Stun,
                20..=63 => Dtls,
                128..=191 => RtpRtcp,
                _ => Other,
            };
            assert_eq!(DatagramKind::classify(&[b, 0, 0]), expected, "byte {b}");
        }
    }

    #[test]
    fn range_edges() {
        assert_eq!(DatagramKind::classify(&[3]), Stun);
        assert_eq!(DatagramKind::classify(&[4]), Other);
        assert_eq!(
            DatagramKind::classify(&[16]),
            Other,
            "ZRTP is not forwarded as DTLS"
        );
        assert_eq!(DatagramKind::classify(&[19]), Other);
        assert_eq!(DatagramKind::classify(&[20]), Dtls);
        assert_eq!(DatagramKind::classify(&[63]), Dtls);
        assert_eq!(DatagramKind::classify(&[64]), Other, "TURN channel");
        assert_eq!(DatagramKind::classify(&[127]), Other);
        assert_eq!(DatagramKind::classify(&[128]), RtpRtcp);
        assert_eq!(DatagramKind::classify(&[191]), RtpRtcp);
        assert_eq!(DatagramKind::classify(&[192]), Other);
    }

    #[test]
    fn empty_datagram_is_other() {
        assert_eq!(DatagramKind::classify(&[]), Other);
    }
}
