//! Metric names, help texts, labels and drop reasons both relays expose, and the
//! exposition both binaries serve on `/metrics` ([`Exposition`]: OpenMetrics 1.0 when the
//! scraper asks for it, as Prometheus does, Prometheus text 0.0.4 otherwise; via
//! `prometheus-client`).
//!
//! A worker counts into a plain [`WorkerCounters`] it owns (no atomics, no locks on the
//! packet path) and copies it into its [`SharedCounters`] every so often with
//! [`SharedCounters::publish`] (single writer, relaxed stores). The scrape side reads the
//! shared copies through [`RelayMetrics`], a `prometheus-client` collector.
//!
//! | metric                                       | type    | labels               |
//! |----------------------------------------------|---------|----------------------|
//! | `ufrag_relay_received_datagrams_total`       | counter | worker, port         |
//! | `ufrag_relay_received_bytes_total`           | counter | worker, port         |
//! | `ufrag_relay_forwarded_datagrams_total`      | counter | worker, direction    |
//! | `ufrag_relay_forwarded_bytes_total`          | counter | worker, direction    |
//! | `ufrag_relay_dropped_datagrams_total`        | counter | worker, reason       |
//! | `ufrag_relay_dropped_bytes_total`            | counter | worker, reason       |
//! | `ufrag_relay_flows_active`                   | gauge   | worker               |
//! | `ufrag_relay_flows_created_total`            | counter | worker               |
//! | `ufrag_relay_flows_expired_total`            | counter | worker               |
//! | `ufrag_relay_flows_refused_total`            | counter | worker               |
//! | `ufrag_relay_flows_shed_total`               | counter | worker               |
//! | `ufrag_relay_flows_over_prefix_cap_total`    | counter | worker               |
//! | `ufrag_relay_replay_filter_overwrites_total` | counter | worker               |
//! | `ufrag_relay_cache_hits_total`               | counter | worker               |
//! | `ufrag_relay_cache_misses_total`             | counter | worker               |
//! | `ufrag_relay_cache_errors_total`             | counter | worker, reason       |
//! | `ufrag_relay_bundles_received_total`         | counter | worker               |
//! | `ufrag_relay_bundles_sent_total`             | counter | worker               |
//! | `ufrag_relay_gso_sends_total`                | counter | worker               |
//! | `ufrag_relay_ready`                          | gauge   |                      |
//! | `ufrag_relay_worker_failures_total`          | counter |                      |
//! | `ufrag_relay_hint_key_info`                  | gauge   | key_id               |
//! | `ufrag_relay_hint_key_reloads_total`         | counter | result               |
//! | `ufrag_relay_http_refused_total`             | counter | reason               |
//! | `ufrag_relay_build_info`                     | gauge   | backend, version     |
//!
//! With ICE-TCP on, the first six families and the flow families come again as
//! `ufrag_relay_tcp_*`, counting RFC 4571 messages (`…_received_messages_total`,
//! `…_forwarded_messages_total`, `…_dropped_messages_total`) instead of datagrams. A
//! datagram is one UDP payload wherever it is counted; a packet is only ever an RTP or
//! RTCP packet (the transceiver's word for its media, never the relay's).
//!
//! `direction` is `in` (client → transceiver) or `out` (transceiver → client); `reason`
//! is one of [`DropReason::label`] (drops) or [`CacheError::label`] (cache errors); `port` is where a datagram arrived: `vip` or
//! `internal`.
//!
//! **The counting contract** (kept by [`crate::execute::Executor`], checked by a property
//! test): every datagram received ends in exactly one counter, forwarded `in`, forwarded
//! `out`, or one drop reason, in datagrams and in bytes alike. Bytes are always the
//! datagram's size as received (UDP payload, frame header included for frames), so that
//! once no send is in flight, `received == forwarded(in) + forwarded(out) + dropped` holds
//! for datagrams and for bytes, per worker and in total.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::frame::FrameError;
use crate::hint::HintError;
use crate::stun::StunError;

/// The two text formats `/metrics` can be written in; both binaries pick one the same way
/// ([`Exposition::for_accept`]) and encode their registries with [`Exposition::encode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0 text: what Prometheus asks for first.
    OpenMetrics,
    /// The Prometheus text format 0.0.4: for a scraper that does not ask for
    /// OpenMetrics (curl, older agents).
    PrometheusText,
}

impl Exposition {
    /// The format a request's `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` (Prometheus's default header does, first), the 0.0.4
    /// text otherwise.
    pub fn for_accept(accept: Option<&str>) -> Self {
        let wants_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let mut params = range.split(';').map(str::trim);
                let media_type = params.next().unwrap_or("");
                let refused = params.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                media_type.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        if wants_openmetrics {
            Self::OpenMetrics
        } else {
            Self::PrometheusText
        }
    }

