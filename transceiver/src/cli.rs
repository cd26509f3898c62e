//! The `transceiver` command line and its `main`, shared by the `transceiver` binary and the
//! `transceiver-faults` test binary (the same, built with `--features fault-injection`).

use std::process::ExitCode;

use crate::service::{StartError, Transceiver, TransceiverOptions};
use clap::Parser;
use ufrag_common::config::{HINT_KEYS_ENV, load_hint_keys};
use ufrag_common::runtime::lifecycle::{init_logging, serve};

/// Runs the binary: what `main` returns.
pub fn main() -> ExitCode {
    let opts = TransceiverOptions::parse();
    init_logging(opts.log_format);
    let env_keys = std::env::var(HINT_KEYS_ENV).ok();
    let keys = match load_hint_keys(opts.hint_keys_file.as_deref(), env_keys.as_deref()) {
        Ok(keys) => keys,
        Err(e) => {
            eprintln!("transceiver: {e}");
            return ExitCode::from(2);
        }
    };
    serve("transceiver", opts.drain_time, || {
        Transceiver::start(&opts, keys).map_err(|e| {
            eprintln!("transceiver: {e}");
            match e {
                StartError::Config(_) => ExitCode::from(2),
                StartError::System(_) => ExitCode::FAILURE,
            }
        })
    })
}
