//! The `transceiver` command line and its `main`, shared by the `transceiver` binary and the
//! `transceiver-faults` test binary (the same, built with `--features fault-injection`).

use std::process::ExitCode;

use crate::service::{CONFIG_ENV, StartError, Transceiver, TransceiverOptions};
use ufrag_common::config::{
    ALLOW_EXAMPLE_SECRETS_ENV, ConfigError, load_hint_keys, refuse_example_keys,
};
use ufrag_common::runtime::host::Host;
use ufrag_common::runtime::lifecycle::{init_logging, parse_with_config_file, report_fatal, serve};

const NAME: &str = "transceiver";

/// Runs the binary: what `main` returns.
pub fn main() -> ExitCode {
    let (opts, printed) = match parse_with_config_file::<TransceiverOptions>(NAME, CONFIG_ENV, &[])
    {
        Ok(parsed) => (parsed.options, parsed.effective),
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