    /// The `Content-Type` of what [`Exposition::encode`] writes.
    pub const fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// `registry` in this format.
    pub fn encode(self, registry: &Registry) -> String {
        let mut out = String::with_capacity(16 * 1024);
        match self {
            Self::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry),
            Self::PrometheusText => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, registry)
            }
        }
        .expect("writing to a String cannot fail");
        out
    }
}

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

/// The counters one worker owns and bumps on its packet path: plain integers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCounters {
    /// Datagrams received, by [`Port`] index.
    pub received_datagrams: [u64; 2],
    /// Bytes received (datagram sizes as received), by [`Port`] index.
    pub received_bytes: [u64; 2],
    /// Datagrams forwarded, by [`Direction`] index.
    pub forwarded_datagrams: [u64; 2],
    /// Bytes forwarded (datagram sizes as received), by [`Direction`] index.
    pub forwarded_bytes: [u64; 2],
    /// Drops, by [`DropReason::index`].
    pub dropped_datagrams: [u64; DropReason::COUNT],
    /// Bytes dropped (datagram sizes as received), by [`DropReason::index`].
    pub dropped_bytes: [u64; DropReason::COUNT],
    /// Flows in the worker's table now.
    pub flows_active: u64,
    /// Flows created.
    pub flows_created: u64,
    /// Flows expired.
    pub flows_expired: u64,
    /// Flow inserts refused (table full).
    pub flows_refused: u64,
    pub flows_shed: u64,
    /// Route-cache lookups that found a route.
    pub cache_hits: u64,
    /// Route-cache lookups that found nothing.
    pub cache_misses: u64,
    /// Route-cache operations that failed, by [`CacheError::index`].
    pub cache_errors: [u64; CacheError::COUNT],
    /// Return frames for flows another worker owns, taken from the shared return paths.
    pub shared_returns: u64,
    /// Flows whose return path found no room in the shared return paths.
    pub flows_unshared: u64,
    /// Flows kept unproven because their client's prefix held its cap of proven flows.
    pub flows_over_prefix_cap: u64,
    /// First requests recorded in the replay filter over a transaction still in its window.
    pub replay_overwrites: u64,
    /// Bundles of frames received on the internal port and opened (their frames are
    /// counted as datagrams).
    pub bundles_received: u64,
    /// Bundles of frames sent on the internal port (two frames or more each).
    pub bundles_sent: u64,
    /// Sends on the internal port that carried several datagrams as GSO segments.
    pub gso_sends: u64,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            received_datagrams: [0; 2],
            received_bytes: [0; 2],
            forwarded_datagrams: [0; 2],
            forwarded_bytes: [0; 2],
            dropped_datagrams: [0; DropReason::COUNT],
            dropped_bytes: [0; DropReason::COUNT],
            flows_active: 0,
            flows_created: 0,
            flows_expired: 0,
            flows_refused: 0,
            flows_shed: 0,
            cache_hits: 0,
            cache_misses: 0,
            cache_errors: [0; CacheError::COUNT],
            shared_returns: 0,
            flows_unshared: 0,
            flows_over_prefix_cap: 0,
            replay_overwrites: 0,
            bundles_received: 0,
            bundles_sent: 0,
            gso_sends: 0,
        }
    }
}

impl WorkerCounters {
    /// Counts one received datagram of `bytes` bytes.
    #[inline]
    pub fn received(&mut self, port: Port, bytes: usize) {
        self.received_datagrams[port as usize] += 1;
        self.received_bytes[port as usize] += bytes as u64;
    }

    /// Counts one forwarded datagram of `bytes` bytes (as received).
    #[inline]
    pub fn forwarded(&mut self, direction: Direction, bytes: usize) {
        self.forwarded_many(direction, 1, bytes as u64);
    }

    /// Counts one dropped datagram of `bytes` bytes (as received).
    #[inline]
    pub fn dropped(&mut self, reason: impl Into<DropReason>, bytes: usize) {
        self.dropped_many(reason, 1, bytes as u64);
    }

    /// Counts `datagrams` forwarded datagrams of `bytes` bytes in all (as received).
    #[inline]
    pub fn forwarded_many(&mut self, direction: Direction, datagrams: u64, bytes: u64) {
        self.forwarded_datagrams[direction as usize] += datagrams;
        self.forwarded_bytes[direction as usize] += bytes;
    }

    /// Counts `datagrams` dropped datagrams of `bytes` bytes in all (as received).
    #[inline]
    pub fn dropped_many(&mut self, reason: impl Into<DropReason>, datagrams: u64, bytes: u64) {
        let i = reason.into().index();
        self.dropped_datagrams[i] += datagrams;
        self.dropped_bytes[i] += bytes;
    }

