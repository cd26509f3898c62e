//! `ufrag-token`: mints a session token as the app's server would, for a page to present on
//! `POST /v1/sessions` (and for trying a deployment by hand). Prints the token alone on
//! stdout; a key that cannot sign, or a claim over its limit, is one line on stderr and
//! exit code 2.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;
use ufrag_model_protocol::messages::SessionClaims;
use ufrag_transceiver::session_token::{self, TokenAlgorithm, TokenRequest};

/// Mint a short-lived session token for one user of the transceiver's signaling.
///
/// HS256: the key file holds the shared secret the transceivers verify with
/// (`--session-token-key-file`). ES256 and EdDSA: it holds the private key (PKCS#8 PEM,
/// e.g. `openssl genpkey -algorithm ed25519 -out private.pem`); the transceivers hold the
/// public key (`openssl pkey -in private.pem -pubout -out public.pem`).
#[derive(Debug, clap::Parser)]
#[command(name = "ufrag-token", version = ufrag_version::VERSION, verbatim_doc_comment)]
struct Options {
    /// The signing key: the HS256 secret, or the private key in PKCS#8 PEM.
    #[arg(long, value_name = "FILE")]
    key_file: PathBuf,
    /// The algorithm.
    #[arg(long, value_enum, default_value_t = TokenAlgorithm::Hs256)]
    algorithm: TokenAlgorithm,
    /// The audience (`aud`): the transceivers' `--session-token-audience`.
    #[arg(long, default_value = "ufrag-relay", value_name = "TEXT")]
    audience: String,
    /// Who the session is for (`sub`).
    #[arg(long, value_name = "TEXT")]
    subject: Option<String>,
    /// The model or agent route (`route`).
    #[arg(long, value_name = "TEXT")]
    route: Option<String>,
    /// The app's metadata (`metadata`), a JSON object.
    #[arg(long, value_name = "JSON")]
    metadata: Option<String>,
    /// How long the token lives (the transceivers refuse more than their
    /// `--session-token-max-lifetime`, 10 minutes by default).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    lifetime: Duration,
}

fn main() -> ExitCode {
    let options = Options::parse();
    match token(&options) {
        Ok(token) => {
            println!("{token}");
            ExitCode::SUCCESS
        }
        Err(reason) => {
            eprintln!("ufrag-token: {reason}");
            ExitCode::from(2)
        }
    }
}

/// The token the options ask for.
fn token(options: &Options) -> Result<String, String> {
    let key = std::fs::read(&options.key_file)
        .map_err(|e| format!("cannot read {}: {e}", options.key_file.display()))?;
    let metadata = match &options.metadata {
        None => None,
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value @ serde_json::Value::Object(_)) => Some(value),
            _ => return Err(format!("--metadata must be a JSON object: {text}")),
        },
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "the clock is before 1970".to_string())?;
    let id: [u8; 16] = ufrag_transceiver::random::random_bytes();
    let request = TokenRequest {
        audience: options.audience.clone(),
        issued_at_s: now.as_secs(),
        lifetime_s: options.lifetime.as_secs().max(1),
        id: id.iter().map(|b| format!("{b:02x}")).collect(),
        claims: SessionClaims {
            subject: options.subject.clone(),
            route: options.route.clone(),
            metadata,
        },
    };
    session_token::mint(options.algorithm, &key, &request)
}
