//! Fuzz target: any message a model backend (or a transceiver) could send over the model
//! protocol, text or binary, decoded both ways. Nothing panics, and what decodes
//! re-encodes to a message that decodes to the same thing (audio byte for byte).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ufrag_model_protocol::messages::{ModelInput, ModelOutput};
use ufrag_model_protocol::wire::{
    FromBackend, ToBackend, WireMessage, decode, decode_input, decode_with, encode,
    encode_output, session_started, session_stats,
};
use ufrag_model_protocol::audio::{AudioFormat, PcmRate};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let message = if kind & 1 == 0 {
        WireMessage::Binary(body.to_vec())
    } else {
        WireMessage::Text(String::from_utf8_lossy(body).into_owned())
    };
    match decode(&message) {
        Ok(FromBackend::Output(output)) => {
            let again = encode_output(&output, "x");
            if let ModelOutput::Audio { .. } = output {
                assert_eq!(again, message, "audio re-encodes byte for byte");
            }
            assert_eq!(decode(&again), Ok(FromBackend::Output(output)));
        }
        Ok(FromBackend::EndSession { session, reason }) => {
            let again = encode_output(&ModelOutput::End { session }, &reason);
            assert_eq!(decode(&again), Ok(FromBackend::EndSession { session, reason }));
        }
        Ok(FromBackend::Hello { .. }) | Err(_) => {}
    }
    // From a backend that chose PCM: audio of any even length, nothing panics.
    if let Ok(FromBackend::Output(ModelOutput::Audio { frame, .. })) =
        decode_with(&message, AudioFormat::Pcm16(PcmRate::Khz16))
    {
        assert!(!frame.payload.is_empty() && frame.payload.len() % 2 == 0);
    }
    match decode_input(&message) {
        Ok(ToBackend::Started { session, resumed, context }) => {
            let again = session_started(session, &context, resumed);
            assert_eq!(
                decode_input(&again),
                Ok(ToBackend::Started { session, resumed, context })
            );
        }
        Ok(ToBackend::Audio { session, frame }) => {
            let again = encode(&ModelInput::Audio { session, frame });
            assert_eq!(again, message, "audio re-encodes byte for byte");
        }
        Ok(ToBackend::Event { session, data }) => {
            let again = encode(&ModelInput::Event {
                session,
                json: data.clone(),
            });
            assert_eq!(decode_input(&again), Ok(ToBackend::Event { session, data }));
        }
        Ok(ToBackend::Stats { session, stats }) => {
            let again = session_stats(session, &stats);
            assert_eq!(decode_input(&again), Ok(ToBackend::Stats { session, stats }));
        }
        Ok(ToBackend::Cleared { session, frames, marks }) => {
            let again = encode(&ModelInput::AudioCleared {
                session,
                frames,
                marks: marks.clone(),
            });
            assert_eq!(
                decode_input(&again),
                Ok(ToBackend::Cleared { session, frames, marks })
            );
        }
        Ok(ToBackend::MarkPlayed { session, name }) => {
            let again = encode(&ModelInput::MarkPlayed {
                session,
                name: name.clone(),
            });
            assert_eq!(decode_input(&again), Ok(ToBackend::MarkPlayed { session, name }));
        }
        Ok(ToBackend::Hello { .. } | ToBackend::Ended { .. }) | Err(_) => {}
    }
});