    /// Datagrams received but neither forwarded nor dropped yet, in datagrams and bytes:
    /// those a backend still holds for sending. Zero whenever no send is in flight; a
    /// value that stays non-zero (or a negative one, shown as `None`) is a counting bug.
    pub fn in_flight(&self) -> Option<(u64, u64)> {
        let settled_datagrams = self
            .forwarded_datagrams
            .iter()
            .chain(&self.dropped_datagrams)
            .sum::<u64>();
        let settled_bytes = self
            .forwarded_bytes
            .iter()
            .chain(&self.dropped_bytes)
            .sum::<u64>();
        Some((
            self.received_datagrams
                .iter()
                .sum::<u64>()
                .checked_sub(settled_datagrams)?,
            self.received_bytes
                .iter()
                .sum::<u64>()
                .checked_sub(settled_bytes)?,
        ))
    }

    /// The drop count of one reason.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.dropped_datagrams[reason.index()]
    }

    /// Counts `count` route-cache failures for one reason.
    #[inline]
    pub fn cache_failed(&mut self, reason: CacheError, count: u64) {
        self.cache_errors[reason.index()] += count;
    }

    /// Route-cache failures, every reason together.
    pub fn cache_errors_total(&self) -> u64 {
        self.cache_errors.iter().sum()
    }
}

/// A worker's counters as the scrape side sees them: one writer (the worker), any
/// number of readers.
#[derive(Debug)]
pub struct SharedCounters {
    received_datagrams: [AtomicU64; 2],
    received_bytes: [AtomicU64; 2],
    forwarded_datagrams: [AtomicU64; 2],
    forwarded_bytes: [AtomicU64; 2],
    dropped_datagrams: [AtomicU64; DropReason::COUNT],
    dropped_bytes: [AtomicU64; DropReason::COUNT],
    flows_active: AtomicU64,
    flows_created: AtomicU64,
    flows_expired: AtomicU64,
    flows_refused: AtomicU64,
    flows_shed: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    cache_errors: [AtomicU64; CacheError::COUNT],
    shared_returns: AtomicU64,
    flows_unshared: AtomicU64,
    flows_over_prefix_cap: AtomicU64,
    replay_overwrites: AtomicU64,
    bundles_received: AtomicU64,
    bundles_sent: AtomicU64,
    gso_sends: AtomicU64,
}

impl Default for SharedCounters {
    fn default() -> Self {
        SharedCounters {
            received_datagrams: Default::default(),
            received_bytes: Default::default(),
            forwarded_datagrams: Default::default(),
            forwarded_bytes: Default::default(),
            dropped_datagrams: core::array::from_fn(|_| AtomicU64::new(0)),
            dropped_bytes: core::array::from_fn(|_| AtomicU64::new(0)),
            flows_active: AtomicU64::new(0),
            flows_created: AtomicU64::new(0),
            flows_expired: AtomicU64::new(0),
            flows_refused: AtomicU64::new(0),
            flows_shed: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            cache_misses: AtomicU64::new(0),
            cache_errors: core::array::from_fn(|_| AtomicU64::new(0)),
            shared_returns: AtomicU64::new(0),
            flows_unshared: AtomicU64::new(0),
            flows_over_prefix_cap: AtomicU64::new(0),
            replay_overwrites: AtomicU64::new(0),
            bundles_received: AtomicU64::new(0),
            bundles_sent: AtomicU64::new(0),
            gso_sends: AtomicU64::new(0),
        }
    }
}

fn store_all<const N: usize>(dst: &[AtomicU64; N], src: &[u64; N]) {
    for (d, s) in dst.iter().zip(src) {
        d.store(*s, Ordering::Relaxed);
    }
}

fn load_all<const N: usize>(src: &[AtomicU64; N]) -> [u64; N] {
    core::array::from_fn(|i| src[i].load(Ordering::Relaxed))
}

impl SharedCounters {
    /// Copies the worker's counters for scraping. Call from the owning worker only.
    pub fn publish(&self, local: &WorkerCounters) {
        store_all(&self.received_datagrams, &local.received_datagrams);
        store_all(&self.received_bytes, &local.received_bytes);
        store_all(&self.forwarded_datagrams, &local.forwarded_datagrams);
        store_all(&self.forwarded_bytes, &local.forwarded_bytes);
        store_all(&self.dropped_datagrams, &local.dropped_datagrams);
        store_all(&self.dropped_bytes, &local.dropped_bytes);
        store_all(&self.cache_errors, &local.cache_errors);
        let scalars = [
            (&self.flows_active, local.flows_active),
            (&self.flows_created, local.flows_created),
            (&self.flows_expired, local.flows_expired),
            (&self.flows_refused, local.flows_refused),
            (&self.flows_shed, local.flows_shed),
            (&self.cache_hits, local.cache_hits),
            (&self.cache_misses, local.cache_misses),
            (&self.shared_returns, local.shared_returns),
            (&self.flows_unshared, local.flows_unshared),
            (&self.flows_over_prefix_cap, local.flows_over_prefix_cap),
            (&self.replay_overwrites, local.replay_overwrites),
            (&self.bundles_received, local.bundles_received),
            (&self.bundles_sent, local.bundles_sent),
            (&self.gso_sends, local.gso_sends),
        ];
        for (d, s) in scalars {
            d.store(s, Ordering::Relaxed);
        }
    }

