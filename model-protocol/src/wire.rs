//! The model protocol, version 1: how [`ModelInput`]s and [`ModelOutput`]s travel over one
//! WebSocket connection to an external model backend. Encoding and decoding only; the
//! connection is the transceiver's model bridge's, and a backend's own.
//!
//! The specification is `docs/model-protocol.md` in the repository (written for backend
//! authors in any language; a test below keeps it and this codec in step). In short: a
//! `hello` each way on subprotocol [`PROTOCOL`]; JSON text messages `session.started`
//! (with the session's context: the session token's claims, the codec, the client's
//! transport and relay), `session.stats`, `session.ended`, `event`, `audio.cleared`,
//! `audio.mark_played` and, from the backend, `event`, `audio.clear`, `audio.mark` and
//! `session.end`;
//! audio as binary messages, [`AUDIO_KIND`] then the session id, the RTP sequence number
//! and 48 kHz timestamp (big endian, [`AUDIO_HEADER_LEN`] bytes in all) and one Opus
//! packet, or, for a backend whose hello chose PCM ([`AudioFormat`]), 16-bit
//! little-endian samples. Fields a version-1 peer does not know are ignored; a message it
//! cannot read is refused with a [`DecodeError`], counted by its label, and the
//! connection stays up.

use crate::audio::AudioFormat;
use crate::messages::MAX_OPUS_LEN;
use crate::messages::{
    AudioFrame, ClientTransport, MAX_MARK_LEN, MAX_MARKS, ModelInput, ModelOutput, OPUS_CODEC,
    SessionClaims, SessionContext, SessionId, SessionStats,
};
use ufrag_common::label_enum;

/// The protocol's name and version: the WebSocket subprotocol, and the `hello`'s value.
pub const PROTOCOL: &str = "ufrag-model.v1";
/// The first byte of an audio message.
pub const AUDIO_KIND: u8 = 0x01;
/// The bytes before the audio (an Opus packet, or PCM) in an audio message.
pub const AUDIO_HEADER_LEN: usize = 15;
/// The longest `events` message either side may send.
pub const MAX_EVENT_LEN: usize = 16 * 1024;
/// The longest message the transceiver reads from a backend (a longer one closes the
/// connection).
pub const MAX_MESSAGE_LEN: usize = 32 * 1024;
/// The longest `reason` a backend may give for ending a session.
pub const MAX_REASON_LEN: usize = 64;

/// One WebSocket message, as the connection carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireMessage {
    /// A text message (JSON).
    Text(String),
    /// A binary message (audio).
    Binary(Vec<u8>),
}

/// What a backend sent, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FromBackend {
    /// The answer to the transceiver's hello, naming the backend's protocol.
    Hello {
        /// The protocol it speaks.
        protocol: String,
        /// The audio it chose of those offered (Opus when it names none).
        audio: AudioFormat,
    },
    /// Audio or an event for a session.
    Output(ModelOutput),
    /// End this session.
    EndSession {
        /// The session.
        session: SessionId,
        /// Why, as the backend said it (`[a-z0-9_.-]`, at most [`MAX_REASON_LEN`]).
        reason: String,
    },
}

