//! The seam between WebRTC sessions and the model backend, and the built-in echo model.
//!
//! # The internal protocol
//!
//! The transceiver turns each WebRTC session into a stream of [`ModelInput`] messages
//! and accepts [`ModelOutput`] messages back; nothing about ICE, DTLS, SRTP or SDP
//! crosses the seam:
//!
//! - `SessionStarted { session, context }` when DTLS is up (the context: who the
//!   session is for, from its token, the codec, and how the client connects), and
//!   `SessionEnded { session, reason }` when the session is gone (DELETE, ICE/DTLS
//!   failure, idle timeout).
//! - `Audio { session, frame }`: one Opus packet as received, with its RTP sequence
//!   number and 48 kHz timestamp ([`AudioFrame`]). The model answers with `Audio` frames
//!   of its own (timestamps are the model's; the session paces them at 20 ms).
//! - `SessionStats { session, stats }` every stats interval: round trip, loss both ways,
//!   jitter and bytes, from RTCP ([`SessionStats`](ufrag_model_protocol::messages::SessionStats)).
//! - `Event { session, json }`: one text message of the data channel named `events`, as
//!   JSON text; answers likewise go out on that channel.
//! - `End { session }` (from the model only): end this session.
//! - `Clear { session }` and `Mark { session, name }` (from the model): drop the audio not
//!   yet played, or be told (`MarkPlayed`) when playback reaches this point. The session
//!   plays the model's audio at real time from a bounded buffer ([`crate::playout`]), so
//!   a model may send speech faster than real time; `AudioCleared` answers a clear.
//!
//! [`ModelBackend`] is the trait a backend implements: the echo model below (the
//! default), and [`crate::model_bridge::WsBridge`], which carries the same messages over
//! a WebSocket to a backend anywhere on the network ([`ufrag_model_protocol::wire`] is that
//! protocol, written down).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ufrag_model_protocol::messages::{AudioFrame, ModelInput, ModelOutput, SessionId, ping_id};

/// What a worker gives its model backend when it starts: a way to wake the worker (a
/// backend with its own thread calls it when it has output for `poll`), and the flag
/// that says whether the backend can take sessions (signaling sends a worker none while
/// it is false, and readiness is off).
#[derive(Clone)]
pub struct ModelLink {
    /// Wakes the worker's poll.
    pub wake: Arc<dyn Fn() + Send + Sync>,
    /// Whether the backend can take sessions now.
    pub ready: Arc<AtomicBool>,
}

impl std::fmt::Debug for ModelLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelLink")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A model backend: takes inputs, produces outputs, possibly later (`poll`).
pub trait ModelBackend: Send {
    /// Called once by the worker before its loop starts. The default: a backend in the
    /// worker's own thread, ready at once.
    fn attach(&mut self, link: ModelLink) {
        link.ready.store(true, Ordering::Relaxed);
    }
    /// Handles one input; immediate outputs go to `out`.
    fn handle(&mut self, now: Instant, input: ModelInput, out: &mut Vec<ModelOutput>);
    /// Outputs that have become due by `now`.
    fn poll(&mut self, now: Instant, out: &mut Vec<ModelOutput>);
    /// When `poll` next has something to say, if ever.
    fn next_due(&self) -> Option<Instant>;
    /// Called at the end of each pass of the worker's loop, after the pass's last
    /// `handle`. A backend that hands inputs to another thread hands them over here:
    /// one wake-up per pass, not one per input. The default does nothing.
    fn flush(&mut self) {}
}

/// The echo model: plays the user's audio back (after `delay`), answers
/// `{"type":"ping","id":N}` with `{"type":"pong","id":N}` and announces
/// `{"type":"session.created"}` when a session starts.
#[derive(Debug, Default)]
pub struct EchoModel {
    delay: Duration,
    pending: VecDeque<(Instant, SessionId, AudioFrame)>,
}

impl EchoModel {
    /// An echo model with the given audio delay.
    pub fn new(delay: Duration) -> Self {
        EchoModel {
            delay,
            pending: VecDeque::new(),
        }
    }
}

