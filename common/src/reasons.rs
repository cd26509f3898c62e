//! Why things happen, as stable metric labels: where a datagram arrived ([`Port`]), which
//! way it went ([`Direction`]), why it was dropped ([`DropReason`]), why a route-cache
//! operation failed ([`CacheError`]), why an ICE-TCP connection closed
//! ([`TcpCloseReason`]) and why the HTTP endpoints refused a connection ([`HttpRefusal`]).
//!
//! Each reason's label is written once, here, and each value's documentation is what the
//! runbook ([`crate::runbook`]) says about it. [`label_enum!`](crate::label_enum) declares such an enum; the
//! transceiver's reasons use it too.

use crate::frame::FrameError;
use crate::hint::HintError;
use crate::stun::StunError;

/// Where a datagram arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Port {
    /// A public VIP (from a client).
    Vip = 0,
    /// The worker's internal port (from a transceiver or another relay).
    Internal = 1,
}

impl Port {
    /// Both ports, in index order.
    pub const ALL: [Port; 2] = [Port::Vip, Port::Internal];

    /// The label value.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Vip => "vip",
            Self::Internal => "internal",
        }
    }
}

/// Direction of a forwarded datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client → transceiver.
    In = 0,
    /// Transceiver → client.
    Out = 1,
}

impl Direction {
    /// Both directions, in index order.
    pub const ALL: [Direction; 2] = [Direction::In, Direction::Out];

    /// The label value.
    pub const fn label(self) -> &'static str {
        match self {
            Self::In => "in",
            Self::Out => "out",
        }
    }
}

/// Declares a `Copy` enum whose variants each carry a stable metric label, with `ALL`
/// (index order), `COUNT`, `label()`, `doc()` (its documentation) and a dense `index()` for counter arrays. The
/// relay's and the transceiver's reasons use it.
#[macro_export]
macro_rules! label_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[doc = $doc:literal])* $variant:ident = $label:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[doc = $doc])* $variant, )+
        }

        impl $name {
            /// Every value, in index order.
            pub const ALL: &'static [$name] = &[$( $name::$variant, )+];
            /// The number of values.
            pub const COUNT: usize = Self::ALL.len();

            /// The label value.
            pub const fn label(self) -> &'static str {
                match self {
                    $( $name::$variant => $label, )+
                }
            }

            /// What it means: the value's own documentation, one line per source line
            /// (the runbook is generated from it).
            pub const fn doc(self) -> &'static str {
                match self {
                    $( $name::$variant => concat!($($doc, "\n"),*), )+
                }
            }

            /// A dense index for counter arrays.
            #[inline]
            pub const fn index(self) -> usize {
                self as usize
            }
        }
    };
}

