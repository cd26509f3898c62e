//! Who may drive the agent, and how the two ends know each other: a shared token, never
//! sent. On each connection the agent sends a fresh 32-byte challenge; the compare answers
//! with a nonce of its own and HMAC-SHA256 of both under the token, labelled as the
//! compare's; the agent checks it in constant time, serves nothing (not even its hello)
//! before it matches, and proves itself back with the same MAC labelled as its own. Both
//! then derive a session key from the token and both nonces, and every later line carries
//! a MAC under it with a per-direction sequence number ([`Session`]), so someone on the
//! path who relays the handshake still cannot write, change, replay or reorder a request.
//! The whole handshake has one deadline ([`HANDSHAKE`]) and a small line limit. The token
//! comes from a file that only its owner may read, or from [`TOKEN_ENV`], on both hosts;
//! the agent refuses to start without one, since it sends load wherever it is told.

use std::io::Read as _;
use std::path::Path;

use hmac::{KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;
use ufrag_common::config::ConfigSources as _;
use ufrag_common::runtime::host::Host;

use ufrag_common::wire::{hex, unhex};

use super::protocol::{Channel, End, Session, VERSION};

/// The variable that may hold the token when no file is named.
pub const TOKEN_ENV: &str = ufrag_testbed::launch::AGENT_TOKEN_ENV;
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
                    "a token is required (a file only its owner may read, or {TOKEN_ENV}): the \
                     agent sends load wherever it is told; make one with `openssl rand -hex 32`"
                ));
            }
        };
        let token = text.trim();
        if token.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "the token has {} bytes; it needs at least {MIN_TOKEN_LEN}",
                token.len()
            ));
        }
        Ok(Token(token.as_bytes().to_vec()))
    }

    /// A token of these bytes (tests).
    pub fn from_text(text: &str) -> Token {
        Token(text.as_bytes().to_vec())
    }

    /// The MAC under the token of `role` and the two nonces.
    fn mac(&self, role: Role, agent_nonce: &[u8], compare_nonce: &[u8]) -> hmac::Hmac<Sha256> {
        let mut mac =
            hmac::Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(b"ufrag-perf agent v2\0");
        mac.update(role.label());
        mac.update(&[0]);
        mac.update(agent_nonce);
        mac.update(compare_nonce);
        mac
    }

    /// `role`'s proof over the two nonces, as hex.
    pub fn answer(&self, role: Role, agent_nonce: &[u8], compare_nonce: &[u8]) -> String {
        hex(&self
            .mac(role, agent_nonce, compare_nonce)
            .finalize()
            .into_bytes())
    }

    /// Whether `answer` (hex) is `role`'s proof over the two nonces (constant time).
    pub fn verifies(
        &self,
        role: Role,
        agent_nonce: &[u8],
        compare_nonce: &[u8],
        answer: &str,
    ) -> bool {
        match unhex(answer) {
            Some(bytes) => self
                .mac(role, agent_nonce, compare_nonce)
                .verify_slice(&bytes)
                .is_ok(),
            None => false,
        }
    }

    /// The session key of the connection the two nonces began ([`Session`]).
    pub fn session_key(&self, agent_nonce: &[u8], compare_nonce: &[u8]) -> Vec<u8> {
        let mac = self.mac(Role::Session, agent_nonce, compare_nonce);
        mac.finalize().into_bytes().to_vec()
    }
}

/// Whose MAC a proof is: each end's differs, so neither can be made to answer for the
/// other, and the session key is a third.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The agent's proof.
    Agent,
    /// The compare's proof.
    Compare,
    /// The session key.
    Session,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Agent => b"agent",
            Role::Compare => b"compare",
            Role::Session => b"session",
        }
    }
}

/// The whole handshake's deadline, for either end.
pub const HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest line the handshake reads: a challenge, an answer or a proof is under 300
/// bytes.
pub const HANDSHAKE_LINE: u64 = 512;

/// The agent's side of the handshake on a new connection: the challenge out, the
/// compare's nonce and proof in, checked under `token`, the agent's proof back; all within
/// [`HANDSHAKE`]. On success the channel is sealed with the session. A wrong or late
/// answer gets `{"error": "not authenticated"}` and is an error: the caller closes the
/// connection.
pub fn demand_proof(channel: &mut Channel, token: &Token) -> Result<(), String> {
    let deadline = std::time::Instant::now() + HANDSHAKE;
    let agent_nonce = challenge().map_err(|e| format!("/dev/urandom: {e}"))?;
    channel
        .send(&json!({ "challenge": hex(&agent_nonce), "version": VERSION }))
        .map_err(|e| e.to_string())?;
    let answer = channel.receive_before(deadline, HANDSHAKE_LINE);
    let compare_nonce = match &answer {
        Ok(Some(reply)) => reply["nonce"]
            .as_str()
            .and_then(unhex)
            .filter(|n| n.len() == CHALLENGE_LEN)
            .filter(|n| {
                reply["answer"]
                    .as_str()
                    .is_some_and(|a| token.verifies(Role::Compare, &agent_nonce, n, a))
            }),
        _ => None,
    };
    let Some(compare_nonce) = compare_nonce else {
        let _ = channel.send(&json!({ "error": "not authenticated" }));
        return Err(match answer {
            Err(e) => format!("no answer to the challenge in time: {e}"),
            Ok(None) => "closed before answering the challenge".into(),
            Ok(Some(_)) => "a wrong answer to the challenge".into(),
        });
    };
    let proof = token.answer(Role::Agent, &agent_nonce, &compare_nonce);
    channel
        .send(&json!({ "ok": { "proof": proof } }))
        .map_err(|e| e.to_string())?;
    channel.set_timeout(None).map_err(|e| e.to_string())?;
    let key = token.session_key(&agent_nonce, &compare_nonce);
    channel.seal(Session::new(key, End::Agent));
    Ok(())
}

