//! Transceiver metrics: sessions by state and end reason, datagrams, drops by reason,
//! echoed audio, and session setup time, written as the relay's are
//! ([`ufrag_common::runtime::exposition::Exposition`]: OpenMetrics or Prometheus text, as the scraper
//! asks). Reasons are enums ([`DropReason`], [`EndReason`]) indexing counters made once, so
//! counting a datagram never allocates. Names follow the relay's: a datagram is a UDP
//! payload, a packet is an RTP packet, a message is a model-protocol message.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use ufrag_common::frame::FrameError;
use ufrag_common::label_enum;
use ufrag_common::runtime::exposition::Exposition;

use crate::session_token::TokenRefusal;
use ufrag_model_protocol::messages::SessionStats;
use ufrag_model_protocol::wire::DecodeError;

type Labels = Vec<(&'static str, &'static str)>;

label_enum! {
    /// Why a datagram the worker received (or meant to send) went nowhere.
    pub enum DropReason {
        /// A frame from outside the allowed relay networks (relay mode).
        FrameSourceNotAllowed = "frame_source_not_allowed",
        /// Shorter than its frame header says.
        FrameTooShort = "frame_too_short",
        /// Not a frame at all (relay mode expects frames only).
        FrameNotAFrame = "frame_not_a_frame",
        /// A frame version this code does not know.
        FrameUnknownVersion = "frame_unknown_version",
        /// Reserved frame bits set.
        FrameReservedBits = "frame_reserved_bits",
        /// A frame header with no datagram behind it.
        FrameEmptyPayload = "frame_empty_payload",
        /// A bundle of frames (frame version 2) that is not well-formed: its count, a
        /// length or its end do not add up. Dropped whole, as one datagram.
        FrameBadBundle = "frame_bad_bundle",
        /// No session for this STUN ufrag or client path.
        NoSession = "no_session",
        /// A check from a new client address after the session adopted its share of
        /// new addresses for now.
        PathBudget = "path_budget",
        /// A check for one session from a path another live session holds.
        PathTaken = "path_taken",
        /// DTLS or media for a path that has not answered its probe, beyond what the
        /// session holds for it: dropped (str0m retransmits a DTLS flight; media is not
        /// sent again).
        PathHoldFull = "path_hold_full",
        /// An incoming datagram longer than the receive buffer (cut by the kernel).
        Truncated = "truncated",
        /// str0m could not parse the datagram.
        Unparsable = "unparsable",
        /// str0m refused the input.
        RtcRefused = "rtc_refused",
        /// An outgoing datagram for a session no relay has sent anything for yet.
        NoRelay = "no_relay",
        /// An outgoing datagram too large for one framed datagram.
        TooLarge = "too_large",
        /// The socket refused to send.
        SendFailed = "send_failed"
    }
}

impl From<FrameError> for DropReason {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::TooShort | FrameError::BufferTooSmall => DropReason::FrameTooShort,
            FrameError::NotAFrame => DropReason::FrameNotAFrame,
            FrameError::UnknownVersion => DropReason::FrameUnknownVersion,
            FrameError::ReservedBitsSet => DropReason::FrameReservedBits,
            FrameError::EmptyPayload => DropReason::FrameEmptyPayload,
        }
    }
}

impl From<ufrag_udp::PushError> for DropReason {
    /// Why the send batch refused a datagram: too large for its buffers, or not sendable
    /// (a full batch, or a family the socket cannot reach).
    fn from(e: ufrag_udp::PushError) -> Self {
        match e {
            ufrag_udp::PushError::TooLarge => DropReason::TooLarge,
            ufrag_udp::PushError::Full | ufrag_udp::PushError::WrongFamily => {
                DropReason::SendFailed
            }
        }
    }
}

