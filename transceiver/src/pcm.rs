//! PCM16 audio for a backend that asks for it in its hello: each session's Opus from the
//! client decoded to 16-bit mono PCM at the backend's rate, and the backend's PCM, in
//! chunks of any length, cut into 20 ms frames and encoded to Opus for the client.
//!
//! libopus decodes to and encodes from 16, 24 and 48 kHz itself (its decoder resamples
//! internally, its encoder takes any of those rates), so no separate resampler stands
//! between the client's 48 kHz Opus and the backend's rate. Each session's decoder,
//! encoder and buffers are made once, when the session starts; converting a frame
//! allocates nothing but the frame's own bytes (the message, or the Opus payload), which
//! Opus passthrough allocates too (a test counts).

use std::collections::HashMap;

use ufrag_model_protocol::audio::{AudioFormat, PcmRate};
use ufrag_model_protocol::messages::{AudioFrame, MAX_OPUS_LEN, SessionId};

/// The longest audio one Opus packet carries (120 ms, RFC 6716 §3.2.1), in samples at
/// 48 kHz: what one client packet can decode to.
const MAX_PACKET_SAMPLES_48K: usize = 5_760;
/// The RTP clock's ticks in one 20 ms frame (Opus's RTP clock is 48 kHz).
const FRAME_TICKS: u32 = 960;
/// The bit rate of the Opus the transceiver encodes from a backend's PCM: fullband voice
/// (what browsers send for speech).
pub const ENCODE_BITRATE: i32 = 32_000;

/// Why a frame could not be converted; each is counted.
#[derive(Debug)]
pub enum CodecError {
    /// An empty Opus packet (libopus would read it as "conceal a lost one").
    EmptyPacket,
    /// libopus refused it.
    Libopus(opus::Error),
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodecError::EmptyPacket => f.write_str("an empty Opus packet"),
            CodecError::Libopus(e) => write!(f, "libopus: {e}"),
        }
    }
}

impl std::error::Error for CodecError {}

impl From<opus::Error> for CodecError {
    fn from(e: opus::Error) -> Self {
        CodecError::Libopus(e)
    }
}

/// One session's conversion, both ways.
pub struct SessionPcm {
    rate: PcmRate,
    decoder: opus::Decoder,
    encoder: opus::Encoder,
    /// What the last client packet decoded to (room for the longest packet).
    decoded: Box<[i16]>,
    /// The backend's samples not yet a whole frame: the first `pending_len`.
    pending: Box<[i16]>,
    pending_len: usize,
    /// The last frame encoded.
    encoded: Box<[u8]>,
    /// The encoder's lookahead, in samples: how long it holds audio before a packet
    /// carries it.
    lookahead: usize,
    /// The encoder still holds some of the backend's audio (the last frame encoded ended
    /// less than a lookahead of silence after it).
    speech_held: bool,
    /// The sequence number and RTP timestamp of the next frame encoded.
    seq: u16,
    timestamp: u32,
}