label_enum! {
    /// Why a datagram was dropped. Every drop is counted under exactly one reason.
    pub enum DropReason {
        /// First byte outside the STUN, DTLS and RTP/RTCP ranges (or an empty datagram).
        Unclassified = "unclassified",
        /// DTLS or RTP/RTCP from a client without a flow, no route cache configured.
        NoFlow = "no_flow",
        /// DTLS or RTP/RTCP without a flow: dropped while the route cache is asked.
        NoFlowCacheLookup = "no_flow_cache_lookup",
        /// DTLS or RTP/RTCP without a flow whose route the cache did not know a moment
        /// ago: not asked again yet.
        NoFlowRecentMiss = "no_flow_recent_miss",
        /// DTLS or RTP/RTCP without a flow from a source prefix (or worker) past its rate
        /// of route-cache lookups.
        NoFlowLookupRate = "no_flow_lookup_rate",
        /// A valid STUN message without a flow that is not a Binding Request.
        NotBindingRequest = "not_binding_request",
        /// STUN shorter than its 20-byte header.
        StunTooShort = "stun_too_short",
        /// STUN first byte with a top bit set.
        StunNotStun = "stun_not_stun",
        /// STUN magic cookie wrong.
        StunBadMagicCookie = "stun_bad_magic_cookie",
        /// STUN length field differs from the datagram length.
        StunLengthMismatch = "stun_length_mismatch",
        /// STUN length not a multiple of 4.
        StunLengthNotAligned = "stun_length_not_aligned",
        /// A STUN attribute runs past the message.
        StunAttributeOverrun = "stun_attribute_overrun",
        /// Too many STUN attributes.
        StunTooManyAttributes = "stun_too_many_attributes",
        /// A STUN attribute after FINGERPRINT.
        StunAttributeAfterFingerprint = "stun_attribute_after_fingerprint",
        /// MESSAGE-INTEGRITY of the wrong size.
        StunBadIntegrityLength = "stun_bad_integrity_length",
        /// FINGERPRINT of the wrong size.
        StunBadFingerprintLength = "stun_bad_fingerprint_length",
        /// Binding Request without USERNAME.
        StunMissingUsername = "stun_missing_username",
        /// USERNAME not `<ufrag>:<ufrag>`.
        StunBadUsername = "stun_bad_username",
        /// Binding Request without MESSAGE-INTEGRITY.
        StunMissingIntegrity = "stun_missing_integrity",
        /// MESSAGE-INTEGRITY failed under the derived password.
        StunBadIntegrity = "stun_bad_integrity",
        /// FINGERPRINT required but absent.
        StunMissingFingerprint = "stun_missing_fingerprint",
        /// FINGERPRINT did not match.
        StunBadFingerprint = "stun_bad_fingerprint",
        /// Server ufrag of the wrong length.
        HintBadLength = "hint_bad_length",
        /// Server ufrag with a non-ICE character.
        HintBadAlphabet = "hint_bad_alphabet",
        /// Hint version unknown.
        HintUnknownVersion = "hint_unknown_version",
        /// Hint key id unknown.
        HintUnknownKey = "hint_unknown_key",
        /// Hint MAC wrong.
        HintBadMac = "hint_bad_mac",
        /// Hint destination outside the allowed transceiver networks.
        HintDestinationNotAllowed = "hint_destination_not_allowed",
        /// An authentic hint minted longer ago than `hint_max_age` (or further ahead of
        /// the relay's clock than [`crate::admission::HINT_CLOCK_SKEW`]) asks for a new
        /// flow: a ufrag collected from a past session. Existing flows are not affected.
        HintExpired = "hint_expired",
        /// Hint names a cluster with no relay configured.
        UnknownCluster = "unknown_cluster",
        /// The flow table is full of live flows that are proven (DTLS or media from both
        /// sides) or still within their time to prove themselves.
        TableFull = "table_full",
        /// An authentic Binding Request whose transaction already created a flow from
        /// another address: a replay.
        ReplayedRequest = "replayed_request",
        /// The session (server ufrag) already holds its cap of live flows.
        SessionFlowLimit = "session_flow_limit",
        /// The source prefix's or the worker's rate of authentication attempts is spent:
        /// refused before any HMAC.
        AuthRateLimit = "auth_rate_limit",
        /// The source prefix's rate of new flows is spent.
        PrefixRateLimit = "prefix_rate_limit",
        /// The worker's rate of new flows is spent.
        WorkerRateLimit = "worker_rate_limit",
        /// A frame shorter than its header.
        FrameTooShort = "frame_too_short",
        /// A datagram on an internal port that is not a frame.
        FrameNotAFrame = "frame_not_a_frame",
        /// A frame of an unknown version.
        FrameUnknownVersion = "frame_unknown_version",
        /// A frame with reserved bits set.
        FrameReservedBits = "frame_reserved_bits",
        /// A frame with no datagram.
        FrameEmptyPayload = "frame_empty_payload",
        /// A bundle of frames (frame version 2) that is not well-formed: its count, a
        /// frame's length or its trailing bytes. Counted as one datagram.
        FrameBadBundle = "frame_bad_bundle",
        /// A frame from a source outside the allowed networks.
        FrameSourceNotAllowed = "frame_source_not_allowed",
        /// A return frame for a client that has no flow.
        ReturnNoFlow = "return_no_flow",
        /// A return frame naming a VIP this relay does not serve.
        ReturnUnknownVip = "return_unknown_vip",
        /// A return frame from a transceiver other than the flow's.
        ReturnWrongSource = "return_wrong_source",
        /// A transceiver's notice that a flow's session ended (a frame with the
        /// session-ended bit, carrying no datagram): the flow was removed at once.
        SessionEnded = "session_ended",
        /// A session-ended notice for a flow this worker does not hold: already gone, or
        /// held by another worker, where it ages out.
        SessionEndNoFlow = "session_end_no_flow",
        /// A frame for a client on the other transport (the TCP bit set for a UDP flow,
        /// or clear for a TCP connection), or a TCP client's frame where no TCP is served.
        FrameWrongTransport = "frame_wrong_transport",
        /// A TCP client's connection has no room for the message in its bounded send
        /// buffer (a slow reader): dropped, as the network would drop a UDP datagram.
        TcpSendBufferFull = "tcp_send_buffer_full",
        /// The kernel refused to send (buffer full, unreachable).
        SendFailed = "send_failed",
        /// AF_XDP: the frames handed to the kernel and not yet sent reached their bound
        /// (`--tx-backlog`); dropped now rather than sent stale behind them.
        TxBacklogFull = "tx_backlog_full",
        /// A datagram too large to frame within the MTU of the buffers.
        TooLarge = "too_large",
        /// No MAC address known yet for the next hop (AF_XDP; the kernel is asked to resolve).
        NeighbourUnresolved = "neighbour_unresolved",
        /// A steered frame addressed to neither a VIP nor this worker's internal address.
        NotForRelay = "not_for_relay",
    }
}