/// The compare's side: answers the agent's challenge with a nonce of its own under
/// `token`, checks the agent's proof back, and seals the channel; all within
/// [`HANDSHAKE`].
pub fn prove(channel: &mut Channel, token: &Token) -> Result<(), String> {
    let deadline = std::time::Instant::now() + HANDSHAKE;
    let hello = channel
        .receive_before(deadline, HANDSHAKE_LINE)
        .map_err(|e| format!("the agent's challenge: {e}"))?
        .ok_or("the agent closed the connection before its challenge")?;
    if hello["version"].as_u64() != Some(VERSION) {
        return Err(format!(
            "the agent speaks protocol {}, this compare {VERSION} (the same build on both hosts)",
            hello["version"]
        ));
    }
    let agent_nonce = hello["challenge"]
        .as_str()
        .and_then(unhex)
        .filter(|n| n.len() == CHALLENGE_LEN)
        .ok_or("the agent sent no challenge of 32 bytes")?;
    let compare_nonce = challenge().map_err(|e| format!("/dev/urandom: {e}"))?;
    let answer = token.answer(Role::Compare, &agent_nonce, &compare_nonce);
    channel
        .send(&json!({ "nonce": hex(&compare_nonce), "answer": answer }))
        .map_err(|e| format!("the agent: {e}"))?;
    let verdict = channel
        .receive_before(deadline, HANDSHAKE_LINE)
        .map_err(|e| format!("the agent: {e}"))?
        .ok_or("the agent closed the connection")?;
    let Some(ok) = verdict.get("ok") else {
        return Err(format!(
            "the agent refused the token: {} (the same token on both hosts)",
            verdict["error"].as_str().unwrap_or("?")
        ));
    };
    let proven = ok["proof"]
        .as_str()
        .is_some_and(|p| token.verifies(Role::Agent, &agent_nonce, &compare_nonce, p));
    if !proven {
        return Err("the peer did not prove it holds the token: not our agent".into());
    }
    channel.set_timeout(None).map_err(|e| e.to_string())?;
    let key = token.session_key(&agent_nonce, &compare_nonce);
    channel.seal(Session::new(key, End::Compare));
    Ok(())
}

/// A fresh challenge from the kernel's random source.
pub fn challenge() -> std::io::Result<[u8; CHALLENGE_LEN]> {
    let mut bytes = [0u8; CHALLENGE_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn only_the_token_proves_a_role_and_only_over_its_nonces() {
        let token = Token::from_text(TOKEN);
        let (a, b) = ([7u8; CHALLENGE_LEN], [9u8; CHALLENGE_LEN]);
        let answer = token.answer(Role::Compare, &a, &b);
        assert!(token.verifies(Role::Compare, &a, &b, &answer));
        assert!(
            !token.verifies(Role::Agent, &a, &b, &answer),
            "the other role's proof"
        );
        assert!(
            !token.verifies(Role::Compare, &b, &a, &answer),
            "other nonces"
        );
        let other = Token::from_text("another token of enough characters!");
        assert!(
            !other.verifies(Role::Compare, &a, &b, &answer),
            "another token"
        );
        for bad in ["", "zz", &answer[..10], "0", &format!("{answer}00")] {
            assert!(!token.verifies(Role::Compare, &a, &b, bad), "{bad:?}");
        }
        assert_eq!(format!("{token:?}"), "Token(<redacted>)");
    }

    #[test]
    fn a_sealed_line_opens_once_in_order_and_not_when_changed() {
        let key = Token::from_text(TOKEN).session_key(&[1; 32], &[2; 32]);
        let (mut agent, mut compare) = (
            Session::new(key.clone(), End::Agent),
            Session::new(key, End::Compare),
        );
        let first = compare.seal(&json!({"trial": 1}));
        let second = compare.seal(&json!({"trial": 2}));
        assert!(agent.open(&second).is_err(), "out of order");
        assert_eq!(agent.open(&first).unwrap(), json!({"trial": 1}));
        assert!(agent.open(&first).is_err(), "replayed");
        let mut changed = second.clone();
        changed["body"] = json!("{\"trial\":3}");
        assert!(agent.open(&changed).is_err(), "changed");
        assert_eq!(agent.open(&second).unwrap(), json!({"trial": 2}));
        // A line the agent sealed does not open as the agent's own input.
        let reply = agent.seal(&json!({"ok": {}}));
        assert!(agent.open(&reply).is_err(), "reflected");
        assert_eq!(compare.open(&reply).unwrap(), json!({"ok": {}}));
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