impl std::fmt::Debug for SessionPcm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionPcm")
            .field("pending_len", &self.pending_len)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl SessionPcm {
    /// A session's decoder and encoder at `rate`.
    pub fn new(rate: PcmRate) -> Result<SessionPcm, CodecError> {
        let decoder = opus::Decoder::new(rate.hz(), opus::Channels::Mono)?;
        let mut encoder =
            opus::Encoder::new(rate.hz(), opus::Channels::Mono, opus::Application::Voip)?;
        encoder.set_bitrate(opus::Bitrate::Bits(ENCODE_BITRATE))?;
        let longest = MAX_PACKET_SAMPLES_48K * rate.hz() as usize / 48_000;
        let lookahead = usize::try_from(encoder.get_lookahead()?).unwrap_or(0);
        Ok(SessionPcm {
            rate,
            decoder,
            encoder,
            decoded: vec![0; longest].into_boxed_slice(),
            pending: vec![0; rate.frame_samples()].into_boxed_slice(),
            pending_len: 0,
            encoded: vec![0; MAX_OPUS_LEN].into_boxed_slice(),
            lookahead,
            speech_held: false,
            seq: 0,
            timestamp: 0,
        })
    }

    /// The client's Opus packet as PCM samples (mono, at the session's rate).
    pub fn decode(&mut self, opus: &[u8]) -> Result<&[i16], CodecError> {
        if opus.is_empty() {
            return Err(CodecError::EmptyPacket);
        }
        let samples = self.decoder.decode(opus, &mut self.decoded, false)?;
        Ok(&self.decoded[..samples])
    }

    /// Takes the backend's samples (little-endian bytes, an even number): each whole
    /// 20 ms frame is encoded and given to `emit`; the rest waits for the next chunk.
    pub fn encode(
        &mut self,
        pcm_le: &[u8],
        emit: &mut impl FnMut(AudioFrame),
    ) -> Result<(), CodecError> {
        for sample in pcm_le.chunks_exact(2) {
            self.pending[self.pending_len] = i16::from_le_bytes([sample[0], sample[1]]);
            self.pending_len += 1;
            if self.pending_len == self.pending.len() {
                self.encode_pending(emit)?;
                self.speech_held = true;
            }
        }
        Ok(())
    }

    /// Sends every sample the backend sent so far, so that a mark set now falls after
    /// them: what waits, padded with silence to a whole frame, and, while the encoder
    /// still holds some of the backend's audio (its lookahead), one frame of silence
    /// more to push it out.
    pub fn flush(&mut self, emit: &mut impl FnMut(AudioFrame)) -> Result<(), CodecError> {
        if self.pending_len > 0 {
            let padding = self.pending.len() - self.pending_len;
            self.pending[self.pending_len..].fill(0);
            self.encode_pending(emit)?;
            self.speech_held = padding < self.lookahead;
        }
        if self.speech_held {
            self.pending.fill(0);
            self.encode_pending(emit)?;
            self.speech_held = false;
        }
        Ok(())
    }

    /// How long the encoder holds audio before a packet carries it (libopus's lookahead),
    /// in milliseconds.
    pub fn lookahead_ms(&self) -> f64 {
        self.lookahead as f64 * 1000.0 / f64::from(self.rate.hz())
    }

    /// Drops what waits, in this buffer and in the encoder's lookahead (the backend
    /// cleared its audio: none of it may play after the next speech begins).
    pub fn clear(&mut self) -> Result<(), CodecError> {
        self.pending_len = 0;
        self.speech_held = false;
        self.encoder.reset_state()?;
        Ok(())
    }

    fn encode_pending(&mut self, emit: &mut impl FnMut(AudioFrame)) -> Result<(), CodecError> {
        self.pending_len = 0;
        let bytes = self.encoder.encode(&self.pending, &mut self.encoded)?;
        emit(AudioFrame {
            seq: self.seq,
            timestamp: self.timestamp,
            payload: self.encoded[..bytes].to_vec(),
        });
        self.seq = self.seq.wrapping_add(1);
        self.timestamp = self.timestamp.wrapping_add(FRAME_TICKS);
        Ok(())
    }
}

/// The conversions of one backend connection's sessions: made when a session is
/// announced to the backend, dropped when its end is, so a backend cannot make one for a
/// session it was not told of.
#[derive(Debug)]
pub struct PcmSessions {
    rate: PcmRate,
    sessions: HashMap<SessionId, SessionPcm>,
}

impl PcmSessions {
    /// The conversions for a connection that chose `format`; `None` for Opus.
    pub fn for_format(format: AudioFormat) -> Option<PcmSessions> {
        match format {
            AudioFormat::Opus => None,
            AudioFormat::Pcm16(rate) => Some(PcmSessions {
                rate,
                sessions: HashMap::new(),
            }),
        }
    }

    /// The format it converts to.
    pub fn format(&self) -> AudioFormat {
        AudioFormat::Pcm16(self.rate)
    }

    /// A session was announced: its conversion is made (kept if it exists).
    pub fn start(&mut self, session: SessionId) -> Result<(), CodecError> {
        if !self.sessions.contains_key(&session) {
            self.sessions.insert(session, SessionPcm::new(self.rate)?);
        }
        Ok(())
    }

    /// A session's end was sent: its conversion goes.
    pub fn end(&mut self, session: SessionId) {
        self.sessions.remove(&session);
    }

    /// Keeps the conversions of the sessions `live` holds, and drops the rest (sessions
    /// that ended while no connection was up).
    pub fn retain(&mut self, live: impl Fn(SessionId) -> bool) {
        self.sessions.retain(|session, _| live(*session));
    }