label_enum! {
    /// Why the signaling endpoint refused a connection or a request before handling it.
    pub enum HttpRefusal {
        /// Every connection slot was taken; the new connection was closed at once.
        ConnectionCap = "connection_cap",
        /// The client's address (IPv4, or IPv6 /64) held its cap of connections; the new
        /// one was closed at once.
        AddressConnectionCap = "address_connection_cap",
        /// The client's address spent its rate of requests of any kind (429).
        RequestRate = "request_rate",
        /// The client's address spent its rate of session POSTs (429).
        PostRate = "post_rate",
        /// The client's address had its cap of sessions waiting to connect (429).
        UnconnectedCap = "unconnected_cap",
        /// The session token's owner (its `sub`) had its cap of live sessions (429).
        OwnerSessionCap = "owner_session_cap",
        /// The offer had more media sections or candidates than allowed (400).
        OfferLimits = "offer_limits",
        /// The body was larger than allowed (413).
        BodyTooLarge = "body_too_large",
        /// The body did not arrive in time (408).
        BodyTooSlow = "body_too_slow",
        /// The headers did not arrive in time, or were too large or too many (hyper
        /// closed the connection).
        BadHeaders = "bad_headers",
        /// A connection from a trusted proxy, with `--proxy-protocol`, did not begin with
        /// a valid PROXY protocol v2 header in time (closed).
        BadProxyHeader = "bad_proxy_header"
    }
}

label_enum! {
    /// Why a session ended.
    pub enum EndReason {
        /// The transceiver is shutting down.
        Shutdown = "shutdown",
        /// DELETE from signaling.
        Deleted = "deleted",
        /// str0m reported an error.
        RtcError = "rtc_error",
        /// ICE lost the client.
        IceDisconnected = "ice_disconnected",
        /// The peer closed it (DTLS close).
        Closed = "closed",
        /// Not connected within the connect timeout.
        ConnectTimeout = "connect_timeout",
        /// Nothing received within the idle timeout.
        Idle = "idle",
        /// The model backend asked to end it (`session.end`).
        ModelEnded = "model_ended"
    }
}

label_enum! {
    /// Why a message between a worker and its model backend was not delivered.
    pub enum ModelDrop {
        /// The backend was not connected (audio and events are not kept for later).
        Disconnected = "disconnected",
        /// The queue to a slow backend was full: the oldest audio frame went.
        QueueFull = "queue_full",
        /// The backend sent faster than the worker takes: the newest message went.
        BackendFlood = "backend_flood",
        /// A session's playout buffer was full (`--playout-buffer` of speech ahead of
        /// playback): the backend's newest audio frame went.
        PlayoutFull = "playout_full",
        /// A session had 64 marks waiting: the backend's newest mark went.
        MarksFull = "marks_full",
        /// PCM mode: libopus could not decode a client's packet or encode the backend's
        /// PCM; the frame went.
        CodecError = "codec_error",
        /// PCM mode: the backend sent audio, a mark or a clear for a session its
        /// connection was not told of, or one that ended; it went.
        UnknownSession = "unknown_session"
    }
}