label_enum! {
    /// Why a backend's message was refused; each is counted by its label.
    pub enum DecodeError {
        /// A text message that is not a JSON object.
        NotJson = "not_json",
        /// A JSON object without a known `type`.
        UnknownType = "unknown_type",
        /// A field is missing or of the wrong kind.
        BadField = "bad_field",
        /// `session` is not 16 hex digits.
        BadSession = "bad_session",
        /// An event longer than [`MAX_EVENT_LEN`].
        EventTooLarge = "event_too_large",
        /// A `reason` that is empty, too long or not `[a-z0-9_.-]`.
        BadReason = "bad_reason",
        /// A binary message shorter than the audio header, or of another kind.
        BadAudio = "bad_audio",
        /// A mark's `name` that is empty, longer than 64 bytes or not `[A-Za-z0-9_.:-]`.
        BadMark = "bad_mark",
        /// An Opus packet longer than [`MAX_OPUS_LEN`] or empty.
        AudioTooLarge = "audio_too_large",
        /// PCM audio (a backend that chose it) that is empty or of an odd number of bytes.
        BadPcm = "bad_pcm",
        /// A hello whose `audio` is not one of the formats offered.
        UnknownAudioFormat = "unknown_audio_format",
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl std::error::Error for DecodeError {}

/// A session id as text: 16 lowercase hex digits.
pub fn session_text(session: SessionId) -> String {
    format!("{session:016x}")
}

fn parse_session(text: &str) -> Result<SessionId, DecodeError> {
    if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(DecodeError::BadSession);
    }
    SessionId::from_str_radix(text, 16).map_err(|_| DecodeError::BadSession)
}

/// The transceiver's hello for worker `worker`, offering every [`AudioFormat`].
pub fn hello(worker: usize) -> WireMessage {
    let offered: Vec<&str> = AudioFormat::OFFERED.iter().map(|f| f.label()).collect();
    WireMessage::Text(
        serde_json::json!({
            "type": "hello",
            "protocol": PROTOCOL,
            "worker": worker,
            "audio": offered,
        })
        .to_string(),
    )
}

/// `session.started` for `session` with its `context` (`resumed`: sent again after a
/// reconnect).
pub fn session_started(session: SessionId, context: &SessionContext, resumed: bool) -> WireMessage {
    let claims = &context.claims;
    WireMessage::Text(
        serde_json::json!({
            "type": "session.started",
            "session": session_text(session),
            "resumed": resumed,
            "subject": claims.subject,
            "route": claims.route,
            "metadata": claims.metadata,
            "codec": context.codec,
            "transport": context.transport.label(),
            "relay": context.relay.map(|r| r.to_string()),
        })
        .to_string(),
    )
}

/// The context a `session.started` carries; an older transceiver's message, without
/// these fields, reads as an anonymous Opus session over UDP.
fn decode_context(
    object: &serde_json::Map<String, serde_json::Value>,
) -> Result<SessionContext, DecodeError> {
    use serde_json::Value;
    let text = |name: &str| match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(DecodeError::BadField),
    };
    let metadata = match object.get("metadata") {
        None | Some(Value::Null) => None,
        Some(value @ Value::Object(_)) => Some(value.clone()),
        Some(_) => return Err(DecodeError::BadField),
    };
    let transport = match text("transport")?.as_deref() {
        None | Some("udp") => ClientTransport::Udp,
        Some("tcp") => ClientTransport::Tcp,
        Some(_) => return Err(DecodeError::BadField),
    };
    let relay = match text("relay")? {
        None => None,
        Some(r) => Some(r.parse().map_err(|_| DecodeError::BadField)?),
    };
    Ok(SessionContext {
        claims: SessionClaims {
            subject: text("subject")?,
            route: text("route")?,
            metadata,
        },
        codec: text("codec")?.unwrap_or_else(|| OPUS_CODEC.to_string()),
        transport,
        relay,
    })
}

/// `session.stats` for `session`.
pub fn session_stats(session: SessionId, stats: &SessionStats) -> WireMessage {
    let micros = |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    WireMessage::Text(
        serde_json::json!({
            "type": "session.stats",
            "session": session_text(session),
            "rtt_us": stats.rtt.map(micros),
            "loss_in": stats.loss_in,
            "loss_out": stats.loss_out,
            "jitter_in_us": micros(stats.jitter_in),
            "packets_in": stats.packets_in,
            "bytes_in": stats.bytes_in,
            "bytes_out": stats.bytes_out,
        })
        .to_string(),
    )
}

/// The figures of a `session.stats`.
fn decode_stats(
    object: &serde_json::Map<String, serde_json::Value>,
) -> Result<SessionStats, DecodeError> {
    use serde_json::Value;
    let count = |name: &str| {
        object
            .get(name)
            .and_then(Value::as_u64)
            .ok_or(DecodeError::BadField)
    };
    // A share: a number from 0 to 1.
    let share = |name: &str| match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_f64() {
            Some(v) if (0.0..=1.0).contains(&v) => Ok(Some(v as f32)),
            _ => Err(DecodeError::BadField),
        },
    };
    let rtt = match object.get("rtt_us") {
        None | Some(Value::Null) => None,
        Some(value) => Some(value.as_u64().ok_or(DecodeError::BadField)?),
    };
    Ok(SessionStats {
        rtt: rtt.map(std::time::Duration::from_micros),
        loss_in: share("loss_in")?,
        loss_out: share("loss_out")?,
        jitter_in: std::time::Duration::from_micros(count("jitter_in_us")?),
        packets_in: count("packets_in")?,
        bytes_in: count("bytes_in")?,
        bytes_out: count("bytes_out")?,
    })
}

/// A PCM audio message: the header of the client's packet `seq`/`timestamp`, then
/// `samples` little-endian.
pub fn pcm_audio(session: SessionId, seq: u16, timestamp: u32, samples: &[i16]) -> WireMessage {
    let mut bytes = Vec::with_capacity(AUDIO_HEADER_LEN + 2 * samples.len());
    bytes.push(AUDIO_KIND);
    bytes.extend_from_slice(&session.to_be_bytes());
    bytes.extend_from_slice(&seq.to_be_bytes());
    bytes.extend_from_slice(&timestamp.to_be_bytes());
    for sample in samples {
        bytes.extend_from_slice(&sample.to_le_bytes());
    }
    WireMessage::Binary(bytes)
}

