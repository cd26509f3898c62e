//! Who may drive the agent: a shared token, and the handshake that proves it without
//! sending it. On each connection the agent sends a fresh 32-byte challenge; the compare
//! answers with HMAC-SHA256 of the challenge under the token; the agent checks it in
//! constant time and serves nothing (not even its hello) before it matches. A wrong answer
//! closes the connection. The token comes from a file that only its owner may read, or from
//! [`TOKEN_ENV`], on both hosts; the agent refuses to start without one, since it sends
//! load wherever it is told.

use std::io::Read as _;
use std::path::Path;

use hmac::{KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;
use ufrag_common::config::ConfigSources as _;
use ufrag_common::runtime::host::Host;

use super::protocol::{Channel, VERSION};

/// The variable that may hold the token when no file is named.
pub const TOKEN_ENV: &str = "UFRAG_PERF_AGENT_TOKEN";
/// The shortest token taken: `openssl rand -hex 32` gives 64 characters.
pub const MIN_TOKEN_LEN: usize = 32;
/// A challenge's bytes.
pub const CHALLENGE_LEN: usize = 32;

/// The shared token. Its `Debug` never shows it.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// The token from `file` (refused when others or another group may read it), else from
    /// [`TOKEN_ENV`]; an error says which and why (none given, too short, both given).
    pub fn load(file: Option<&Path>) -> Result<Token, String> {
        Self::load_from(file, &Host::process())
    }

    /// [`Token::load`] with the file and the variable read through `host`.
    pub fn load_from(file: Option<&Path>, host: &Host) -> Result<Token, String> {
        let from_env = host.env_var(TOKEN_ENV).filter(|v| !v.is_empty());
        let text = match (file, from_env) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "both --token-file and {TOKEN_ENV} are set; use one"
                ));
            }
            (Some(path), None) => {
                let bytes = host
                    .read_file("token_file", path, true)
                    .map_err(|e| e.to_string())?;
                String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8", path.display()))?
            }
            (None, Some(text)) => text,
            (None, None) => {
                return Err(format!(
                    "a token is required (--token-file FILE, mode 0600, or {TOKEN_ENV}): the \
                     agent sends load wherever it is told; make one with `openssl rand -hex 32`"
                ));
            }
        };
        let token = text.trim();
        if token.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "the token has {} characters; it needs at least {MIN_TOKEN_LEN}",
                token.len()
            ));
        }
        Ok(Token(token.as_bytes().to_vec()))
    }

    /// A token of these bytes (tests).
    pub fn from_text(text: &str) -> Token {
        Token(text.as_bytes().to_vec())
    }

    fn mac(&self, challenge: &[u8]) -> hmac::Hmac<Sha256> {
        let mut mac =
            hmac::Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(b"ufrag-perf agent v1\0");
        mac.update(challenge);
        mac
    }

    /// The answer to `challenge`, as hex.
    pub fn answer(&self, challenge: &[u8]) -> String {
        hex(&self.mac(challenge).finalize().into_bytes())
    }

    /// Whether `answer` (hex) answers `challenge` under this token (constant time).
    pub fn verifies(&self, challenge: &[u8], answer: &str) -> bool {
        match unhex(answer) {
            Some(bytes) => self.mac(challenge).verify_slice(&bytes).is_ok(),
            None => false,
        }
    }
}

/// How long either side waits for the other's step of the handshake.
pub const HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(5);