impl ModelBackend for EchoModel {
    fn handle(&mut self, now: Instant, input: ModelInput, out: &mut Vec<ModelOutput>) {
        match input {
            ModelInput::SessionStarted { session, .. } => out.push(ModelOutput::Event {
                session,
                json: r#"{"type":"session.created"}"#.to_string(),
            }),
            ModelInput::Audio { session, frame } => {
                if self.delay.is_zero() {
                    out.push(ModelOutput::Audio { session, frame });
                } else {
                    self.pending.push_back((now + self.delay, session, frame));
                }
            }
            ModelInput::Event { session, json } => {
                if let Some(id) = ping_id(&json) {
                    out.push(ModelOutput::Event {
                        session,
                        json: format!(r#"{{"type":"pong","id":{id}}}"#),
                    });
                }
            }
            ModelInput::SessionEnded { session, .. } => {
                self.pending.retain(|(_, s, _)| *s != session);
            }
            ModelInput::SessionStats { .. }
            | ModelInput::AudioCleared { .. }
            | ModelInput::MarkPlayed { .. } => {}
        }
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<ModelOutput>) {
        while let Some((due, _, _)) = self.pending.front() {
            if *due > now {
                break;
            }
            let (_, session, frame) = self.pending.pop_front().expect("front exists");
            out.push(ModelOutput::Audio { session, frame });
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.pending.front().map(|(due, _, _)| *due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ufrag_model_protocol::messages::SessionContext;

    fn frame(seq: u16) -> AudioFrame {
        AudioFrame {
            seq,
            timestamp: u32::from(seq) * 960,
            payload: vec![1, 2, 3],
        }
    }

    #[test]
    fn echoes_audio_at_once_or_after_the_delay() {
        let t0 = Instant::now();
        let mut out = vec![];
        let mut now_model = EchoModel::new(Duration::ZERO);
        now_model.handle(
            t0,
            ModelInput::Audio {
                session: 1,
                frame: frame(1),
            },
            &mut out,
        );
        assert_eq!(
            out,
            vec![ModelOutput::Audio {
                session: 1,
                frame: frame(1)
            }]
        );

        let mut delayed = EchoModel::new(Duration::from_millis(100));
        out.clear();
        delayed.handle(
            t0,
            ModelInput::Audio {
                session: 1,
                frame: frame(2),
            },
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!(delayed.next_due(), Some(t0 + Duration::from_millis(100)));
        delayed.poll(t0 + Duration::from_millis(99), &mut out);
        assert!(out.is_empty());
        delayed.poll(t0 + Duration::from_millis(100), &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn pings_get_pongs_and_sessions_get_announced() {
        let t0 = Instant::now();
        let mut m = EchoModel::default();
        let mut out = vec![];
        m.handle(
            t0,
            ModelInput::SessionStarted {
                session: 7,
                context: Arc::new(SessionContext::anonymous_udp()),
            },
            &mut out,
        );
        m.handle(
            t0,
            ModelInput::Event {
                session: 7,
                json: r#"{"type":"ping","id":42}"#.into(),
            },
            &mut out,
        );
        m.handle(
            t0,
            ModelInput::Event {
                session: 7,
                json: r#"{"type":"hello"}"#.into(),
            },
            &mut out,
        );
        m.handle(
            t0,
            ModelInput::Event {
                session: 7,
                json: "not json".into(),
            },
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                ModelOutput::Event {
                    session: 7,
                    json: r#"{"type":"session.created"}"#.into()
                },
                ModelOutput::Event {
                    session: 7,
                    json: r#"{"type":"pong","id":42}"#.into()
                },
            ]
        );
    }

    #[test]
    fn an_ended_session_drops_its_pending_echo() {
        let t0 = Instant::now();
        let mut m = EchoModel::new(Duration::from_millis(10));
        let mut out = vec![];
        m.handle(
            t0,
            ModelInput::Audio {
                session: 1,
                frame: frame(1),
            },
            &mut out,
        );
        m.handle(
            t0,
            ModelInput::SessionEnded {
                session: 1,
                reason: "deleted",
            },
            &mut out,
        );
        m.poll(t0 + Duration::from_secs(1), &mut out);
        assert!(out.is_empty());
    }
}