/// An audio message.
pub fn audio(session: SessionId, frame: &AudioFrame) -> WireMessage {
    let mut bytes = Vec::with_capacity(AUDIO_HEADER_LEN + frame.payload.len());
    bytes.push(AUDIO_KIND);
    bytes.extend_from_slice(&session.to_be_bytes());
    bytes.extend_from_slice(&frame.seq.to_be_bytes());
    bytes.extend_from_slice(&frame.timestamp.to_be_bytes());
    bytes.extend_from_slice(&frame.payload);
    WireMessage::Binary(bytes)
}

/// An `event` message.
pub fn event(session: SessionId, data: &str) -> WireMessage {
    WireMessage::Text(
        serde_json::json!({"type": "event", "session": session_text(session), "data": data})
            .to_string(),
    )
}

/// The message that carries `input` to the backend (`SessionStarted` as not resumed).
pub fn encode(input: &ModelInput) -> WireMessage {
    match input {
        ModelInput::SessionStarted { session, context } => {
            session_started(*session, context, false)
        }
        ModelInput::SessionEnded { session, reason } => WireMessage::Text(
            serde_json::json!({
                "type": "session.ended",
                "session": session_text(*session),
                "reason": reason,
            })
            .to_string(),
        ),
        ModelInput::Audio { session, frame } => audio(*session, frame),
        ModelInput::Event { session, json } => event(*session, json),
        ModelInput::SessionStats { session, stats } => session_stats(*session, stats),
        ModelInput::AudioCleared {
            session,
            frames,
            marks,
        } => WireMessage::Text(
            serde_json::json!({
                "type": "audio.cleared",
                "session": session_text(*session),
                "frames": frames,
                "marks": marks,
            })
            .to_string(),
        ),
        ModelInput::MarkPlayed { session, name } => WireMessage::Text(
            serde_json::json!({
                "type": "audio.mark_played",
                "session": session_text(*session),
                "name": name,
            })
            .to_string(),
        ),
    }
}

/// What the transceiver sent, decoded (the backend's side of the protocol).
#[derive(Clone, Debug, PartialEq)]
pub enum ToBackend {
    /// The transceiver's hello.
    Hello {
        /// The protocol it speaks.
        protocol: String,
        /// Its worker.
        worker: u64,
    },
    /// A session started (`resumed`: announced again after a reconnect).
    Started {
        /// The session.
        session: SessionId,
        /// Whether the session is older than this connection.
        resumed: bool,
        /// Who it is for and how its client connects.
        context: SessionContext,
    },
    /// A session's quality over the last stats interval.
    Stats {
        /// The session.
        session: SessionId,
        /// Its figures.
        stats: SessionStats,
    },
    /// The session's queued audio was dropped, as the backend asked.
    Cleared {
        /// The session.
        session: SessionId,
        /// Frames that were waiting.
        frames: u32,
        /// Marks never to be reached.
        marks: Vec<String>,
    },
    /// Playback reached a mark.
    MarkPlayed {
        /// The session.
        session: SessionId,
        /// The mark's name.
        name: String,
    },
    /// A session ended.
    Ended {
        /// The session.
        session: SessionId,
        /// Why.
        reason: String,
    },
    /// Audio from the user.
    Audio {
        /// The session.
        session: SessionId,
        /// The packet.
        frame: AudioFrame,
    },
    /// An `events` message from the user.
    Event {
        /// The session.
        session: SessionId,
        /// The message.
        data: String,
    },
}

/// A backend's hello, choosing `audio`.
pub fn backend_hello(audio: AudioFormat) -> WireMessage {
    WireMessage::Text(
        serde_json::json!({"type": "hello", "protocol": PROTOCOL, "audio": audio.label()})
            .to_string(),
    )
}

/// The message that carries a backend's `output` to the transceiver.
pub fn encode_output(output: &ModelOutput, end_reason: &str) -> WireMessage {
    match output {
        ModelOutput::Audio { session, frame } => audio(*session, frame),
        ModelOutput::Event { session, json } => event(*session, json),
        ModelOutput::End { session } => WireMessage::Text(
            serde_json::json!({
                "type": "session.end",
                "session": session_text(*session),
                "reason": end_reason,
            })
            .to_string(),
        ),
        ModelOutput::Clear { session } => WireMessage::Text(
            serde_json::json!({"type": "audio.clear", "session": session_text(*session)})
                .to_string(),
        ),
        ModelOutput::Mark { session, name } => WireMessage::Text(
            serde_json::json!({
                "type": "audio.mark",
                "session": session_text(*session),
                "name": name,
            })
            .to_string(),
        ),
    }
}

/// Decodes one message from the transceiver (what a backend that speaks Opus does).
pub fn decode_input(message: &WireMessage) -> Result<ToBackend, DecodeError> {
    decode_input_with(message, AudioFormat::Opus)
}

