//! The audio a backend and the transceiver exchange: the client's Opus as it came, or
//! 16-bit PCM at a rate the backend's hello chooses.

/// The audio a backend exchanges with the transceiver, chosen in its hello.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AudioFormat {
    /// The client's Opus packets as they came, and Opus packets back (the default).
    #[default]
    Opus,
    /// 16-bit signed little-endian mono PCM at this rate, both ways.
    Pcm16(PcmRate),
}

/// A PCM sample rate a backend may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcmRate {
    /// 16 kHz: wideband speech, what most speech recognisers take.
    Khz16,
    /// 24 kHz: what several speech-to-speech models speak.
    Khz24,
    /// 48 kHz: Opus's own rate.
    Khz48,
}

impl PcmRate {
    /// Samples per second.
    pub fn hz(self) -> u32 {
        match self {
            PcmRate::Khz16 => 16_000,
            PcmRate::Khz24 => 24_000,
            PcmRate::Khz48 => 48_000,
        }
    }

    /// Samples in one 20 ms frame.
    pub fn frame_samples(self) -> usize {
        self.hz() as usize / 50
    }
}

impl AudioFormat {
    /// Every format the transceiver offers in its hello, the default first.
    pub const OFFERED: [AudioFormat; 4] = [
        AudioFormat::Opus,
        AudioFormat::Pcm16(PcmRate::Khz16),
        AudioFormat::Pcm16(PcmRate::Khz24),
        AudioFormat::Pcm16(PcmRate::Khz48),
    ];

    /// Its name in the hello: `opus`, `pcm16/16000`, `pcm16/24000` or `pcm16/48000`.
    pub fn label(self) -> &'static str {
        match self {
            AudioFormat::Opus => "opus",
            AudioFormat::Pcm16(PcmRate::Khz16) => "pcm16/16000",
            AudioFormat::Pcm16(PcmRate::Khz24) => "pcm16/24000",
            AudioFormat::Pcm16(PcmRate::Khz48) => "pcm16/48000",
        }
    }

    /// The format `label` names, if the transceiver offers it.
    pub fn parse(label: &str) -> Option<AudioFormat> {
        Self::OFFERED.into_iter().find(|f| f.label() == label)
    }
}