/// All transceiver metrics; cheap to share (`Arc`).
#[derive(Debug)]
pub struct TransceiverMetrics {
    registry: Registry,
    sessions_active: Gauge,
    sessions_created: Counter,
    /// Indexed by [`EndReason::index`]; every label exists from the start.
    sessions_ended: Vec<Counter>,
    datagrams_in: Counter,
    datagrams_out: Counter,
    /// Indexed by [`DropReason::index`].
    drops: Vec<Counter>,
    audio_echoed: Counter,
    ice_restarts: Counter,
    ice_restarts_refused: Counter,
    path_probes: Counter,
    kept_on_verified_path: Counter,
    held_for_probe: Counter,
    consent_probes: Counter,
    consent_lost: Counter,
    end_notices: Counter,
    connect_seconds: Histogram,
    /// Indexed by [`HttpRefusal::index`].
    http_refusals: Vec<Counter>,
    worker_failures: Counter,
    hint_key_info: Family<Vec<(&'static str, String)>, Gauge>,
    sessions_by_hint_key: Family<Vec<(&'static str, String)>, Gauge>,
    /// Hint key file reloads: `[taken, refused]`.
    hint_key_reloads: [Counter; 2],
    ready: AtomicBool,
    /// 1 when `/readyz` answers 200 (set as each scrape renders).
    ready_gauge: Gauge,
    /// Signaling's answers by status class (`2xx` … `5xx`), indexed by class - 1.
    http_responses: [Counter; 5],
    /// Indexed by [`ModelDrop::index`].
    model_drops: Vec<Counter>,
    /// Indexed by [`DecodeError::index`].
    model_errors: Vec<Counter>,
    /// Connection attempts: `[connected, failed]`.
    model_connects: [Counter; 2],
    model_disconnects: Counter,
    model_connected: Gauge,
    /// Indexed by [`TokenRefusal::index`].
    session_token_refusals: Vec<Counter>,
    session_tokens_accepted: Counter,
    /// Each session's quality report ([`SessionStats`]), across sessions.
    quality: QualityHistograms,
}

/// Histograms of the sessions' quality reports: one observation per session per stats
/// interval.
#[derive(Debug)]
struct QualityHistograms {
    rtt_seconds: Histogram,
    loss_in_ratio: Histogram,
    loss_out_ratio: Histogram,
    jitter_seconds: Histogram,
}

impl QualityHistograms {
    fn register(registry: &mut Registry) -> Self {
        let loss = || Histogram::new([0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]);
        let quality = QualityHistograms {
            rtt_seconds: Histogram::new([0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0]),
            loss_in_ratio: loss(),
            loss_out_ratio: loss(),
            jitter_seconds: Histogram::new([0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16]),
        };
        registry.register(
            "session_rtt_seconds",
            "Sessions' round trip to the client (RTCP), one observation per session per stats interval.",
            quality.rtt_seconds.clone(),
        );
        registry.register(
            "session_loss_in_ratio",
            "Share of a session's incoming audio lost on the way from the client (our RTCP receiver report), per session per stats interval.",
            quality.loss_in_ratio.clone(),
        );
        registry.register(
            "session_loss_out_ratio",
            "Share of a session's outgoing audio the client reported lost, per session per stats interval.",
            quality.loss_out_ratio.clone(),
        );
        registry.register(
            "session_jitter_seconds",
            "Interarrival jitter of a session's incoming audio (RFC 3550), per session per stats interval.",
            quality.jitter_seconds.clone(),
        );
        quality
    }
}

impl Default for TransceiverMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl TransceiverMetrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("ufrag_transceiver");
        let sessions_active = Gauge::default();
        let sessions_created = Counter::default();
        let sessions_ended = Family::<Labels, Counter>::default();
        let datagrams = Family::<Labels, Counter>::default();
        let drops = Family::<Labels, Counter>::default();
        let audio_echoed = Counter::default();
        let ice_restarts = Counter::default();
        let ice_restarts_refused = Counter::default();
        let path_probes = Counter::default();
        let kept_on_verified_path = Counter::default();
        let held_for_probe = Counter::default();
        let consent_probes = Counter::default();
        let consent_lost = Counter::default();
        let end_notices = Counter::default();
        registry.register(
            "session_end_notices",
            "Session-ended notices sent to a relay (a frame with no datagram), so it frees the session's flow at once.",
            end_notices.clone(),
        );
        registry.register(
            "held_for_probe_datagrams",
            "DTLS or media held for a client path until it answers its probe (sent then, or dropped with the hold when str0m moves to another path).",
            held_for_probe.clone(),
        );
        registry.register(
            "consent_probes",
            "Consent probes of a session's verified client path (RFC 7675).",
            consent_probes.clone(),
        );
        registry.register(
            "consent_lost",
            "Verified client paths that answered no consent probe for 30 s; their media waits.",
            consent_lost.clone(),
        );
        registry.register(
            "path_probes",
            "Probes sent to a client path that has not shown it receives (return routability).",
            path_probes.clone(),
        );
        registry.register(
            "kept_on_verified_path_datagrams",
            "Datagrams sent to a session's verified path instead of the unverified one str0m chose.",
            kept_on_verified_path.clone(),
        );
        let connect_seconds = Histogram::new([
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ]);
        registry.register(
            "sessions_active",
            "Sessions held by the workers.",
            sessions_active.clone(),
        );
        registry.register(
            "sessions_created",
            "Sessions created by signaling.",
            sessions_created.clone(),
        );
        registry.register(
            "sessions_ended",
            "Sessions ended, by reason.",
            sessions_ended.clone(),
        );
        registry.register("datagrams", "Datagrams, by direction.", datagrams.clone());
        registry.register(
            "dropped_datagrams",
            "Datagrams dropped, by reason.",
            drops.clone(),
        );
        registry.register(
            "echoed_audio_packets",
            "Audio frames from the model taken for playback (each played at real time).",
            audio_echoed.clone(),
        );
        registry.register(
            "ice_restarts",
            "ICE restarts (new server ufrag, same worker).",
            ice_restarts.clone(),
        );
        registry.register(
            "ice_restarts_refused",
            "ICE restarts refused: the session asked faster than its budget (3 at once, then one per 5 s).",
            ice_restarts_refused.clone(),
        );
        registry.register(
            "connect_seconds",
            "Time from signaling to ICE+DTLS connected.",
            connect_seconds.clone(),
        );
        let http_refusals = Family::<Labels, Counter>::default();
        registry.register(
            "http_refusals",
            "Signaling connections and requests refused before handling, by reason.",
            http_refusals.clone(),
        );
        let worker_failures = Counter::default();
        registry.register(
            "worker_failures",
            "Workers that stopped (a panic or an I/O error): readiness turns off.",
            worker_failures.clone(),
        );
        let hint_key_info = Family::<Vec<(&'static str, String)>, Gauge>::default();
        registry.register(
            "hint_key_info",
            "The current hint key (it mints new sessions' ufrags), by its id (always 1).",
            hint_key_info.clone(),
        );
        let ready_gauge = Gauge::default();
        registry.register(
            "ready",
            "1 when /readyz answers 200: accepting sessions, every worker alive, the model \
             backend connected.",
            ready_gauge.clone(),
        );
        let build_info = Family::<Vec<(&'static str, String)>, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the build's version in its label.",
            build_info.clone(),
        );
        build_info
            .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION").to_string())])
            .set(1);
        let http_responses = Family::<Labels, Counter>::default();
        registry.register(
            "http_responses",
            "Answers of the signaling and operations listeners, by status class (1xx … 5xx).",
            http_responses.clone(),
        );
        let sessions_by_hint_key = Family::<Vec<(&'static str, String)>, Gauge>::default();
        registry.register(
            "sessions_by_hint_key",
            "Live sessions whose server ufrag was minted with each hint key (by key id): a \
             previous key may leave the relays' and transceivers' key files once its count is \
             0 and hint_max_age has passed since it stopped minting.",
            sessions_by_hint_key.clone(),
        );
        let hint_key_reloads = Family::<Labels, Counter>::default();
        registry.register(
            "hint_key_reloads",
            "Reloads of the hint key file (SIGHUP or a change of the file): taken, or refused \
             (its mode or syntax; the keys in use stay).",
            hint_key_reloads.clone(),
        );
        let model_drops = Family::<Labels, Counter>::default();
        registry.register(
            "model_dropped_messages",
            "Messages between the workers and the model backend not delivered, by reason.",
            model_drops.clone(),
        );
        let model_errors = Family::<Labels, Counter>::default();
        registry.register(
            "model_refused_messages",
            "Messages from the model backend refused as malformed, by reason.",
            model_errors.clone(),
        );
        let model_connects = Family::<Labels, Counter>::default();
        registry.register(
            "model_connects",
            "Connection attempts to the model backend (hello answered, or failed).",
            model_connects.clone(),
        );
        let model_disconnects = Counter::default();
        registry.register(
            "model_disconnects",
            "Model backend connections lost while serving.",
            model_disconnects.clone(),
        );
        let model_connected = Gauge::default();
        registry.register(
            "model_connections",
            "Workers connected to an external model backend now (`--model ws://…`).",
            model_connected.clone(),
        );
        let session_token_refusals = Family::<Labels, Counter>::default();
        registry.register(
            "session_token_refusals",
            "Session POSTs, PATCHes and DELETEs refused for their session token, by reason \
             (401: missing, malformed, bad_signature, expired, not_yet_valid, \
             lifetime_too_long, bad_claims; 403: wrong_audience, reused; 503: \
             replay_memory_full).",
            session_token_refusals.clone(),
        );
        let session_tokens_accepted = Counter::default();
        registry.register(
            "session_tokens_accepted",
            "Session tokens that admitted a new session.",
            session_tokens_accepted.clone(),
        );
        let quality = QualityHistograms::register(&mut registry);
        // One counter per label value, made once: counting never allocates.
        let by = |family: &Family<Labels, Counter>, name: &'static str, value: &'static str| {
            family.get_or_create(&vec![(name, value)]).clone()
        };
        TransceiverMetrics {
            registry,
            sessions_active,
            sessions_created,
            sessions_ended: EndReason::ALL
                .iter()
                .map(|r| by(&sessions_ended, "reason", r.label()))
                .collect(),
            datagrams_in: by(&datagrams, "direction", "in"),
            datagrams_out: by(&datagrams, "direction", "out"),
            drops: DropReason::ALL
                .iter()
                .map(|r| by(&drops, "reason", r.label()))
                .collect(),
            audio_echoed,
            ice_restarts,
            ice_restarts_refused,
            path_probes,
            kept_on_verified_path,
            held_for_probe,
            consent_probes,
            consent_lost,
            end_notices,
            connect_seconds,
            http_refusals: HttpRefusal::ALL
                .iter()
                .map(|r| by(&http_refusals, "reason", r.label()))
                .collect(),
            worker_failures,
            hint_key_info,
            sessions_by_hint_key,
            hint_key_reloads: ["taken", "refused"].map(|r| by(&hint_key_reloads, "result", r)),
            ready: AtomicBool::new(false),
            ready_gauge,
            http_responses: ["1xx", "2xx", "3xx", "4xx", "5xx"]
                .map(|class| by(&http_responses, "code", class)),
            model_drops: ModelDrop::ALL
                .iter()
                .map(|r| by(&model_drops, "reason", r.label()))
                .collect(),
            model_errors: DecodeError::ALL
                .iter()
                .map(|e| by(&model_errors, "reason", e.label()))
                .collect(),
            model_connects: ["connected", "failed"].map(|r| by(&model_connects, "result", r)),
            model_disconnects,
            model_connected,
            session_token_refusals: TokenRefusal::ALL
                .iter()
                .map(|r| by(&session_token_refusals, "reason", r.label()))
                .collect(),
            session_tokens_accepted,
            quality,
        }
    }

    /// A session's quality report, into the histograms (figures it lacks are left out).
    pub fn session_quality(&self, stats: &SessionStats) {
        let quality = &self.quality;
        if let Some(rtt) = stats.rtt {
            quality.rtt_seconds.observe(rtt.as_secs_f64());
        }
        if let Some(loss) = stats.loss_in {
            quality.loss_in_ratio.observe(f64::from(loss));
        }
        if let Some(loss) = stats.loss_out {
            quality.loss_out_ratio.observe(f64::from(loss));
        }
        quality
            .jitter_seconds
            .observe(stats.jitter_in.as_secs_f64());
    }

    /// A request's session token was refused.
    pub fn session_token_refused(&self, refusal: TokenRefusal) {
        self.session_token_refusals[refusal.index()].inc();
    }

    /// A session token admitted a new session.
    pub fn session_token_accepted(&self) {
        self.session_tokens_accepted.inc();
    }

    /// A message to or from the model backend was not delivered.
    pub fn model_dropped(&self, reason: ModelDrop) {
        self.model_drops[reason.index()].inc();
    }

    /// A malformed message from the model backend was refused.
    pub fn model_error(&self, error: DecodeError) {
        self.model_errors[error.index()].inc();
    }

    /// A connection attempt to the model backend succeeded (`true`) or failed.
    pub fn model_connect(&self, connected: bool) {
        self.model_connects[usize::from(!connected)].inc();
    }

    /// A serving connection to the model backend was lost.
    pub fn model_disconnected(&self) {
        self.model_disconnects.inc();
    }

    /// A worker's model became connected (`true`) or not.
    pub fn model_connected(&self, connected: bool) {
        if connected {
            self.model_connected.inc();
        } else {
            self.model_connected.dec();
        }
    }

    /// A session was created.
    pub fn session_created(&self) {
        self.sessions_created.inc();
        self.sessions_active.inc();
    }

    /// A session connected after `elapsed`.
    pub fn session_connected(&self, elapsed: Duration) {
        self.connect_seconds.observe(elapsed.as_secs_f64());
    }

    /// A session ended.
    pub fn session_ended(&self, reason: EndReason) {
        self.sessions_active.dec();
        self.sessions_ended[reason.index()].inc();
    }

    /// A datagram arrived.
    pub fn datagram_in(&self) {
        self.datagrams_in.inc();
    }

    /// `datagrams` of a session's datagrams left (one each, or a bundle's frames).
    pub fn datagrams_out(&self, datagrams: usize) {
        self.datagrams_out.inc_by(datagrams as u64);
    }

    /// A datagram was dropped.
    pub fn dropped(&self, reason: DropReason) {
        self.dropped_many(reason, 1);
    }

    /// `datagrams` were dropped for one reason (one each, or a bundle's frames).
    pub fn dropped_many(&self, reason: DropReason, datagrams: usize) {
        self.drops[reason.index()].inc_by(datagrams as u64);
    }

    /// The model sent an audio packet back.
    pub fn audio_echoed(&self) {
        self.audio_echoed.inc();
    }

    /// A probe went to a client path that has not shown it receives.
    pub fn path_probe(&self) {
        self.path_probes.inc();
    }

    /// DTLS or media waits for its path to answer a probe.
    pub fn held_for_probe(&self) {
        self.held_for_probe.inc();
    }

    /// A relay was told a session ended.
    pub fn end_notice_sent(&self) {
        self.end_notices.inc();
    }

    /// A consent probe went to a session's verified path.
    pub fn consent_probe(&self) {
        self.consent_probes.inc();
    }

    /// A verified path answered no consent probe for too long.
    pub fn consent_lost(&self) {
        self.consent_lost.inc();
    }

    /// A datagram went to the session's verified path instead of an unverified one.
    pub fn kept_on_verified_path(&self) {
        self.kept_on_verified_path.inc();
    }

    /// An ICE restart was applied.
    pub fn ice_restart(&self) {
        self.ice_restarts.inc();
    }

    /// An ICE restart was refused for its session's budget.
    pub fn ice_restart_refused(&self) {
        self.ice_restarts_refused.inc();
    }

    /// Signaling refused a connection or request.
    pub fn http_refused(&self, reason: HttpRefusal) {
        self.http_refusals[reason.index()].inc();
    }

    /// The hint keys in use now have `current` as their current key id.
    pub fn hint_key_in_use(&self, current: u8) {
        self.hint_key_info.clear();
        self.hint_key_info
            .get_or_create(&vec![("key_id", current.to_string())])
            .set(1);
    }

    /// A live session's server ufrag, minted with hint key `key`, came (`+1`) or went
    /// (`-1`): a session created or ended, or an ICE restart's new ufrag.
    pub fn session_hint_key(&self, key: u8, change: i64) {
        self.sessions_by_hint_key
            .get_or_create(&vec![("key_id", key.to_string())])
            .inc_by(change);
    }

    /// A reload of the hint key file took effect (`true`) or was refused (`false`).
    pub fn hint_key_reloaded(&self, taken: bool) {
        self.hint_key_reloads[usize::from(!taken)].inc();
    }

    /// A worker stopped.
    pub fn worker_failed(&self) {
        self.worker_failures.inc();
    }

    /// Readiness.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Readiness.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// An HTTP answer with `status` left a listener.
    pub fn http_response(&self, status: u16) {
        if let Some(counter) = self
            .http_responses
            .get(usize::from(status / 100).wrapping_sub(1))
        {
            counter.inc();
        }
    }

    /// Every metric in `format`, with `ready` as the endpoint's readiness is now
    /// (`/readyz`).
    pub fn render_with_readiness(&self, format: Exposition, ready: bool) -> String {
        self.ready_gauge.set(i64::from(ready));
        self.render(format)
    }

    /// Every metric in `format`.
    pub fn render(&self, format: Exposition) -> String {
        format.encode(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_protocol_document_names_every_end_reason() {
        let specification = include_str!("../../docs/model-protocol.md");
        for reason in EndReason::ALL {
            let row = format!("| `{}` |", reason.label());
            assert!(
                specification.contains(&row),
                "{row} is not in docs/model-protocol.md"
            );
        }
    }
}