    /// A copy of the last published counters.
    pub fn snapshot(&self) -> WorkerCounters {
        WorkerCounters {
            received_datagrams: load_all(&self.received_datagrams),
            received_bytes: load_all(&self.received_bytes),
            forwarded_datagrams: load_all(&self.forwarded_datagrams),
            forwarded_bytes: load_all(&self.forwarded_bytes),
            dropped_datagrams: load_all(&self.dropped_datagrams),
            dropped_bytes: load_all(&self.dropped_bytes),
            flows_active: self.flows_active.load(Ordering::Relaxed),
            flows_created: self.flows_created.load(Ordering::Relaxed),
            flows_expired: self.flows_expired.load(Ordering::Relaxed),
            flows_refused: self.flows_refused.load(Ordering::Relaxed),
            flows_shed: self.flows_shed.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            cache_misses: self.cache_misses.load(Ordering::Relaxed),
            cache_errors: load_all(&self.cache_errors),
            shared_returns: self.shared_returns.load(Ordering::Relaxed),
            flows_unshared: self.flows_unshared.load(Ordering::Relaxed),
            flows_over_prefix_cap: self.flows_over_prefix_cap.load(Ordering::Relaxed),
            replay_overwrites: self.replay_overwrites.load(Ordering::Relaxed),
            bundles_received: self.bundles_received.load(Ordering::Relaxed),
            bundles_sent: self.bundles_sent.load(Ordering::Relaxed),
            gso_sends: self.gso_sends.load(Ordering::Relaxed),
        }
    }
}

/// What an in-kernel fast path (relay-afxdp `--fast-path xdp`) carried and left to the
/// workers, read when `/metrics` is scraped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastPathTotals {
    /// Datagrams and bytes (as sent) towards transceivers.
    pub forward: (u64, u64),
    /// Datagrams and bytes (as sent) to clients.
    pub back: (u64, u64),
    /// Datagrams left to the workers: STUN, no entry, a frame it does not take, a next
    /// hop without a MAC yet.
    pub left: [u64; 4],
    /// Proven flows the workers could not hand to it (a next hop's MAC unknown, a map
    /// full, mixed address families): carried by the workers instead.
    pub flows_not_installed: u64,
}

/// The labels of [`FastPathTotals::left`].
pub const FAST_PATH_LEFT_LABELS: [&str; 4] = ["stun", "miss", "unfit", "no_mac"];

/// Reads the fast path's totals.
pub type FastPathSource = Box<dyn Fn() -> FastPathTotals + Send + Sync>;

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

/// One worker's ICE-TCP connection counts, updated by the worker as connections come and
/// go (never per message).
#[derive(Debug)]
pub struct TcpConnectionCounters {
    accepted: AtomicU64,
    active: AtomicU64,
    closed: [AtomicU64; TcpCloseReason::COUNT],
}