    /// A live session's conversion.
    pub fn get(&mut self, session: SessionId) -> Option<&mut SessionPcm> {
        self.sessions.get_mut(&session)
    }

    /// Sessions with a conversion.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// No session has a conversion.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

/// `seconds` of a sine at `hz` and `level` of full scale (0 to 1), at `rate`, as
/// little-endian samples: the signal the tests and `ufrag-perf model` encode.
pub fn tone(rate: PcmRate, hz: f64, seconds: f64, level: f64) -> Vec<u8> {
    let n = (f64::from(rate.hz()) * seconds) as usize;
    (0..n)
        .flat_map(|i| {
            let t = i as f64 / f64::from(rate.hz());
            let v = level * f64::from(i16::MAX) * (2.0 * std::f64::consts::PI * hz * t).sin();
            (v as i16).to_le_bytes()
        })
        .collect()
}

/// The frequency of a pure tone in `samples` at `rate_hz`: its sign changes per second,
/// halved.
pub fn tone_hz(samples: &[i16], rate_hz: u32) -> f64 {
    let changes = samples
        .windows(2)
        .filter(|w| (w[0] < 0) != (w[1] < 0))
        .count();
    changes as f64 * f64::from(rate_hz) / samples.len().max(1) as f64 / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rms(samples: &[i16]) -> f64 {
        let sum: f64 = samples.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
        (sum / samples.len().max(1) as f64).sqrt()
    }

    #[test]
    fn formats_are_named_as_the_hello_names_them_and_nothing_else_parses() {
        for format in AudioFormat::OFFERED {
            assert_eq!(AudioFormat::parse(format.label()), Some(format));
        }
        for bad in [
            "",
            "pcm16",
            "pcm16/8000",
            "PCM16/16000",
            "opus/48000/2",
            "pcm16/16000 ",
        ] {
            assert_eq!(AudioFormat::parse(bad), None, "{bad:?}");
        }
        assert_eq!(PcmRate::Khz16.frame_samples(), 320);
        assert_eq!(PcmRate::Khz24.frame_samples(), 480);
        assert_eq!(PcmRate::Khz48.frame_samples(), 960);
    }

    /// A backend's second of tone, sent in 7 ms chunks (not a frame's length), comes out
    /// as 50 frames of 20 ms, numbered in order on the 48 kHz RTP clock; decoded again at
    /// the same rate it is the same tone at about the same level.
    #[test]
    fn pcm_in_chunks_of_any_length_becomes_whole_frames_that_decode_to_the_same_tone() {
        for rate in [PcmRate::Khz16, PcmRate::Khz24, PcmRate::Khz48] {
            let sent = tone(rate, 440.0, 1.0, 0.3);
            let mut speaker = SessionPcm::new(rate).unwrap();
            let mut frames = Vec::new();
            let chunk = 2 * rate.frame_samples() * 7 / 20;
            for piece in sent.chunks(chunk) {
                speaker.encode(piece, &mut |f| frames.push(f)).unwrap();
            }
            assert_eq!(frames.len(), 50, "{rate:?}");
            for (i, frame) in frames.iter().enumerate() {
                assert_eq!(frame.seq, i as u16);
                assert_eq!(frame.timestamp, i as u32 * FRAME_TICKS);
                assert!(frame.payload.len() <= MAX_OPUS_LEN);
            }
            let mut listener = SessionPcm::new(rate).unwrap();
            let mut heard = Vec::new();
            for frame in &frames {
                let samples = listener.decode(&frame.payload).unwrap();
                assert_eq!(samples.len(), rate.frame_samples(), "{rate:?}");
                heard.extend_from_slice(samples);
            }
            // The codec's lookahead delays the start: judge the last half second.
            let tail = &heard[heard.len() / 2..];
            let sent_samples: Vec<i16> = sent
                .chunks_exact(2)
                .map(|b| i16::from_le_bytes([b[0], b[1]]))
                .collect();
            let level = rms(tail) / rms(&sent_samples);
            assert!((0.8..1.2).contains(&level), "{rate:?}: level {level}");
            let hz = tone_hz(tail, rate.hz());
            assert!((430.0..450.0).contains(&hz), "{rate:?}: {hz} Hz");
        }
    }

    #[test]
    fn a_flush_pads_the_rest_to_a_frame_and_a_clear_drops_it() {
        let rate = PcmRate::Khz16;
        let mut speaker = SessionPcm::new(rate).unwrap();
        let mut frames = Vec::new();
        let half = tone(rate, 300.0, 0.01, 0.3);
        speaker.encode(&half, &mut |f| frames.push(f)).unwrap();
        assert!(frames.is_empty(), "half a frame waits");
        speaker.flush(&mut |f| frames.push(f)).unwrap();
        assert_eq!(frames.len(), 1, "a flush sends it, padded");
        speaker.flush(&mut |f| frames.push(f)).unwrap();
        assert_eq!(frames.len(), 1, "nothing waits: nothing more");
        speaker.encode(&half, &mut |f| frames.push(f)).unwrap();
        speaker.clear().unwrap();
        speaker.encode(&half, &mut |f| frames.push(f)).unwrap();
        assert_eq!(frames.len(), 1, "the cleared half is gone: one half waits");
        speaker.encode(&half, &mut |f| frames.push(f)).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].seq, 1, "numbering goes on across a clear");
    }

    /// Speech that ends on a frame's edge is still in the encoder's lookahead: a flush
    /// sends one frame of silence more, which carries the speech's last milliseconds;
    /// once they are out, another flush sends nothing.
    #[test]
    fn a_flush_pushes_the_speech_the_encoder_holds_out() {
        let rate = PcmRate::Khz48;
        let mut speaker = SessionPcm::new(rate).unwrap();
        assert!(
            (2.0..20.0).contains(&speaker.lookahead_ms()),
            "{}",
            speaker.lookahead_ms()
        );
        let mut frames = Vec::new();
        speaker
            .encode(&tone(rate, 440.0, 0.1, 0.3), &mut |f| frames.push(f))
            .unwrap();
        assert_eq!(frames.len(), 5);
        speaker.flush(&mut |f| frames.push(f)).unwrap();
        assert_eq!(
            frames.len(),
            6,
            "one frame of silence carries the lookahead out"
        );
        speaker.flush(&mut |f| frames.push(f)).unwrap();
        assert_eq!(frames.len(), 6, "nothing held: nothing more");
        let mut listener = SessionPcm::new(rate).unwrap();
        let mut last = Vec::new();
        for frame in &frames {
            last = listener.decode(&frame.payload).unwrap().to_vec();
        }
        let held = (speaker.lookahead_ms() * 48.0) as usize;
        assert!(
            rms(&last[..held]) > 1000.0,
            "the extra frame begins with the tone's end: {}",
            rms(&last[..held])
        );
    }

    #[test]
    fn a_packet_libopus_cannot_read_is_an_error_not_a_panic() {
        let mut listener = SessionPcm::new(PcmRate::Khz48).unwrap();
        assert!(listener.decode(&[]).is_err(), "empty");
        // TOC code 3 (an arbitrary number of frames) with a frame count of zero.
        assert!(listener.decode(&[0x03, 0x00]).is_err(), "no frames");
        // Still decodes what follows.
        let mut speaker = SessionPcm::new(PcmRate::Khz48).unwrap();
        let mut frames = Vec::new();
        speaker
            .encode(&tone(PcmRate::Khz48, 440.0, 0.02, 0.3), &mut |f| {
                frames.push(f)
            })
            .unwrap();
        assert_eq!(listener.decode(&frames[0].payload).unwrap().len(), 960);
    }

    #[test]
    fn a_connection_converts_only_for_sessions_it_announced() {
        assert!(PcmSessions::for_format(AudioFormat::Opus).is_none());
        let mut sessions =
            PcmSessions::for_format(AudioFormat::Pcm16(PcmRate::Khz24)).expect("PCM");
        assert_eq!(sessions.format(), AudioFormat::Pcm16(PcmRate::Khz24));
        assert!(sessions.get(7).is_none(), "not announced");
        sessions.start(7).unwrap();
        sessions.start(7).unwrap();
        assert_eq!(sessions.len(), 1);
        assert!(sessions.get(7).is_some());
        sessions.end(7);
        assert!(sessions.is_empty());
    }
}