#[cfg(feature = "runtime")]
impl From<ufrag_udp::PushError> for DropReason {
    /// Why a send batch refused a datagram: too large for its buffers, or not sendable
    /// (a full batch, or a family the socket cannot reach).
    fn from(error: ufrag_udp::PushError) -> Self {
        match error {
            ufrag_udp::PushError::TooLarge => DropReason::TooLarge,
            ufrag_udp::PushError::Full | ufrag_udp::PushError::WrongFamily => {
                DropReason::SendFailed
            }
        }
    }
}

impl From<StunError> for DropReason {
    fn from(e: StunError) -> Self {
        match e {
            StunError::TooShort => Self::StunTooShort,
            StunError::NotStun => Self::StunNotStun,
            StunError::BadMagicCookie => Self::StunBadMagicCookie,
            StunError::LengthMismatch => Self::StunLengthMismatch,
            StunError::LengthNotAligned => Self::StunLengthNotAligned,
            StunError::AttributeOverrun => Self::StunAttributeOverrun,
            StunError::TooManyAttributes => Self::StunTooManyAttributes,
            StunError::AttributeAfterFingerprint => Self::StunAttributeAfterFingerprint,
            StunError::BadIntegrityLength => Self::StunBadIntegrityLength,
            StunError::BadFingerprintLength => Self::StunBadFingerprintLength,
            StunError::MissingUsername => Self::StunMissingUsername,
            StunError::BadUsername => Self::StunBadUsername,
            StunError::MissingIntegrity => Self::StunMissingIntegrity,
            StunError::BadIntegrity => Self::StunBadIntegrity,
            StunError::MissingFingerprint => Self::StunMissingFingerprint,
            StunError::BadFingerprint => Self::StunBadFingerprint,
        }
    }
}

impl From<HintError> for DropReason {
    fn from(e: HintError) -> Self {
        match e {
            HintError::BadLength => Self::HintBadLength,
            HintError::BadAlphabet => Self::HintBadAlphabet,
            HintError::UnknownVersion => Self::HintUnknownVersion,
            HintError::UnknownKeyId => Self::HintUnknownKey,
            HintError::BadMac => Self::HintBadMac,
            HintError::DestinationNotAllowed => Self::HintDestinationNotAllowed,
        }
    }
}

impl From<FrameError> for DropReason {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::TooShort | FrameError::BufferTooSmall => Self::FrameTooShort,
            FrameError::NotAFrame => Self::FrameNotAFrame,
            FrameError::UnknownVersion => Self::FrameUnknownVersion,
            FrameError::ReservedBitsSet => Self::FrameReservedBits,
            FrameError::EmptyPayload => Self::FrameEmptyPayload,
        }
    }
}