/// The agent's side of the handshake on a new connection: the challenge out, the answer in
/// (within [`HANDSHAKE`]), checked under `token`. A wrong or late answer gets
/// `{"error": "not authenticated"}` and is an error: the caller closes the connection.
pub fn demand_proof(channel: &mut Channel, token: &Token) -> Result<(), String> {
    let challenge = challenge().map_err(|e| format!("/dev/urandom: {e}"))?;
    channel
        .set_timeout(Some(HANDSHAKE))
        .map_err(|e| e.to_string())?;
    channel
        .send(&json!({ "challenge": hex(&challenge), "version": VERSION }))
        .map_err(|e| e.to_string())?;
    let answer = channel.receive();
    let proven = matches!(&answer, Ok(Some(reply))
        if reply["answer"].as_str().is_some_and(|a| token.verifies(&challenge, a)));
    if !proven {
        let _ = channel.send(&json!({ "error": "not authenticated" }));
        return Err(match answer {
            Err(e) => format!("no answer to the challenge: {e}"),
            Ok(None) => "closed before answering the challenge".into(),
            Ok(Some(_)) => "a wrong answer to the challenge".into(),
        });
    }
    channel.set_timeout(None).map_err(|e| e.to_string())?;
    channel
        .send(&json!({ "ok": {} }))
        .map_err(|e| e.to_string())
}

/// The compare's side: answers the agent's challenge under `token` and reads its verdict.
pub fn prove(channel: &mut Channel, token: &Token) -> Result<(), String> {
    channel
        .set_timeout(Some(HANDSHAKE))
        .map_err(|e| e.to_string())?;
    let hello = channel
        .receive()
        .map_err(|e| format!("the agent's challenge: {e}"))?
        .ok_or("the agent closed the connection before its challenge")?;
    let challenge = hello["challenge"]
        .as_str()
        .and_then(unhex)
        .ok_or("the agent sent no challenge (an agent older than the token handshake?)")?;
    if hello["version"].as_u64() != Some(VERSION) {
        return Err(format!(
            "the agent speaks protocol {}, this compare {VERSION}",
            hello["version"]
        ));
    }
    channel
        .send(&json!({ "answer": token.answer(&challenge) }))
        .map_err(|e| format!("the agent: {e}"))?;
    let verdict = channel
        .receive()
        .map_err(|e| format!("the agent: {e}"))?
        .ok_or("the agent closed the connection")?;
    if verdict.get("ok").is_none() {
        return Err(format!(
            "the agent refused the token: {} (the same token on both hosts: --token-file or \
             {TOKEN_ENV})",
            verdict["error"].as_str().unwrap_or("?")
        ));
    }
    channel.set_timeout(None).map_err(|e| e.to_string())
}

/// A fresh challenge from the kernel's random source.
pub fn challenge() -> std::io::Result<[u8; CHALLENGE_LEN]> {
    let mut bytes = [0u8; CHALLENGE_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex as bytes; `None` unless it is whole bytes of hex digits.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn only_the_token_answers_a_challenge_and_only_that_one() {
        let token = Token::from_text(TOKEN);
        let challenge = [7u8; CHALLENGE_LEN];
        let answer = token.answer(&challenge);
        assert!(token.verifies(&challenge, &answer));
        assert!(
            !token.verifies(&[8u8; CHALLENGE_LEN], &answer),
            "another challenge"
        );
        let other = Token::from_text("another token of enough characters!");
        assert!(!other.verifies(&challenge, &answer), "another token");
        for bad in ["", "zz", &answer[..10], "0", &format!("{answer}00")] {
            assert!(!token.verifies(&challenge, bad), "{bad:?}");
        }
        assert_eq!(format!("{token:?}"), "Token(<redacted>)");
    }

    #[test]
    fn the_token_comes_from_one_place_and_is_long_enough() {
        let none = Token::load_from(None, &Host::files_only()).unwrap_err();
        assert!(none.contains("a token is required"), "{none}");
        let short = Token::load_from(None, &Host::files_only().with_env(TOKEN_ENV, "short"));
        assert!(short.unwrap_err().contains("at least 32"));
        let env = Host::files_only().with_env(TOKEN_ENV, TOKEN);
        assert!(Token::load_from(None, &env).is_ok());
        let both = Token::load_from(Some(Path::new("/nonexistent")), &env).unwrap_err();
        assert!(both.contains("use one"), "{both}");
        let missing = Token::load_from(Some(Path::new("/nonexistent")), &Host::files_only());
        assert!(missing.unwrap_err().contains("token_file"));
    }

    #[test]
    fn challenges_differ() {
        assert_ne!(challenge().unwrap(), challenge().unwrap());
    }
}
