//! `model-echo`: the reference echo backend, served over the model protocol.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ufrag_model_protocol::audio::AudioFormat;
use ufrag_model_servers::{Options, TlsIdentity};

/// The reference echo model backend: plays each user's audio back, answers `ping` events
/// with `pong`, greets each session with `session.created`.
///
/// Point a transceiver at it with `--model ws://LISTEN/`. When UFRAG_MODEL_TOKEN is set, a
/// transceiver must send it as its bearer token (the transceiver reads the same variable).
#[derive(Debug, Parser)]
#[command(name = "model-echo", version = ufrag_version::VERSION)]
struct Cli {
    /// Where to listen for transceivers.
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "IP:PORT")]
    listen: SocketAddr,
    /// Serve wss:// with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The audio its hello chooses: opus, pcm16/16000, pcm16/24000 or pcm16/48000 (with
    /// PCM it plays back the PCM it gets, and the transceiver encodes it again).
    #[arg(long, default_value = "opus", value_parser = parse_audio)]
    audio: AudioFormat,
}

fn parse_audio(label: &str) -> Result<AudioFormat, String> {
    AudioFormat::parse(label).ok_or_else(|| {
        let offered: Vec<&str> = AudioFormat::OFFERED.map(AudioFormat::label).to_vec();
        format!("one of {}", offered.join(", "))
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let tls = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => match (std::fs::read(cert), std::fs::read(key)) {
            (Ok(cert_pem), Ok(key_pem)) => Some(TlsIdentity { cert_pem, key_pem }),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("model-echo: the TLS files: {e}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let options = Options {
        tls,
        audio: cli.audio,
        ..Options::echo()
    };
    ufrag_model_servers::serve_until_killed("model-echo", cli.listen, options)
}
