//! `model-speaks`: the reference backend that answers with a voice of its own.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use ufrag_model_servers::{Options, Voice};

/// The reference speaking model backend: after each second of a user's audio it answers
/// with a phrase of its own (synthesized speech, about four seconds of Opus), then says
/// `{"type":"model.said","frames":N}` on the session's `events` channel. It never plays
/// the user's audio back. Answers `ping` events with `pong`.
///
/// Point a transceiver at it with `--model ws://LISTEN/`. When UFRAG_MODEL_TOKEN is set, a
/// transceiver must send it as its bearer token.
#[derive(Debug, Parser)]
#[command(name = "model-speaks", version = ufrag_version::VERSION)]
struct Cli {
    /// Where to listen for transceivers.
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "IP:PORT")]
    listen: SocketAddr,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let options = Options {
        voice: Voice::Speaks,
        ..Options::echo()
    };
    ufrag_model_servers::serve_until_killed("model-speaks", cli.listen, options)
}