label_enum! {
    /// Why a route-cache operation failed. Each failure is counted under one reason in
    /// `ufrag_relay_cache_errors_total`; the datagram that needed the route is counted
    /// apart (forwarded, or dropped as `no_flow_cache_lookup`).
    pub enum CacheError {
        /// The worker's request found the queue to the cache thread full (Redis slower
        /// than new flows arrive) or the thread stopped.
        RequestQueueFull = "request_queue_full",
        /// Redis was not connected (down, unreachable, or refusing the password or TLS),
        /// so the request failed at once; reconnects back off up to 2 s.
        Unreachable = "unreachable",
        /// Redis did not answer a pipeline within the command timeout (250 ms).
        Timeout = "timeout",
        /// Redis answered a pipeline with an error, or the connection broke.
        CommandFailed = "command_failed",
        /// A lookup's answer found the worker's answer queue full.
        AnswerQueueFull = "answer_queue_full",
        /// The cached route's next hop is outside the allowed destinations now (the cache
        /// holds what an older configuration allowed); the flow is not restored.
        RouteNotAllowed = "route_not_allowed",
        /// A cached route whose MAC does not verify under the hint keys held: written by
        /// something that holds no hint key, or under a key since retired. A miss.
        Unauthenticated = "unauthenticated"
    }
}

label_enum! {
    /// Why a relay closed (or refused) an ICE-TCP connection. Every close counts once.
    pub enum TcpCloseReason {
        /// The client closed it (end of stream).
        PeerClosed = "peer_closed",
        /// A read or write failed (reset, broken pipe).
        Reset = "reset",
        /// No authentic Binding Request within the handshake timeout.
        HandshakeTimeout = "handshake_timeout",
        /// Nothing in either direction for the idle timeout.
        IdleTimeout = "idle_timeout",
        /// The first message was not an authentic, admitted Binding Request (its drop
        /// reason is counted with the TCP drops).
        FirstMessageRefused = "first_message_refused",
        /// A length prefix above the largest message the relay carries.
        MessageTooLarge = "message_too_large",
        /// The connection's flow left the table (expired or shed).
        FlowEnded = "flow_ended",
        /// Refused at accept: the worker holds its cap of connections.
        WorkerLimit = "worker_limit",
        /// Refused at accept: the source prefix holds its cap of connections.
        PrefixLimit = "prefix_limit",
        /// Refused at accept: the source prefix spent its rate of new connections.
        PrefixRate = "prefix_rate",
        /// Refused at accept: the worker spent its rate of new connections.
        WorkerRate = "worker_rate",
        /// The relay stopped.
        Stopping = "relay_stopping",
    }
}

/// Why the HTTP endpoints (`/metrics`, `/healthz`, `/readyz`) refused or cut a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpRefusal {
    /// Its address had as many connections open as one address may when it opened
    /// another: this one (still sending its request, or the oldest) was cut.
    SourceCap,
    /// Its address opened connections faster than one address may: closed at once.
    SourceRate,
    /// It was the connection open longest when the endpoints were serving as many as
    /// they serve at once, and a new one came.
    OldestCut,
    /// It did not send its request, or take the answer, in time.
    Deadline,
    /// Its request was not an HTTP/1 request head, or was too long (400 or 431).
    BadRequest,
    /// No thread could be started to serve it (or its socket failed at accept).
    Unserved,
}

impl HttpRefusal {
    /// Every refusal, in the order of its counter.
    pub const ALL: [HttpRefusal; 6] = [
        HttpRefusal::SourceCap,
        HttpRefusal::SourceRate,
        HttpRefusal::OldestCut,
        HttpRefusal::Deadline,
        HttpRefusal::BadRequest,
        HttpRefusal::Unserved,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            HttpRefusal::SourceCap => "source_cap",
            HttpRefusal::SourceRate => "source_rate",
            HttpRefusal::OldestCut => "oldest_cut",
            HttpRefusal::Deadline => "deadline",
            HttpRefusal::BadRequest => "bad_request",
            HttpRefusal::Unserved => "unserved",
        }
    }
}