impl Default for TcpConnectionCounters {
    fn default() -> Self {
        TcpConnectionCounters {
            accepted: AtomicU64::new(0),
            active: AtomicU64::new(0),
            closed: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl TcpConnectionCounters {
    /// A connection was accepted and is open now.
    pub fn opened(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    /// An open connection was closed for `reason`.
    pub fn closed(&self, reason: TcpCloseReason) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.closed[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// A connection was refused at accept (closed before it was counted open).
    pub fn refused(&self, reason: TcpCloseReason) {
        self.closed[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Connections closed or refused for `reason` so far.
    pub fn closed_for(&self, reason: TcpCloseReason) -> u64 {
        self.closed[reason.index()].load(Ordering::Relaxed)
    }
}

/// One worker's ICE-TCP side as `/metrics` sees it: its messages (counted as datagrams
/// are) and its connections.
#[derive(Clone, Debug, Default)]
pub struct TcpWorkerMetrics {
    /// Messages in and out and drops, published by the worker's TCP executor.
    pub messages: Arc<SharedCounters>,
    /// Connections opened, open, and closed by reason.
    pub connections: Arc<TcpConnectionCounters>,
}

/// Everything a relay exposes on `/metrics`: every worker's shared counters, readiness,
/// and which backend this is.
pub struct RelayMetrics {
    backend: &'static str,
    workers: Vec<Arc<SharedCounters>>,
    /// One per worker when ICE-TCP is served, else empty.
    tcp: Vec<TcpWorkerMetrics>,
    ready: AtomicBool,
    worker_failures: AtomicU64,
    /// The id of the hint key new hints are checked against first (the current one).
    hint_key: AtomicU64,
    /// Key file reloads: taken, and refused.
    key_reloads: [AtomicU64; 2],
    /// Connections to the HTTP endpoints refused or cut, by [`HttpRefusal`].
    http_refused: [AtomicU64; HttpRefusal::ALL.len()],
    fast_path: std::sync::OnceLock<FastPathSource>,
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

impl core::fmt::Debug for RelayMetrics {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RelayMetrics")
            .field("backend", &self.backend)
            .field("workers", &self.workers.len())
            .field("fast_path", &self.fast_path.get().is_some())
            .finish_non_exhaustive()
    }
}

impl RelayMetrics {
    /// Metrics for `workers` workers of the named backend (`"mio"` or `"afxdp"`).
    pub fn new(backend: &'static str, workers: usize) -> Arc<Self> {
        Self::serving(backend, workers, false)
    }

    /// Like [`RelayMetrics::new`], with each worker's ICE-TCP side too when `tcp`.
    pub fn serving(backend: &'static str, workers: usize, tcp: bool) -> Arc<Self> {
        let tcp_workers = if tcp { workers } else { 0 };
        Arc::new(RelayMetrics {
            backend,
            workers: (0..workers).map(|_| Arc::default()).collect(),
            tcp: (0..tcp_workers)
                .map(|_| TcpWorkerMetrics::default())
                .collect(),
            ready: AtomicBool::new(false),
            worker_failures: AtomicU64::new(0),
            hint_key: AtomicU64::new(0),
            key_reloads: Default::default(),
            http_refused: Default::default(),
            fast_path: std::sync::OnceLock::new(),
        })
    }

    /// Exposes an in-kernel fast path's totals (read at each scrape). Once; later calls
    /// are ignored.
    pub fn set_fast_path(&self, source: FastPathSource) {
        let _ = self.fast_path.set(source);
    }

    /// The fast path's totals, if there is one.
    pub fn fast_path(&self) -> Option<FastPathTotals> {
        self.fast_path.get().map(|read| read())
    }

    /// The hint keys in use now have `current` as their current key id (at start and
    /// after each reload that took effect).
    pub fn hint_key_in_use(&self, current: u8) {
        self.hint_key.store(u64::from(current), Ordering::Relaxed);
    }

    /// A reload of the key file took effect (`true`) or was refused (`false`).
    pub fn hint_key_reloaded(&self, taken: bool) {
        self.key_reloads[usize::from(!taken)].fetch_add(1, Ordering::Relaxed);
    }

    /// The HTTP endpoints refused or cut a connection.
    pub fn http_refused(&self, refusal: HttpRefusal) {
        self.http_refused[refusal as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The shared counters of worker `index`, for that worker to publish into.
    pub fn worker(&self, index: usize) -> Arc<SharedCounters> {
        Arc::clone(&self.workers[index])
    }

    /// Worker `index`'s ICE-TCP counters, when TCP is served.
    pub fn tcp_worker(&self, index: usize) -> Option<&TcpWorkerMetrics> {
        self.tcp.get(index)
    }

    /// Sets readiness (false while starting and draining).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the relay is ready: started, not draining, and no worker has stopped on
    /// its own (its flows would be lost, its share of the port unserved).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && self.worker_failures.load(Ordering::Relaxed) == 0
    }

    /// A worker stopped on its own (a panic or an I/O error): readiness turns off.
    pub fn worker_failed(&self) {
        self.worker_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The sum of all workers' last published counters.
    pub fn totals(&self) -> WorkerCounters {
        let mut total = WorkerCounters::default();
        for w in &self.workers {
            let s = w.snapshot();
            for i in 0..2 {
                total.received_datagrams[i] += s.received_datagrams[i];
                total.received_bytes[i] += s.received_bytes[i];
                total.forwarded_datagrams[i] += s.forwarded_datagrams[i];
                total.forwarded_bytes[i] += s.forwarded_bytes[i];
            }
            for (t, d) in total.dropped_datagrams.iter_mut().zip(s.dropped_datagrams) {
                *t += d;
            }
            for (t, d) in total.dropped_bytes.iter_mut().zip(s.dropped_bytes) {
                *t += d;
            }
            total.flows_active += s.flows_active;
            total.flows_created += s.flows_created;
            total.flows_expired += s.flows_expired;
            total.flows_refused += s.flows_refused;
            total.flows_shed += s.flows_shed;
            total.cache_hits += s.cache_hits;
            total.cache_misses += s.cache_misses;
            for (t, e) in total.cache_errors.iter_mut().zip(s.cache_errors) {
                *t += e;
            }
            total.shared_returns += s.shared_returns;
            total.flows_unshared += s.flows_unshared;
            total.flows_over_prefix_cap += s.flows_over_prefix_cap;
            total.replay_overwrites += s.replay_overwrites;
            total.bundles_received += s.bundles_received;
            total.bundles_sent += s.bundles_sent;
            total.gso_sends += s.gso_sends;
        }
        total
    }

    /// Every relay metric, written in `format`.
    pub fn render(self: &Arc<Self>, format: Exposition) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Arc::clone(self)));
        format.encode(&registry)
    }
}

type Scalar = fn(&WorkerCounters) -> u64;

const PORT_LABELS: [&str; 2] = [Port::Vip.label(), Port::Internal.label()];
const DIRECTION_LABELS: [&str; 2] = [Direction::In.label(), Direction::Out.label()];
const DROP_LABELS: [&str; DropReason::COUNT] = {
    let mut labels = [""; DropReason::COUNT];
    let mut i = 0;
    while i < DropReason::COUNT {
        labels[i] = DropReason::ALL[i].label();
        i += 1;
    }
    labels
};

/// Per-worker scalar metrics: name (without `_total`), help, type, accessor.
const WORKER_SCALARS: &[(&str, &str, MetricType, Scalar)] = &[
    (
        "ufrag_relay_flows_active",
        "Flows in the worker's table.",
        MetricType::Gauge,
        |c| c.flows_active,
    ),
    (
        "ufrag_relay_flows_created",
        "Flows created.",
        MetricType::Counter,
        |c| c.flows_created,
    ),
    (
        "ufrag_relay_flows_expired",
        "Flows removed after the idle timeout.",
        MetricType::Counter,
        |c| c.flows_expired,
    ),
    (
        "ufrag_relay_flows_refused",
        "New flows refused because the table was full of live flows.",
        MetricType::Counter,
        |c| c.flows_refused,
    ),
    (
        "ufrag_relay_flows_shed",
        "Flows that carried nothing but STUN, shed to make room in a full table.",
        MetricType::Counter,
        |c| c.flows_shed,
    ),
    (
        "ufrag_relay_cache_hits",
        "Route-cache lookups that restored a flow.",
        MetricType::Counter,
        |c| c.cache_hits,
    ),
    (
        "ufrag_relay_cache_misses",
        "Route-cache lookups that found no route.",
        MetricType::Counter,
        |c| c.cache_misses,
    ),
    (
        "ufrag_relay_shared_returns",
        "Return frames for flows another worker owns, sent by this one (relay-afxdp: the NIC puts a transceiver's replies on any queue).",
        MetricType::Counter,
        |c| c.shared_returns,
    ),
    (
        "ufrag_relay_flows_unshared",
        "Flows whose return path found no room in the shared return paths: only their owner sends their returns.",
        MetricType::Counter,
        |c| c.flows_unshared,
    ),
    (
        "ufrag_relay_flows_over_prefix_cap",
        "Flows that proved themselves while their client's prefix held its cap of proven flows (a sixteenth of the table, at least 64): they keep working, unproven (sheddable for a newcomer when the table is full, not cached).",
        MetricType::Counter,
        |c| c.flows_over_prefix_cap,
    ),
    (
        "ufrag_relay_replay_filter_overwrites",
        "First requests recorded in the replay filter over another transaction still within its window (both its buckets were full): that transaction could be replayed once more. Non-zero: the filter holds less than the relay admitted (a flood of authentic first requests, or 6+ workers at the default rate and hint age).",
        MetricType::Counter,
        |c| c.replay_overwrites,
    ),
    (
        "ufrag_relay_bundles_received",
        "Bundles of frames (frame version 2) received on the internal port and opened; their frames count as datagrams.",
        MetricType::Counter,
        |c| c.bundles_received,
    ),
    (
        "ufrag_relay_bundles_sent",
        "Bundles of frames sent on the internal port (--bundle-to); their frames count as datagrams.",
        MetricType::Counter,
        |c| c.bundles_sent,
    ),
    (
        "ufrag_relay_gso_sends",
        "Sends on the internal port that carried several datagrams as GSO segments (--internal-gso); each datagram counts as forwarded.",
        MetricType::Counter,
        |c| c.gso_sends,
    ),
];

fn encode_fast_path(
    encoder: &mut DescriptorEncoder<'_>,
    fast: &FastPathTotals,
) -> Result<(), core::fmt::Error> {
    let directions = [fast.forward, fast.back];
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_fast_path_forwarded_datagrams",
        "Datagrams the in-kernel fast path sent itself; direction in = to transceivers, out = to clients.",
        None,
        MetricType::Counter,
    )?;
    for (label, (packets, _)) in DIRECTION_LABELS.iter().zip(directions) {
        ConstCounter::new(packets).encode(e.encode_family(&[("direction", *label)])?)?;
    }
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_fast_path_forwarded_bytes",
        "Bytes the in-kernel fast path sent (whole frames, as sent).",
        None,
        MetricType::Counter,
    )?;
    for (label, (_, bytes)) in DIRECTION_LABELS.iter().zip(directions) {
        ConstCounter::new(bytes).encode(e.encode_family(&[("direction", *label)])?)?;
    }
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_fast_path_left_datagrams",
        "Datagrams to a VIP or internal address the fast path left to the workers, by reason.",
        None,
        MetricType::Counter,
    )?;
    for (label, count) in FAST_PATH_LEFT_LABELS.iter().zip(fast.left) {
        ConstCounter::new(count).encode(e.encode_family(&[("reason", *label)])?)?;
    }
    let e = encoder.encode_descriptor(
        "ufrag_relay_fast_path_flows_not_installed",
        "Proven flows the workers could not hand to the fast path (they carry them).",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(fast.flows_not_installed).encode(e)
}

fn encode_value(
    encoder: prometheus_client::encoding::MetricEncoder<'_>,
    kind: MetricType,
    value: u64,
) -> Result<(), core::fmt::Error> {
    match kind {
        MetricType::Gauge => {
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(encoder)
        }
        _ => ConstCounter::new(value).encode(encoder),
    }
}

/// The per-worker families (datagrams received, forwarded and dropped; flows; cache),
/// named `<prefix>_…`: `ufrag_relay` for UDP, `ufrag_relay_tcp` for ICE-TCP messages.
/// What one family of worker counters counts: UDP datagrams, or the RFC 4571 messages
/// of ICE-TCP connections.
#[derive(Clone, Copy)]
struct CountedUnit {
    /// The metric name prefix.
    prefix: &'static str,
    /// The unit in the names and help texts: `datagrams` or `messages`.
    unit: &'static str,
}

const UDP_DATAGRAMS: CountedUnit = CountedUnit {
    prefix: "ufrag_relay",
    unit: "datagrams",
};
const TCP_MESSAGES: CountedUnit = CountedUnit {
    prefix: "ufrag_relay_tcp",
    unit: "messages",
};

fn encode_worker_families(
    encoder: &mut DescriptorEncoder<'_>,
    counted: CountedUnit,
    snapshots: &[WorkerCounters],
) -> Result<(), core::fmt::Error> {
    let CountedUnit { prefix, unit } = counted;
    type PerLabel = fn(&WorkerCounters, usize) -> u64;
    let families: [(&str, &str, &str, &[&str], PerLabel); 6] = [
        (
            "received_{unit}",
            "{Unit} received; port vip = from clients, internal = from transceivers and relays.",
            "port",
            &PORT_LABELS,
            |c, i| c.received_datagrams[i],
        ),
        (
            "received_bytes",
            "Bytes received (UDP payload; frame headers included on the internal port).",
            "port",
            &PORT_LABELS,
            |c, i| c.received_bytes[i],
        ),
        (
            "forwarded_{unit}",
            "{Unit} forwarded; direction in = client to transceiver, out = back to the client.",
            "direction",
            &DIRECTION_LABELS,
            |c, i| c.forwarded_datagrams[i],
        ),
        (
            "forwarded_bytes",
            "Bytes of the {unit} forwarded, as received (frame headers included on frames).",
            "direction",
            &DIRECTION_LABELS,
            |c, i| c.forwarded_bytes[i],
        ),
        (
            "dropped_{unit}",
            "{Unit} dropped, by reason.",
            "reason",
            &DROP_LABELS,
            |c, i| c.dropped_datagrams[i],
        ),
        (
            "dropped_bytes",
            "Bytes of the {unit} dropped, as received, by reason.",
            "reason",
            &DROP_LABELS,
            |c, i| c.dropped_bytes[i],
        ),
    ];
    let capitalised = format!("{}{}", unit[..1].to_ascii_uppercase(), &unit[1..]);
    for (name, help, label, values, get) in families {
        let name = format!("{prefix}_{}", name.replace("{unit}", unit));
        let help = help.replace("{unit}", unit).replace("{Unit}", &capitalised);
        let mut e = encoder.encode_descriptor(&name, &help, None, MetricType::Counter)?;
        for (worker, s) in snapshots.iter().enumerate() {
            for (i, value) in values.iter().enumerate() {
                let labels = [("worker", worker.to_string()), (label, value.to_string())];
                ConstCounter::new(get(s, i)).encode(e.encode_family(&labels)?)?;
            }
        }
    }
    for (name, help, kind, get) in WORKER_SCALARS {
        let name = name.replacen("ufrag_relay", prefix, 1);
        let mut e = encoder.encode_descriptor(&name, help, None, *kind)?;
        for (worker, s) in snapshots.iter().enumerate() {
            let labels = [("worker", worker.to_string())];
            encode_value(e.encode_family(&labels)?, *kind, get(s))?;
        }
    }
    let name = format!("{prefix}_cache_errors");
    let mut e = encoder.encode_descriptor(
        &name,
        "Route-cache operations that failed, by reason.",
        None,
        MetricType::Counter,
    )?;
    for (worker, s) in snapshots.iter().enumerate() {
        for reason in CacheError::ALL {
            let labels = [
                ("worker", worker.to_string()),
                ("reason", reason.label().to_string()),
            ];
            ConstCounter::new(s.cache_errors[reason.index()]).encode(e.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Each worker's ICE-TCP connections: accepted, open, and closed by reason.
fn encode_tcp_connections(
    encoder: &mut DescriptorEncoder<'_>,
    tcp: &[TcpWorkerMetrics],
) -> Result<(), core::fmt::Error> {
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_tcp_connections_accepted",
        "ICE-TCP connections accepted (refused ones are counted as closed only).",
        None,
        MetricType::Counter,
    )?;
    for (worker, t) in tcp.iter().enumerate() {
        let labels = [("worker", worker.to_string())];
        ConstCounter::new(t.connections.accepted()).encode(e.encode_family(&labels)?)?;
    }
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_tcp_connections_active",
        "ICE-TCP connections open now.",
        None,
        MetricType::Gauge,
    )?;
    for (worker, t) in tcp.iter().enumerate() {
        let labels = [("worker", worker.to_string())];
        encode_value(
            e.encode_family(&labels)?,
            MetricType::Gauge,
            t.connections.active(),
        )?;
    }
    let mut e = encoder.encode_descriptor(
        "ufrag_relay_tcp_connections_closed",
        "ICE-TCP connections closed or refused, by reason.",
        None,
        MetricType::Counter,
    )?;
    for (worker, t) in tcp.iter().enumerate() {
        for reason in TcpCloseReason::ALL {
            let labels = [
                ("worker", worker.to_string()),
                ("reason", reason.label().to_string()),
            ];
            ConstCounter::new(t.connections.closed_for(*reason))
                .encode(e.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

impl Collector for RelayMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), core::fmt::Error> {
        let snapshots: Vec<WorkerCounters> = self.workers.iter().map(|w| w.snapshot()).collect();

        let info = [
            ("backend", self.backend),
            ("version", env!("CARGO_PKG_VERSION")),
        ];
        let mut info_encoder = encoder.encode_descriptor(
            "ufrag_relay_build_info",
            "Which relay backend and version this is (always 1).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1i64).encode(info_encoder.encode_family(&info)?)?;

        let e = encoder.encode_descriptor(
            "ufrag_relay_ready",
            "1 when the relay accepts new flows; 0 while starting or draining.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(self.is_ready())).encode(e)?;

        let e = encoder.encode_descriptor(
            "ufrag_relay_worker_failures",
            "Workers that stopped on their own (a panic or an I/O error); readiness is off.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(self.worker_failures.load(Ordering::Relaxed)).encode(e)?;

        let mut e = encoder.encode_descriptor(
            "ufrag_relay_hint_key_info",
            "The current hint key (the first in the key file), by its id (always 1).",
            None,
            MetricType::Gauge,
        )?;
        let key_id = [("key_id", self.hint_key.load(Ordering::Relaxed).to_string())];
        ConstGauge::new(1i64).encode(e.encode_family(&key_id)?)?;
        let mut e = encoder.encode_descriptor(
            "ufrag_relay_hint_key_reloads",
            "Reloads of the hint key file (SIGHUP or a change of the file): taken, or refused \
             (its mode or syntax; the keys in use stay).",
            None,
            MetricType::Counter,
        )?;
        for (result, count) in ["taken", "refused"].iter().zip(&self.key_reloads) {
            let labels = [("result", *result)];
            ConstCounter::new(count.load(Ordering::Relaxed)).encode(e.encode_family(&labels)?)?;
        }
        let mut e = encoder.encode_descriptor(
            "ufrag_relay_http_refused",
            "Connections to /metrics, /healthz and /readyz closed at once (an address's \
             connection rate, no thread) or cut (an older one at an address's or the \
             server's cap, no request in time, or a bad one).",
            None,
            MetricType::Counter,
        )?;
        for (refusal, count) in HttpRefusal::ALL.iter().zip(&self.http_refused) {
            let labels = [("reason", refusal.label())];
            ConstCounter::new(count.load(Ordering::Relaxed)).encode(e.encode_family(&labels)?)?;
        }

        if let Some(fast) = self.fast_path() {
            encode_fast_path(&mut encoder, &fast)?;
        }

        encode_worker_families(&mut encoder, UDP_DATAGRAMS, &snapshots)?;
        if !self.tcp.is_empty() {
            let tcp: Vec<WorkerCounters> = self.tcp.iter().map(|t| t.messages.snapshot()).collect();
            encode_worker_families(&mut encoder, TCP_MESSAGES, &tcp)?;
            encode_tcp_connections(&mut encoder, &self.tcp)?;
        }
        Ok(())
    }
}