/// Decodes one message from the transceiver, for a backend whose hello chose `audio`.
pub fn decode_input_with(
    message: &WireMessage,
    audio: AudioFormat,
) -> Result<ToBackend, DecodeError> {
    let text = match message {
        WireMessage::Binary(bytes) => {
            return match decode_audio(bytes, audio)? {
                FromBackend::Output(ModelOutput::Audio { session, frame }) => {
                    Ok(ToBackend::Audio { session, frame })
                }
                _ => Err(DecodeError::BadAudio),
            };
        }
        WireMessage::Text(text) => text,
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|_| DecodeError::NotJson)?;
    let object = value.as_object().ok_or(DecodeError::NotJson)?;
    let field = |name: &str| object.get(name).ok_or(DecodeError::BadField);
    let string = |name: &str| field(name)?.as_str().ok_or(DecodeError::BadField);
    let session = || parse_session(string("session")?);
    match object.get("type").and_then(serde_json::Value::as_str) {
        Some("hello") => Ok(ToBackend::Hello {
            protocol: string("protocol")?.chars().take(64).collect(),
            worker: field("worker")?.as_u64().ok_or(DecodeError::BadField)?,
        }),
        Some("session.started") => Ok(ToBackend::Started {
            session: session()?,
            resumed: field("resumed")?.as_bool().ok_or(DecodeError::BadField)?,
            context: decode_context(object)?,
        }),
        Some("audio.cleared") => {
            let marks = field("marks")?.as_array().ok_or(DecodeError::BadField)?;
            if marks.len() > MAX_MARKS {
                return Err(DecodeError::BadField);
            }
            Ok(ToBackend::Cleared {
                session: session()?,
                frames: field("frames")?
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or(DecodeError::BadField)?,
                marks: marks
                    .iter()
                    .map(|m| m.as_str().map(str::to_string).ok_or(DecodeError::BadField))
                    .collect::<Result<_, _>>()?,
            })
        }
        Some("audio.mark_played") => Ok(ToBackend::MarkPlayed {
            session: session()?,
            name: string("name")?.to_string(),
        }),
        Some("session.stats") => Ok(ToBackend::Stats {
            session: session()?,
            stats: decode_stats(object)?,
        }),
        Some("session.ended") => Ok(ToBackend::Ended {
            session: session()?,
            reason: string("reason")?.chars().take(MAX_REASON_LEN).collect(),
        }),
        Some("event") => {
            let data = string("data")?;
            if data.len() > MAX_EVENT_LEN {
                return Err(DecodeError::EventTooLarge);
            }
            Ok(ToBackend::Event {
                session: session()?,
                data: data.to_string(),
            })
        }
        _ => Err(DecodeError::UnknownType),
    }
}

/// Decodes one message from a backend that speaks Opus.
pub fn decode(message: &WireMessage) -> Result<FromBackend, DecodeError> {
    decode_with(message, AudioFormat::Opus)
}

/// Decodes one message from a backend whose hello chose `audio`.
pub fn decode_with(message: &WireMessage, audio: AudioFormat) -> Result<FromBackend, DecodeError> {
    match message {
        WireMessage::Binary(bytes) => decode_audio(bytes, audio),
        WireMessage::Text(text) => decode_text(text),
    }
}

fn decode_audio(bytes: &[u8], audio: AudioFormat) -> Result<FromBackend, DecodeError> {
    let (header, payload) = bytes
        .split_first_chunk::<AUDIO_HEADER_LEN>()
        .ok_or(DecodeError::BadAudio)?;
    let [kind, s0, s1, s2, s3, s4, s5, s6, s7, q0, q1, t0, t1, t2, t3] = *header;
    if kind != AUDIO_KIND {
        return Err(DecodeError::BadAudio);
    }
    match audio {
        AudioFormat::Opus if payload.is_empty() || payload.len() > MAX_OPUS_LEN => {
            return Err(DecodeError::AudioTooLarge);
        }
        AudioFormat::Pcm16(_) if payload.is_empty() || payload.len() % 2 != 0 => {
            return Err(DecodeError::BadPcm);
        }
        _ => {}
    }
    Ok(FromBackend::Output(ModelOutput::Audio {
        session: SessionId::from_be_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
        frame: AudioFrame {
            seq: u16::from_be_bytes([q0, q1]),
            timestamp: u32::from_be_bytes([t0, t1, t2, t3]),
            payload: payload.to_vec(),
        },
    }))
}

