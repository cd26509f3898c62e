//! The messages that cross the model seam, both ways, and what they carry: a session's
//! context and statistics, its audio frames, and the limits the transceiver keeps on what
//! a model asks of it. Nothing about ICE, DTLS, SRTP or SDP crosses the seam.

use std::sync::Arc;
use std::time::Duration;

/// A session's id as the HTTP API shows it (16 hex characters).
pub type SessionId = u64;

/// The largest Opus packet (RFC 6716 §3.4).
pub const MAX_OPUS_LEN: usize = 1275;

/// One audio packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudioFrame {
    /// RTP sequence number.
    pub seq: u16,
    /// RTP timestamp at 48 kHz.
    pub timestamp: u32,
    /// The Opus payload.
    pub payload: Vec<u8>,
}

/// Who a session is for, as the app's server said in the session token it minted
/// (the transceiver's session tokens); empty for a session created without one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionClaims {
    /// The user (`sub`).
    pub subject: Option<String>,
    /// The model or agent route the app chose (`route`).
    pub route: Option<String>,
    /// The app's own metadata (`metadata`: a JSON object).
    pub metadata: Option<serde_json::Value>,
}

/// How a session's client reaches the transceiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientTransport {
    /// UDP (through a relay, or directly).
    Udp,
    /// ICE-TCP through a relay's TCP VIP.
    Tcp,
}

impl ClientTransport {
    /// Its name in the protocol: `udp` or `tcp`.
    pub fn label(self) -> &'static str {
        match self {
            ClientTransport::Udp => "udp",
            ClientTransport::Tcp => "tcp",
        }
    }
}

/// What the model learns about a session when it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionContext {
    /// The session token's claims.
    pub claims: SessionClaims,
    /// The negotiated audio codec, as SDP names it (`opus/48000/2`).
    pub codec: String,
    /// The transport of the client's path when the session connected.
    pub transport: ClientTransport,
    /// The relay that path came through (the relay worker's internal address); `None` in
    /// direct mode.
    pub relay: Option<std::net::SocketAddr>,
}

impl SessionContext {
    /// A session of a client with no token, over UDP, not through a relay (tests).
    pub fn anonymous_udp() -> Self {
        SessionContext {
            claims: SessionClaims::default(),
            codec: OPUS_CODEC.to_string(),
            transport: ClientTransport::Udp,
            relay: None,
        }
    }
}

/// A session's quality as its RTCP says it, every stats interval (`--session-stats-interval`,
/// 5 s by default): what a model can adapt to, and what the metrics' histograms show
/// across sessions.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionStats {
    /// The round trip to the client, from RTCP, if one was measured.
    pub rtt: Option<Duration>,
    /// The share of the client's audio lost on its way in since the last report (our
    /// receiver report's fraction lost).
    pub loss_in: Option<f32>,
    /// The share of our audio the client reported lost over the last second (str0m's
    /// egress loss, from transport-wide congestion control feedback); `None` when the
    /// client sends none.
    pub loss_out: Option<f32>,
    /// The interarrival jitter of the client's audio (RFC 3550), as of our last
    /// receiver report.
    pub jitter_in: Duration,
    /// Audio packets received from the client, in all.
    pub packets_in: u64,
    /// Audio bytes received from the client, in all.
    pub bytes_in: u64,
    /// Bytes sent to the client, in all (every datagram of the session).
    pub bytes_out: u64,
}

/// The one codec a session negotiates: Opus, 48 kHz, two channels in SDP.
pub const OPUS_CODEC: &str = "opus/48000/2";

/// What the transceiver tells the model.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelInput {
    /// DTLS connected: media and events may flow.
    SessionStarted {
        /// The session.
        session: SessionId,
        /// Who it is for and how its client connects.
        context: Arc<SessionContext>,
    },
    /// The model's queued audio was dropped, as it asked ([`ModelOutput::Clear`]).
    AudioCleared {
        /// The session.
        session: SessionId,
        /// Frames that were waiting.
        frames: u32,
        /// Marks that will never be reached, oldest first.
        marks: Vec<String>,
    },
    /// Playback reached a mark ([`ModelOutput::Mark`]).
    MarkPlayed {
        /// The session.
        session: SessionId,
        /// The mark's name.
        name: String,
    },
    /// The session's quality over the last stats interval.
    SessionStats {
        /// The session.
        session: SessionId,
        /// Its figures.
        stats: SessionStats,
    },
    /// The session is gone.
    SessionEnded {
        /// The session.
        session: SessionId,
        /// Why, e.g. `deleted`, `ice_failed`, `idle`.
        reason: &'static str,
    },
    /// Audio from the user.
    Audio {
        /// The session.
        session: SessionId,
        /// The packet.
        frame: AudioFrame,
    },
    /// A message on the `events` data channel (JSON text).
    Event {
        /// The session.
        session: SessionId,
        /// The message.
        json: String,
    },
}

/// What the model tells the transceiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelOutput {
    /// Audio to play to the user.
    Audio {
        /// The session.
        session: SessionId,
        /// The packet.
        frame: AudioFrame,
    },
    /// A message for the `events` data channel.
    Event {
        /// The session.
        session: SessionId,
        /// The message (JSON text).
        json: String,
    },
    /// End this session (its end reason: `model_ended`).
    End {
        /// The session.
        session: SessionId,
    },
    /// Drop the session's audio not yet played (barge-in: the user started speaking).
    Clear {
        /// The session.
        session: SessionId,
    },
    /// Tell me when playback reaches the audio sent so far.
    Mark {
        /// The session.
        session: SessionId,
        /// The mark's name, as the model chose it.
        name: String,
    },
}

impl ModelOutput {
    /// The session it is for.
    pub fn session(&self) -> SessionId {
        match self {
            ModelOutput::Audio { session, .. }
            | ModelOutput::Event { session, .. }
            | ModelOutput::End { session }
            | ModelOutput::Clear { session }
            | ModelOutput::Mark { session, .. } => *session,
        }
    }
}

/// Marks waiting to be reached, per session: a model's `Mark` past this many is refused.
pub const MAX_MARKS: usize = 64;
/// The longest mark name, in bytes.
pub const MAX_MARK_LEN: usize = 64;

/// Extracts `id` from `{"type":"ping","id":N}`; `None` for anything else.
pub fn ping_id(json: &str) -> Option<i64> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    if value.get("type")?.as_str()? != "ping" {
        return None;
    }
    value.get("id")?.as_i64()
}
