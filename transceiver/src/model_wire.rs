//! The model protocol, version 1: how [`ModelInput`]s and [`ModelOutput`]s travel over one
//! WebSocket connection to an external model backend. Encoding and decoding only; the
//! connection is [`crate::model_bridge`]'s.
//!
//! # The connection
//!
//! The transceiver connects (one connection per worker, carrying all of that worker's
//! sessions), asks for the WebSocket subprotocol [`PROTOCOL`], and sends a bearer token
//! (`Authorization: Bearer …`) when it has one. Its first message is
//! `{"type":"hello","protocol":"ufrag-model.v1","worker":N}`; the backend answers
//! `{"type":"hello","protocol":"ufrag-model.v1"}` before anything else. Only then is the
//! worker ready for sessions. A backend that answers another protocol is refused.
//!
//! # Messages
//!
//! Sessions are named by their id as the HTTP API shows it: 16 lowercase hex digits.
//! Text messages are one JSON object each, with a `type`:
//!
//! | direction | `type` | fields |
//! |---|---|---|
//! | to the backend | `session.started` | `session`, `resumed` (true when sent again after a reconnect) |
//! | to the backend | `session.ended` | `session`, `reason` (`deleted`, `ice_disconnected`, `idle`, `model_ended`, …) |
//! | both ways | `event` | `session`, `data`: one text message of the `events` data channel |
//! | from the backend | `session.end` | `session`, `reason`: end this session |
//!
//! Audio travels as binary messages, one Opus packet each, both ways:
//!
//! ```text
//! byte 0      kind: 0x01 (audio)
//! bytes 1..9  session id, big endian
//! bytes 9..11 RTP sequence number, big endian
//! bytes 11..15 RTP timestamp at 48 kHz, big endian
//! bytes 15..  the Opus packet as received (at most 1,275 bytes)
//! ```
//!
//! To the backend the sequence and timestamp are the client's; from the backend they
//! are the backend's own (the transceiver paces nothing: it sends a frame when it
//! arrives). Fields a version-1 peer does not know are ignored; a message it cannot
//! read is refused with a [`DecodeError`], counted by its label, and the connection
//! stays up.

use crate::model::{AudioFrame, ModelInput, ModelOutput, SessionId};
use ufrag_common::label_enum;

/// The protocol's name and version: the WebSocket subprotocol, and the `hello`'s value.
pub const PROTOCOL: &str = "ufrag-model.v1";
/// The first byte of an audio message.
pub const AUDIO_KIND: u8 = 0x01;
/// The bytes before the Opus packet in an audio message.
pub const AUDIO_HEADER_LEN: usize = 15;
/// The largest Opus packet (RFC 6716 §3.4).
pub const MAX_OPUS_LEN: usize = 1275;
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
        /// An Opus packet longer than [`MAX_OPUS_LEN`] or empty.
        AudioTooLarge = "audio_too_large",
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

/// The transceiver's hello for worker `worker`.
pub fn hello(worker: usize) -> WireMessage {
    WireMessage::Text(
        serde_json::json!({"type": "hello", "protocol": PROTOCOL, "worker": worker}).to_string(),
    )
}

/// `session.started` for `session` (`resumed`: sent again after a reconnect).
pub fn session_started(session: SessionId, resumed: bool) -> WireMessage {
    WireMessage::Text(
        serde_json::json!({
            "type": "session.started",
            "session": session_text(session),
            "resumed": resumed,
        })
        .to_string(),
    )
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
        ModelInput::SessionStarted { session } => session_started(*session, false),
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
    }
}

/// What the transceiver sent, decoded (the backend's side of the protocol).
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// A backend's hello.
pub fn backend_hello() -> WireMessage {
    WireMessage::Text(serde_json::json!({"type": "hello", "protocol": PROTOCOL}).to_string())
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
    }
}

/// Decodes one message from the transceiver (what a backend does).
pub fn decode_input(message: &WireMessage) -> Result<ToBackend, DecodeError> {
    let text = match message {
        WireMessage::Binary(bytes) => {
            return match decode_audio(bytes)? {
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

/// Decodes one message from a backend.
pub fn decode(message: &WireMessage) -> Result<FromBackend, DecodeError> {
    match message {
        WireMessage::Binary(bytes) => decode_audio(bytes),
        WireMessage::Text(text) => decode_text(text),
    }
}

fn decode_audio(bytes: &[u8]) -> Result<FromBackend, DecodeError> {
    let (header, payload) = bytes
        .split_first_chunk::<AUDIO_HEADER_LEN>()
        .ok_or(DecodeError::BadAudio)?;
    let [kind, s0, s1, s2, s3, s4, s5, s6, s7, q0, q1, t0, t1, t2, t3] = *header;
    if kind != AUDIO_KIND {
        return Err(DecodeError::BadAudio);
    }
    if payload.is_empty() || payload.len() > MAX_OPUS_LEN {
        return Err(DecodeError::AudioTooLarge);
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

    #[test]
    fn inputs_encode_as_the_module_doc_says() {
        let as_json = |m: WireMessage| match m {
            WireMessage::Text(t) => serde_json::from_str::<serde_json::Value>(&t).unwrap(),
            WireMessage::Binary(_) => panic!("text expected"),
        };
        assert_eq!(
            as_json(encode(&ModelInput::SessionStarted { session: 0x2a })),
            serde_json::json!({"type":"session.started","session":"000000000000002a","resumed":false})
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
            serde_json::json!({"type":"hello","protocol":PROTOCOL,"worker":3})
        );
    }

    #[test]
    fn backend_messages_decode_and_unknown_fields_are_ignored() {
        assert_eq!(
            decode(&text(
                r#"{"type":"hello","protocol":"ufrag-model.v1","model":"x"}"#
            )),
            Ok(FromBackend::Hello {
                protocol: PROTOCOL.into()
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
    fn what_the_transceiver_encodes_a_backend_decodes() {
        let frame = AudioFrame {
            seq: 9,
            timestamp: 960,
            payload: vec![0xf8; 80],
        };
        let cases = [
            (
                encode(&ModelInput::SessionStarted { session: 5 }),
                ToBackend::Started {
                    session: 5,
                    resumed: false,
                },
            ),
            (
                session_started(5, true),
                ToBackend::Started {
                    session: 5,
                    resumed: true,
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
            decode(&backend_hello()),
            Ok(FromBackend::Hello {
                protocol: PROTOCOL.into()
            })
        );
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
