//! The `transceiver` command line and its `main`, shared by the `transceiver` binary and the
//! `transceiver-faults` test binary (the same, built with `--features fault-injection`).

use std::ffi::OsString;
use std::process::ExitCode;

use crate::service::{CONFIG_ENV, StartError, Transceiver, TransceiverOptions};
use clap::{CommandFactory as _, FromArgMatches as _};
use ufrag_common::config::{
    ALLOW_EXAMPLE_SECRETS_ENV, ConfigError, load_hint_keys, refuse_example_keys,
};
use ufrag_common::config_file::{config_path, effective_config, file_as_flags};
use ufrag_common::runtime::host::Host;
use ufrag_common::runtime::lifecycle::{init_logging, report_fatal, serve, usage_error};

const NAME: &str = "transceiver";

/// Runs the binary: what `main` returns.
pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let (opts, printed) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    init_logging(opts.log_format);
    if opts.print_config {
        print!("{printed}");
        return ExitCode::SUCCESS;
    }
    let allowed = Host::process().example_secrets_allowed();
    let keys = load_hint_keys(opts.hint_keys_file.as_deref(), &Host::process())
        .and_then(|keys| refuse_example_keys(&keys, allowed).map(|()| keys))
        .and_then(|keys| refuse_placeholder_token(allowed).map(|()| keys));
    let keys = match keys {
        Ok(keys) => keys,
        Err(e) => {
            report_fatal(NAME, &e);
            return ExitCode::from(2);
        }
    };
    serve(NAME, opts.drain_time, || {
        Transceiver::start(&opts, keys).map_err(|e| {
            report_fatal(NAME, &e);
            match e {
                StartError::Config(_) => ExitCode::from(2),
                StartError::System(_) => ExitCode::FAILURE,
            }
        })
    })
}

/// The options from the config file (if one is named) and the command line, and the
/// effective configuration as `--print-config` writes it. Errors are reported here (in
/// JSON when the command line asks for it) and give exit code 2.
fn parse(args: &[OsString]) -> Result<(TransceiverOptions, String), ExitCode> {
    let command = TransceiverOptions::command();
    let mut full: Vec<OsString> = args[..1.min(args.len())].to_vec();
    let path = config_path(args, std::env::var_os(CONFIG_ENV));
    if let Some(path) = &path {
        let flags = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read it: {e}"))
            .and_then(|text| file_as_flags(&command, &text, args));
        match flags {
            Ok(flags) => full.extend(flags),
            Err(reason) => return Err(config_error(args, path, &reason)),
        }
    }
    full.extend(args.iter().skip(1).cloned());
    let matches = match command.clone().try_get_matches_from(&full) {
        Ok(matches) => matches,
        Err(error) => {
            // The file's fault when the command line alone does not fail the same way.
            let own_kind = command
                .clone()
                .try_get_matches_from(args)
                .err()
                .map(|e| e.kind());
            return Err(match &path {
                Some(path) if own_kind != Some(error.kind()) => {
                    let reason = error.to_string();
                    let reason = reason.lines().next().unwrap_or_default();
                    config_error(args, path, reason.trim_start_matches("error: "))
                }
                _ => usage_error(NAME, args, error),
            });
        }
    };
    let opts = TransceiverOptions::from_arg_matches(&matches)
        .map_err(|error| usage_error(NAME, args, error))?;
    let printed = effective_config(&command, &matches);
    Ok((opts, printed))
}

/// Reports a fault in the config file at `path` (exit code 2), in the log format `args`
/// ask for.
fn config_error(args: &[OsString], path: &OsString, reason: &str) -> ExitCode {
    let error = format!(
        "invalid configuration: `config` {}: {reason}",
        std::path::Path::new(path).display()
    );
    let error = clap::Error::raw(clap::error::ErrorKind::ValueValidation, error);
    usage_error(NAME, args, error)
}

/// The placeholder the example manifests once shipped for the bearer token: a token that
/// starts with it (in any case) was never replaced.
const PLACEHOLDER_TOKEN: &str = "REPLACE-ME";
/// The shortest bearer token taken: `openssl rand -hex 32` gives 64 characters.
const MIN_TOKEN_LEN: usize = 32;

/// Refuses a bearer token (UFRAG_TRANSCEIVER_TOKEN) that is still a placeholder or too
/// short to be random, unless `allowed`.
fn refuse_placeholder_token(allowed: bool) -> Result<(), ConfigError> {
    let token = std::env::var("UFRAG_TRANSCEIVER_TOKEN").unwrap_or_default();
    let placeholder = token
        .get(..PLACEHOLDER_TOKEN.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(PLACEHOLDER_TOKEN));
    let reason = if token.is_empty() || allowed {
        return Ok(());
    } else if placeholder {
        format!("the bearer token is the example's placeholder ({PLACEHOLDER_TOKEN}…)")
    } else if token.len() < MIN_TOKEN_LEN {
        format!(
            "the bearer token has {} characters; a token must have at least \
             {MIN_TOKEN_LEN} characters",
            token.len()
        )
    } else {
        return Ok(());
    };
    Err(ConfigError {
        field: "UFRAG_TRANSCEIVER_TOKEN".into(),
        reason: format!(
            "{reason}: make one with `openssl rand -hex 32` ({ALLOW_EXAMPLE_SECRETS_ENV}=1 \
             lets tests use another)"
        ),
    })
}
