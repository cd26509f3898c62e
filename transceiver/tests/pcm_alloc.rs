//! PCM16 conversion allocates nothing per frame beyond the frame's own bytes, asserted
//! with a counting allocator: a client packet decoded to PCM allocates nothing, the PCM
//! message built from it exactly one buffer, and a backend's PCM cut into frames and
//! encoded exactly one Opus payload per frame (what Opus passthrough allocates too).
//! libopus's own state is made when the session starts and lives in C.

use ufrag_model_protocol::audio::PcmRate;
use ufrag_testkit::alloc::{self, CountingAllocator};
use ufrag_transceiver::pcm::{SessionPcm, tone};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Frames converted each way per rate, after a warm-up.
const FRAMES: usize = 200;

#[test]
fn converting_a_frame_allocates_only_the_frame_s_own_bytes() {
    alloc::count_this_thread();
    for rate in [PcmRate::Khz16, PcmRate::Khz24, PcmRate::Khz48] {
        // Setup may allocate: the sessions, one second of a tone, its Opus frames.
        let samples = rate.frame_samples();
        let tone = tone(rate, 440.0, 1.0, 8000.0 / 32767.0);
        let mut speaker = SessionPcm::new(rate).unwrap();
        let mut listener = SessionPcm::new(rate).unwrap();
        let mut packets = Vec::with_capacity(50);
        speaker.encode(&tone, &mut |f| packets.push(f)).unwrap();
        assert_eq!(packets.len(), 50);
        let mut emitted = 0usize;
        let mut count = |_frame: ufrag_model_protocol::messages::AudioFrame| emitted += 1;

        // The backend's PCM in chunks of 7 ms, encoded frame by frame: one payload each.
        let chunk = 2 * samples * 7 / 20;
        let pieces: Vec<&[u8]> = tone.chunks(chunk).collect();
        alloc::arm();
        let mut frames_encoded = 0;
        for piece in pieces.iter().cycle().take(FRAMES * 20 / 7) {
            speaker.encode(piece, &mut count).unwrap();
        }
        frames_encoded += emitted;
        let encoding = alloc::disarm();
        assert!(frames_encoded > 0);
        assert_eq!(
            encoding, frames_encoded as u64,
            "{rate:?}: one allocation per frame encoded (its payload)"
        );

        // The client's packets decoded: none; the message built from each: one.
        alloc::arm();
        for packet in packets.iter().cycle().take(FRAMES) {
            let decoded = listener.decode(&packet.payload).unwrap();
            assert_eq!(decoded.len(), samples);
        }
        let decoding = alloc::disarm();
        assert_eq!(decoding, 0, "{rate:?}: decoding allocates nothing");
        let decoded = listener.decode(&packets[0].payload).unwrap().to_vec();
        alloc::arm();
        for _ in 0..FRAMES {
            std::hint::black_box(ufrag_model_protocol::wire::pcm_audio(7, 1, 960, &decoded));
        }
        let messages = alloc::disarm();
        assert_eq!(messages, FRAMES as u64, "{rate:?}: one buffer per message");
    }
}