fn decode_text(text: &str) -> Result<FromBackend, DecodeError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|_| DecodeError::NotJson)?;
    let object = value.as_object().ok_or(DecodeError::NotJson)?;
    let field = |name: &str| {
        object
            .get(name)
            .and_then(serde_json::Value::as_str)
            .ok_or(DecodeError::BadField)
    };
    let kind = object
        .get("type")
        .and_then(serde_json::Value::as_str)
        .ok_or(DecodeError::UnknownType)?;
    match kind {
        "hello" => Ok(FromBackend::Hello {
            protocol: field("protocol")?.chars().take(64).collect(),
            audio: match object.get("audio") {
                None | Some(serde_json::Value::Null) => AudioFormat::Opus,
                Some(serde_json::Value::String(label)) => {
                    AudioFormat::parse(label).ok_or(DecodeError::UnknownAudioFormat)?
                }
                Some(_) => return Err(DecodeError::UnknownAudioFormat),
            },
        }),
        "event" => {
            let session = parse_session(field("session")?)?;
            let data = field("data")?;
            if data.len() > MAX_EVENT_LEN {
                return Err(DecodeError::EventTooLarge);
            }
            Ok(FromBackend::Output(ModelOutput::Event {
                session,
                json: data.to_string(),
            }))
        }
        "audio.clear" => Ok(FromBackend::Output(ModelOutput::Clear {
            session: parse_session(field("session")?)?,
        })),
        "audio.mark" => {
            let session = parse_session(field("session")?)?;
            let name = field("name")?;
            let fits = !name.is_empty()
                && name.len() <= MAX_MARK_LEN
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
            if !fits {
                return Err(DecodeError::BadMark);
            }
            Ok(FromBackend::Output(ModelOutput::Mark {
                session,
                name: name.to_string(),
            }))
        }
        "session.end" => {
            let session = parse_session(field("session")?)?;
            let reason = field("reason")?;
            let fits = !reason.is_empty()
                && reason.len() <= MAX_REASON_LEN
                && reason
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
            if !fits {
                return Err(DecodeError::BadReason);
            }
            Ok(FromBackend::EndSession {
                session,
                reason: reason.to_string(),
            })
        }
        _ => Err(DecodeError::UnknownType),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn text(s: &str) -> WireMessage {
        WireMessage::Text(s.to_string())
    }

    #[test]
    fn audio_round_trips_byte_for_byte() {
        let frame = AudioFrame {
            seq: 0xbeef,
            timestamp: 0x0102_0304,
            payload: vec![0xfc, 1, 2, 3],
        };
        let WireMessage::Binary(bytes) = audio(0x00ab_cdef_0123_4567, &frame) else {
            panic!("audio is binary");
        };
        assert_eq!(
            bytes,
            [
                1, 0x00, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0xbe, 0xef, 1, 2, 3, 4, 0xfc, 1,
                2, 3
            ]
        );
        assert_eq!(
            decode(&WireMessage::Binary(bytes)),
            Ok(FromBackend::Output(ModelOutput::Audio {
                session: 0x00ab_cdef_0123_4567,
                frame
            }))
        );
    }

    /// A stats report with every figure.
    fn sample_stats() -> SessionStats {
        SessionStats {
            rtt: Some(std::time::Duration::from_micros(41_250)),
            loss_in: Some(0.0390625),
            loss_out: None,
            jitter_in: std::time::Duration::from_micros(2_500),
            packets_in: 250,
            bytes_in: 20_000,
            bytes_out: 31_000,
        }
    }

    /// A session with every claim, over ICE-TCP through a relay.
    fn claimed_tcp_context() -> SessionContext {
        SessionContext {
            claims: SessionClaims {
                subject: Some("alice".into()),
                route: Some("agent/v2".into()),
                metadata: Some(serde_json::json!({"plan": "pro"})),
            },
            codec: OPUS_CODEC.into(),
            transport: ClientTransport::Tcp,
            relay: Some("10.0.0.7:3479".parse().unwrap()),
        }
    }

    #[test]
    fn a_session_context_of_the_wrong_form_is_refused() {
        for bad in [
            r#""metadata":[1]"#,
            r#""transport":"sctp""#,
            r#""relay":"nowhere""#,
            r#""subject":7"#,
        ] {
            let message = format!(
                r#"{{"type":"session.started","session":"0000000000000005","resumed":false,{bad}}}"#
            );
            assert_eq!(
                decode_input(&text(&message)),
                Err(DecodeError::BadField),
                "{bad}"
            );
        }
    }

    /// The specification, as a backend author reads it.
    const SPECIFICATION: &str = include_str!("../../docs/model-protocol.md");

    fn type_of(message: &WireMessage) -> String {
        match message {
            WireMessage::Text(t) => serde_json::from_str::<serde_json::Value>(t).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string(),
            WireMessage::Binary(_) => panic!("text expected"),
        }
    }

    #[test]
    fn the_specification_and_the_codec_name_the_same_messages_fields_and_refusals() {
        let context = claimed_tcp_context();
        let started = session_started(1, &context, false);
        let written: Vec<WireMessage> = vec![
            hello(0),
            backend_hello(AudioFormat::Opus),
            started.clone(),
            encode(&ModelInput::SessionEnded {
                session: 1,
                reason: "idle",
            }),
            event(1, "{}"),
            encode_output(&ModelOutput::End { session: 1 }, "done"),
            session_stats(1, &sample_stats()),
            encode_output(&ModelOutput::Clear { session: 1 }, ""),
            encode_output(
                &ModelOutput::Mark {
                    session: 1,
                    name: "m".into(),
                },
                "",
            ),
            encode(&ModelInput::AudioCleared {
                session: 1,
                frames: 3,
                marks: vec!["m".into()],
            }),
            encode(&ModelInput::MarkPlayed {
                session: 1,
                name: "m".into(),
            }),
        ];
        let types: std::collections::BTreeSet<String> = written.iter().map(type_of).collect();
        // Every type the codec writes has its row in the document's message table …
        for kind in &types {
            assert!(
                SPECIFICATION.contains(&format!("| `{kind}` |")),
                "`{kind}` is not in docs/model-protocol.md"
            );
        }
        // … and every row of that table is a type the codec writes (and reads).
        let table = SPECIFICATION
            .split("## Messages")
            .nth(1)
            .and_then(|rest| rest.split("###").next())
            .unwrap();
        let directions = [
            "| to the backend |",
            "| from the backend |",
            "| both ways |",
        ];
        let rows = table
            .lines()
            .filter(|l| directions.iter().any(|d| l.starts_with(d)));
        for row in rows {
            let kind = row.split('`').nth(1).unwrap();
            assert!(
                types.contains(kind),
                "the document names `{kind}`; the codec does not"
            );
        }
        // Every field of `session.started` is specified.
        let WireMessage::Text(text) = &started else {
            unreachable!()
        };
        let fields: serde_json::Value = serde_json::from_str(text).unwrap();
        for field in fields.as_object().unwrap().keys().filter(|k| *k != "type") {
            assert!(
                SPECIFICATION.contains(&format!("| `{field}` |")),
                "session.started's `{field}` is not in docs/model-protocol.md"
            );
        }
        // Every field of `session.stats` too.
        let WireMessage::Text(text) = session_stats(1, &sample_stats()) else {
            unreachable!()
        };
        let fields: serde_json::Value = serde_json::from_str(&text).unwrap();
        for field in fields.as_object().unwrap().keys().filter(|k| *k != "type") {
            assert!(
                SPECIFICATION.contains(&format!("| `{field}` |")),
                "session.stats's `{field}` is not in docs/model-protocol.md"
            );
        }
        // Every audio format offered.
        for format in AudioFormat::OFFERED {
            assert!(
                SPECIFICATION.contains(&format!("`{}`", format.label())),
                "{format:?}"
            );
        }
        // Every refusal reason, and the limits (the end reasons: `metrics`' tests).
        for reason in DecodeError::ALL {
            assert!(SPECIFICATION.contains(&format!("| `{}` |", reason.label())));
        }
        assert!(SPECIFICATION.contains(&format!("`{PROTOCOL}`")));
        assert!(SPECIFICATION.contains(&format!("{} KiB", MAX_EVENT_LEN / 1024)));
        assert!(SPECIFICATION.contains(&format!("{} KiB", MAX_MESSAGE_LEN / 1024)));
        assert!(SPECIFICATION.contains("1,275 bytes") && MAX_OPUS_LEN == 1275);
        assert!(SPECIFICATION.contains(&format!("1 to {MAX_REASON_LEN} characters")));
        assert!(SPECIFICATION.contains(&format!("bytes {AUDIO_HEADER_LEN}..")));
        assert!(SPECIFICATION.contains(&format!("1 to {MAX_MARK_LEN} bytes")));
        assert!(SPECIFICATION.contains(&format!("at most {MAX_MARKS} marks")));
    }

    #[test]
    fn inputs_encode_as_the_specification_says() {
        let as_json = |m: WireMessage| match m {
            WireMessage::Text(t) => serde_json::from_str::<serde_json::Value>(&t).unwrap(),
            WireMessage::Binary(_) => panic!("text expected"),
        };
        assert_eq!(
            as_json(encode(&ModelInput::SessionStarted {
                session: 0x2a,
                context: Arc::new(SessionContext::anonymous_udp()),
            })),
            serde_json::json!({
                "type":"session.started","session":"000000000000002a","resumed":false,
                "subject":null,"route":null,"metadata":null,
                "codec":"opus/48000/2","transport":"udp","relay":null,
            })
        );
        assert_eq!(
            as_json(encode(&ModelInput::SessionStarted {
                session: 0x2a,
                context: Arc::new(claimed_tcp_context()),
            })),
            serde_json::json!({
                "type":"session.started","session":"000000000000002a","resumed":false,
                "subject":"alice","route":"agent/v2","metadata":{"plan":"pro"},
                "codec":"opus/48000/2","transport":"tcp","relay":"10.0.0.7:3479",
            })
        );
        assert_eq!(
            as_json(encode(&ModelInput::SessionEnded {
                session: 1,
                reason: "idle"
            })),
            serde_json::json!({"type":"session.ended","session":"0000000000000001","reason":"idle"})
        );
        assert_eq!(
            as_json(encode(&ModelInput::Event {
                session: 1,
                json: r#"{"type":"ping","id":1}"#.into()
            })),
            serde_json::json!({"type":"event","session":"0000000000000001","data":"{\"type\":\"ping\",\"id\":1}"})
        );
        assert_eq!(
            as_json(hello(3)),
            serde_json::json!({
                "type":"hello","protocol":PROTOCOL,"worker":3,
                "audio":["opus","pcm16/16000","pcm16/24000","pcm16/48000"],
            })
        );
    }

    #[test]
    fn backend_messages_decode_and_unknown_fields_are_ignored() {
        assert_eq!(
            decode(&text(
                r#"{"type":"hello","protocol":"ufrag-model.v1","model":"x"}"#
            )),
            Ok(FromBackend::Hello {
                protocol: PROTOCOL.into(),
                audio: AudioFormat::Opus,
            })
        );
        assert_eq!(
            decode(&text(
                r#"{"type":"event","session":"00000000000000FF","data":"hi"}"#
            )),
            Ok(FromBackend::Output(ModelOutput::Event {
                session: 255,
                json: "hi".into()
            }))
        );
        assert_eq!(
            decode(&text(
                r#"{"type":"session.end","session":"0000000000000002","reason":"goodbye"}"#
            )),
            Ok(FromBackend::EndSession {
                session: 2,
                reason: "goodbye".into()
            })
        );
    }

    #[test]
    fn clears_and_marks_decode_and_a_bad_mark_is_refused() {
        assert_eq!(
            decode(&text(
                r#"{"type":"audio.clear","session":"0000000000000003"}"#
            )),
            Ok(FromBackend::Output(ModelOutput::Clear { session: 3 }))
        );
        assert_eq!(
            decode(&text(
                r#"{"type":"audio.mark","session":"0000000000000003","name":"turn-7:end"}"#
            )),
            Ok(FromBackend::Output(ModelOutput::Mark {
                session: 3,
                name: "turn-7:end".into()
            }))
        );
        let long = "m".repeat(MAX_MARK_LEN + 1);
        for name in ["", "has space", "naïve", long.as_str()] {
            let message = serde_json::json!({
                "type": "audio.mark", "session": "0000000000000003", "name": name,
            });
            assert_eq!(
                decode(&text(&message.to_string())),
                Err(DecodeError::BadMark),
                "{name}"
            );
        }
    }

    #[test]
    fn what_the_transceiver_encodes_a_backend_decodes() {
        let frame = AudioFrame {
            seq: 9,
            timestamp: 960,
            payload: vec![0xf8; 80],
        };
        let context = claimed_tcp_context();
        let cases = [
            (
                encode(&ModelInput::SessionStarted {
                    session: 5,
                    context: Arc::new(context.clone()),
                }),
                ToBackend::Started {
                    session: 5,
                    resumed: false,
                    context: context.clone(),
                },
            ),
            (
                session_started(5, &SessionContext::anonymous_udp(), true),
                ToBackend::Started {
                    session: 5,
                    resumed: true,
                    context: SessionContext::anonymous_udp(),
                },
            ),
            (
                encode(&ModelInput::AudioCleared {
                    session: 5,
                    frames: 12,
                    marks: vec!["sentence-2".into(), "sentence-3".into()],
                }),
                ToBackend::Cleared {
                    session: 5,
                    frames: 12,
                    marks: vec!["sentence-2".into(), "sentence-3".into()],
                },
            ),
            (
                encode(&ModelInput::MarkPlayed {
                    session: 5,
                    name: "sentence-1".into(),
                }),
                ToBackend::MarkPlayed {
                    session: 5,
                    name: "sentence-1".into(),
                },
            ),
            (
                session_stats(5, &sample_stats()),
                ToBackend::Stats {
                    session: 5,
                    stats: sample_stats(),
                },
            ),
            (
                // An older transceiver's message: no context fields.
                text(r#"{"type":"session.started","session":"0000000000000005","resumed":false}"#),
                ToBackend::Started {
                    session: 5,
                    resumed: false,
                    context: SessionContext::anonymous_udp(),
                },
            ),
            (
                encode(&ModelInput::SessionEnded {
                    session: 5,
                    reason: "deleted",
                }),
                ToBackend::Ended {
                    session: 5,
                    reason: "deleted".into(),
                },
            ),
            (
                encode(&ModelInput::Audio {
                    session: 5,
                    frame: frame.clone(),
                }),
                ToBackend::Audio { session: 5, frame },
            ),
            (
                encode(&ModelInput::Event {
                    session: 5,
                    json: "{}".into(),
                }),
                ToBackend::Event {
                    session: 5,
                    data: "{}".into(),
                },
            ),
            (
                hello(2),
                ToBackend::Hello {
                    protocol: PROTOCOL.into(),
                    worker: 2,
                },
            ),
        ];
        for (message, expected) in cases {
            assert_eq!(decode_input(&message), Ok(expected));
        }
        let end = encode_output(&ModelOutput::End { session: 5 }, "done");
        assert_eq!(
            decode(&end),
            Ok(FromBackend::EndSession {
                session: 5,
                reason: "done".into()
            })
        );
        assert_eq!(
            decode(&backend_hello(AudioFormat::Opus)),
            Ok(FromBackend::Hello {
                protocol: PROTOCOL.into(),
                audio: AudioFormat::Opus,
            })
        );
    }

    /// A backend chooses its audio in its hello; a format not offered is refused by name.
    #[test]
    fn a_backend_hello_chooses_the_audio_format_and_an_unoffered_one_is_refused() {
        for format in AudioFormat::OFFERED {
            assert_eq!(
                decode(&backend_hello(format)),
                Ok(FromBackend::Hello {
                    protocol: PROTOCOL.into(),
                    audio: format
                })
            );
        }
        for bad in [r#""pcm16/8000""#, r#""mulaw""#, "16000", r#"["opus"]"#] {
            let hello = format!(r#"{{"type":"hello","protocol":"{PROTOCOL}","audio":{bad}}}"#);
            assert_eq!(
                decode(&text(&hello)),
                Err(DecodeError::UnknownAudioFormat),
                "{bad}"
            );
        }
    }

    /// PCM from the transceiver: the client packet's header, then the samples
    /// little-endian; from a PCM backend, any even number of bytes, not only a frame.
    #[test]
    fn pcm_audio_is_the_same_header_then_little_endian_samples() {
        let WireMessage::Binary(bytes) = pcm_audio(2, 0x0102, 0x0a0b_0c0d, &[1, -2, 0x1234]) else {
            panic!("audio is binary");
        };
        assert_eq!(
            bytes,
            [
                1, 0, 0, 0, 0, 0, 0, 0, 2, 1, 2, 0x0a, 0x0b, 0x0c, 0x0d, 1, 0, 0xfe, 0xff, 0x34,
                0x12
            ]
        );
        let pcm = AudioFormat::Pcm16(crate::audio::PcmRate::Khz16);
        let mut long = bytes[..AUDIO_HEADER_LEN].to_vec();
        long.resize(AUDIO_HEADER_LEN + 2 * 4000, 7);
        for ok in [bytes.clone(), long] {
            assert!(
                matches!(
                    decode_with(&WireMessage::Binary(ok.clone()), pcm),
                    Ok(FromBackend::Output(ModelOutput::Audio { session: 2, frame }))
                        if frame.payload == ok[AUDIO_HEADER_LEN..]
                ),
                "{} bytes",
                ok.len()
            );
        }
        for bad in [&bytes[..AUDIO_HEADER_LEN], &bytes[..AUDIO_HEADER_LEN + 3]] {
            assert_eq!(
                decode_with(&WireMessage::Binary(bad.to_vec()), pcm),
                Err(DecodeError::BadPcm),
                "{} bytes",
                bad.len()
            );
        }
    }

    #[test]
    fn each_kind_of_bad_message_is_refused_with_its_own_reason() {
        let long_event = format!(
            r#"{{"type":"event","session":"0000000000000001","data":"{}"}}"#,
            "a".repeat(MAX_EVENT_LEN + 1)
        );
        let cases: [(WireMessage, DecodeError); 12] = [
            (text("not json"), DecodeError::NotJson),
            (text("[1,2]"), DecodeError::NotJson),
            (
                text(r#"{"session":"0000000000000001"}"#),
                DecodeError::UnknownType,
            ),
            (text(r#"{"type":"dance"}"#), DecodeError::UnknownType),
            (
                text(r#"{"type":"event","session":"0000000000000001"}"#),
                DecodeError::BadField,
            ),
            (
                text(r#"{"type":"event","session":1,"data":"x"}"#),
                DecodeError::BadField,
            ),
            (
                text(r#"{"type":"event","session":"xyz","data":"x"}"#),
                DecodeError::BadSession,
            ),
            (text(&long_event), DecodeError::EventTooLarge),
            (
                text(r#"{"type":"session.end","session":"0000000000000001","reason":"No!"}"#),
                DecodeError::BadReason,
            ),
            (
                WireMessage::Binary(vec![1; AUDIO_HEADER_LEN - 1]),
                DecodeError::BadAudio,
            ),
            (
                WireMessage::Binary(vec![2; AUDIO_HEADER_LEN + 1]),
                DecodeError::BadAudio,
            ),
            (
                WireMessage::Binary(vec![1; AUDIO_HEADER_LEN + MAX_OPUS_LEN + 1]),
                DecodeError::AudioTooLarge,
            ),
        ];
        for (message, expected) in cases {
            assert_eq!(decode(&message), Err(expected), "{message:?}");
        }
        assert_eq!(
            decode(&WireMessage::Binary(vec![1; AUDIO_HEADER_LEN])),
            Err(DecodeError::AudioTooLarge),
            "an empty Opus packet"
        );
    }
}
