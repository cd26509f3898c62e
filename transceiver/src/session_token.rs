//! Per-session credentials: a short-lived JWT that the app's server mints for one user and
//! the browser presents as `Authorization: Bearer …` on `POST /v1/sessions`. Its claims
//! (who the session is for, the app's metadata, a model route) travel with the session to
//! the model backend in `session.started`.
//!
//! A token is accepted when all of these hold; otherwise the refusal names the first that
//! failed ([`TokenRefusal`], counted by its label):
//!
//! | check | refusal | status |
//! |---|---|---|
//! | three base64url parts, JSON header and claims, `exp` an integer | `malformed` | 401 |
//! | signed by the configured key with the configured algorithm (HS256, ES256 or EdDSA; never `none`) | `bad_signature` | 401 |
//! | `exp` not past (with [`CLOCK_LEEWAY_S`] of leeway) | `expired` | 401 |
//! | `nbf` and `iat`, when present, not in the future (same leeway) | `not_yet_valid` | 401 |
//! | `exp` at most the configured lifetime from now (and from `iat`, when present) | `lifetime_too_long` | 401 |
//! | `sub` ≤ 256 bytes, `route` ≤ 64 of `[A-Za-z0-9_.:/-]`, `metadata` a JSON object ≤ 4 KiB, `jti` ≤ 128 bytes | `bad_claims` | 401 |
//! | `aud` names this transceiver's audience | `wrong_audience` | 403 |
//! | single use on: `jti` present | `bad_claims` | 401 |
//! | single use on: `jti` never accepted before by this process (remembered until its `exp`) | `reused` | 403 |
//! | single use on: fewer than [`MAX_REMEMBERED`] unexpired tokens remembered | `replay_memory_full` | 503 |
//!
//! A 401 means "who you are is not established" (RFC 6750's `invalid_token`); a 403 means
//! "a genuine token, but not for this here and now".
//!
//! The signature is checked before any claim is believed, and the algorithm is the
//! configured one, never the token header's choice. Time is checked here, with the clock
//! passed in, so every rule is tested at fixed times.

use std::collections::HashMap;
use std::sync::Mutex;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use ufrag_common::label_enum;

use ufrag_model_protocol::messages::SessionClaims;

/// Clock skew tolerated between the app's server and the transceiver, in seconds.
pub const CLOCK_LEEWAY_S: u64 = 10;
/// The longest lifetime a token may be configured to have: an hour.
pub const MAX_LIFETIME_S: u64 = 3600;
/// The unexpired single-use tokens remembered at once; a new one beyond is refused (503).
/// At the default 10-minute lifetime this is 437 sign-ups a second, sustained.
pub const MAX_REMEMBERED: usize = 262_144;
/// The longest `sub`.
pub const MAX_SUBJECT_LEN: usize = 256;
/// The longest `route`.
pub const MAX_ROUTE_LEN: usize = 64;
/// The longest `metadata`, serialized.
pub const MAX_METADATA_LEN: usize = 4096;
/// The longest `jti`.
pub const MAX_JTI_LEN: usize = 128;

label_enum! {
    /// Why a session token was refused; each is counted by its label.
    pub enum TokenRefusal {
        /// No `Authorization: Bearer` header.
        Missing = "missing",
        /// Not a JWT, or its header or claims are not the expected JSON.
        Malformed = "malformed",
        /// Not signed by the configured key with the configured algorithm.
        BadSignature = "bad_signature",
        /// `exp` has passed.
        Expired = "expired",
        /// `nbf` or `iat` is in the future.
        NotYetValid = "not_yet_valid",
        /// `exp` is further away than the configured lifetime.
        LifetimeTooLong = "lifetime_too_long",
        /// A claim over its limit, `metadata` not an object, or (with single use) no
        /// `jti`.
        BadClaims = "bad_claims",
        /// `aud` does not name this transceiver's audience.
        WrongAudience = "wrong_audience",
        /// A single-use token presented again.
        Reused = "reused",
        /// Too many unexpired single-use tokens remembered to take another.
        ReplayMemoryFull = "replay_memory_full"
    }
}

impl TokenRefusal {
    /// The HTTP status: 401, 403 or 503 (see the module documentation).
    pub fn status(self) -> u16 {
        match self {
            TokenRefusal::WrongAudience | TokenRefusal::Reused => 403,
            TokenRefusal::ReplayMemoryFull => 503,
            _ => 401,
        }
    }

    /// The one-line answer.
    pub fn explain(self) -> &'static str {
        match self {
            TokenRefusal::Missing => "a session token is required (Authorization: Bearer)",
            TokenRefusal::Malformed => "session token refused: malformed",
            TokenRefusal::BadSignature => "session token refused: bad signature",
            TokenRefusal::Expired => "session token refused: expired",
            TokenRefusal::NotYetValid => "session token refused: not yet valid",
            TokenRefusal::LifetimeTooLong => {
                "session token refused: it expires later than the lifetime allows"
            }
            TokenRefusal::BadClaims => "session token refused: a claim is over its limit",
            TokenRefusal::WrongAudience => "session token refused: not for this audience",
            TokenRefusal::Reused => "session token refused: already used",
            TokenRefusal::ReplayMemoryFull => "too many single-use tokens in flight; retry",
        }
    }
}

/// The signing algorithm session tokens must use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TokenAlgorithm {
    /// HMAC-SHA256 with a shared secret (the key file holds the secret).
    Hs256,
    /// ECDSA P-256 (the key file holds the public key, PEM).
    Es256,
    /// Ed25519 (the key file holds the public key, PEM).
    Eddsa,
}

impl TokenAlgorithm {
    fn jwt(self) -> Algorithm {
        match self {
            TokenAlgorithm::Hs256 => Algorithm::HS256,
            TokenAlgorithm::Es256 => Algorithm::ES256,
            TokenAlgorithm::Eddsa => Algorithm::EdDSA,
        }
    }

    /// The verifying key from the key file's bytes.
    fn key(self, bytes: &[u8]) -> Result<DecodingKey, String> {
        match self {
            TokenAlgorithm::Hs256 => {
                let secret = bytes.trim_ascii();
                if secret.len() < 32 {
                    return Err(format!(
                        "an HS256 secret of {} bytes: at least 32 are needed",
                        secret.len()
                    ));
                }
                Ok(DecodingKey::from_secret(secret))
            }
            TokenAlgorithm::Es256 => DecodingKey::from_ec_pem(bytes)
                .map_err(|e| format!("not a P-256 public key in PEM: {e}")),
            TokenAlgorithm::Eddsa => DecodingKey::from_ed_pem(bytes)
                .map_err(|e| format!("not an Ed25519 public key in PEM: {e}")),
        }
    }
}

/// How session tokens are checked.
#[derive(Clone, Debug)]
pub struct TokenRules {
    /// The algorithm.
    pub algorithm: TokenAlgorithm,
    /// The `aud` a token must name.
    pub audience: String,
    /// The longest a token may live, in seconds (at most [`MAX_LIFETIME_S`]).
    pub max_lifetime_s: u64,
    /// Each token creates one session: `jti` required, remembered until `exp`.
    pub single_use: bool,
}

/// The claims a token carries, as signed.
#[derive(Deserialize)]
struct Claims {
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
    #[serde(default)]
    iat: Option<u64>,
    #[serde(default)]
    jti: Option<String>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    route: Option<String>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

/// Whom a session belongs to: a digest of its token's `sub`, or of the token itself when
/// it names no one. A later PATCH or DELETE must present a token of the same owner.
pub type Owner = [u8; 32];

/// A token that passed every check but single use ([`SessionTokens::verify`]).
#[derive(Debug)]
pub struct VerifiedToken {
    /// Its claims.
    pub claims: SessionClaims,
    /// Whom the sessions it creates belong to.
    pub owner: Owner,
    jti: Option<String>,
    exp: u64,
}

/// Single-use tokens accepted and not yet expired: a digest of each `jti` and its `exp`.
#[derive(Debug, Default)]
struct Remembered {
    expiries: HashMap<[u8; 16], u64>,
    /// When the expired ones were last swept out (a sweep runs at most once a second).
    last_sweep_s: u64,
}

/// The session-token verifier of one transceiver.
pub struct SessionTokens {
    key: DecodingKey,
    validation: Validation,
    rules: TokenRules,
    remembered: Mutex<Remembered>,
}

impl std::fmt::Debug for SessionTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTokens")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl SessionTokens {
    /// A verifier with `rules` and the key in `key_bytes`.
    pub fn new(key_bytes: &[u8], rules: TokenRules) -> Result<Self, String> {
        if rules.max_lifetime_s == 0 || rules.max_lifetime_s > MAX_LIFETIME_S {
            return Err(format!(
                "a lifetime of {} s: between 1 s and {MAX_LIFETIME_S} s",
                rules.max_lifetime_s
            ));
        }
        if rules.audience.is_empty() {
            return Err("an empty audience".into());
        }
        let key = rules.algorithm.key(key_bytes)?;
        let mut validation = Validation::new(rules.algorithm.jwt());
        // Time is checked in `verify`, against the clock it is given.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "aud"]);
        validation.set_audience(&[rules.audience.as_str()]);
        Ok(SessionTokens {
            key,
            validation,
            rules,
            remembered: Mutex::new(Remembered::default()),
        })
    }

    /// The rules.
    pub fn rules(&self) -> &TokenRules {
        &self.rules
    }

    /// Whether `token` admits a new session at `now_s` (Unix seconds): its claims, or
    /// why not. A single-use token is spent by this call ([`Self::verify`], then
    /// [`Self::spend`]).
    pub fn admit(&self, token: &str, now_s: u64) -> Result<SessionClaims, TokenRefusal> {
        let verified = self.verify(token, now_s)?;
        self.spend(&verified, now_s)?;
        Ok(verified.claims)
    }

    /// Every check but single use, at `now_s`: enough to act on a session that exists
    /// (PATCH, DELETE; a single-use token may do so until it expires), and the first step
    /// of admitting a new one.
    pub fn verify(&self, token: &str, now_s: u64) -> Result<VerifiedToken, TokenRefusal> {
        let claims: Claims = jsonwebtoken::decode(token, &self.key, &self.validation)
            .map_err(|e| refusal_of(e.kind()))?
            .claims;
        if claims.exp.saturating_add(CLOCK_LEEWAY_S) < now_s {
            return Err(TokenRefusal::Expired);
        }
        let future = |t: Option<u64>| t.is_some_and(|t| t > now_s.saturating_add(CLOCK_LEEWAY_S));
        if future(claims.nbf) || future(claims.iat) {
            return Err(TokenRefusal::NotYetValid);
        }
        let longest = self.rules.max_lifetime_s + CLOCK_LEEWAY_S;
        let from_iat = claims.iat.map_or(0, |iat| claims.exp.saturating_sub(iat));
        if claims.exp.saturating_sub(now_s) > longest || from_iat > longest {
            return Err(TokenRefusal::LifetimeTooLong);
        }
        if claims.jti.as_ref().is_some_and(|j| j.len() > MAX_JTI_LEN) {
            return Err(TokenRefusal::BadClaims);
        }
        let owner: Owner = match &claims.sub {
            Some(subject) => Sha256::new()
                .chain_update(b"sub\0")
                .chain_update(subject.as_bytes())
                .finalize()
                .into(),
            None => Sha256::new()
                .chain_update(b"token\0")
                .chain_update(token.as_bytes())
                .finalize()
                .into(),
        };
        Ok(VerifiedToken {
            owner,
            claims: session_claims(claims.sub, claims.route, claims.metadata)?,
            jti: claims.jti,
            exp: claims.exp,
        })
    }

    /// Spends a verified token on a new session: with single use on, its `jti` is
    /// remembered until it expires, and a `jti` seen before (or none) is refused.
    /// Signaling spends it last, once the request would otherwise succeed, so an offer
    /// refused for another reason does not use up the token.
    pub fn spend(&self, verified: &VerifiedToken, now_s: u64) -> Result<(), TokenRefusal> {
        if !self.rules.single_use {
            return Ok(());
        }
        // A single-use token without a jti is the minting server's mistake.
        let jti = verified.jti.as_deref().ok_or(TokenRefusal::BadClaims)?;
        self.remember(jti, verified.exp, now_s)
    }

    /// Gives back a token [`Self::spend`] took, when the session it was spent on was not
    /// created after all (a bad offer, a full transceiver): the page may try again.
    pub fn unspend(&self, verified: &VerifiedToken) {
        if let (true, Some(jti)) = (self.rules.single_use, verified.jti.as_deref()) {
            let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
            remembered.expiries.remove(&jti_key(jti));
        }
    }

    /// Records a single-use token's `jti` until `exp`; refuses one seen before.
    fn remember(&self, jti: &str, exp: u64, now_s: u64) -> Result<(), TokenRefusal> {
        let key = jti_key(jti);
        let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        let seen_until = remembered.expiries.get(&key).copied();
        if seen_until.is_some_and(|until| until.saturating_add(CLOCK_LEEWAY_S) >= now_s) {
            return Err(TokenRefusal::Reused);
        }
        if remembered.expiries.len() >= MAX_REMEMBERED && remembered.last_sweep_s != now_s {
            remembered.last_sweep_s = now_s;
            remembered
                .expiries
                .retain(|_, until| until.saturating_add(CLOCK_LEEWAY_S) >= now_s);
        }
        if remembered.expiries.len() >= MAX_REMEMBERED && seen_until.is_none() {
            return Err(TokenRefusal::ReplayMemoryFull);
        }
        remembered.expiries.insert(key, exp);
        Ok(())
    }

    /// Single-use tokens remembered now.
    pub fn remembered(&self) -> usize {
        self.remembered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expiries
            .len()
    }
}

/// A `jti` as the single-use memory keeps it: the first 16 bytes of its SHA-256.
fn jti_key(jti: &str) -> [u8; 16] {
    let digest: [u8; 32] = Sha256::digest(jti.as_bytes()).into();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// The session's claims, each within its limit.
fn session_claims(
    subject: Option<String>,
    route: Option<String>,
    metadata: Option<serde_json::Value>,
) -> Result<SessionClaims, TokenRefusal> {
    if subject.as_ref().is_some_and(|s| s.len() > MAX_SUBJECT_LEN) {
        return Err(TokenRefusal::BadClaims);
    }
    let route_ok = |r: &String| {
        !r.is_empty()
            && r.len() <= MAX_ROUTE_LEN
            && r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:/-".contains(&b))
    };
    if route.as_ref().is_some_and(|r| !route_ok(r)) {
        return Err(TokenRefusal::BadClaims);
    }
    let metadata = match metadata {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Object(map)) => {
            let value = serde_json::Value::Object(map);
            if value.to_string().len() > MAX_METADATA_LEN {
                return Err(TokenRefusal::BadClaims);
            }
            Some(value)
        }
        Some(_) => return Err(TokenRefusal::BadClaims),
    };
    Ok(SessionClaims {
        subject,
        route,
        metadata,
    })
}

/// The refusal a decoding error means.
fn refusal_of(kind: &ErrorKind) -> TokenRefusal {
    match kind {
        ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => TokenRefusal::BadSignature,
        ErrorKind::InvalidAudience => TokenRefusal::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => TokenRefusal::WrongAudience,
        ErrorKind::ExpiredSignature => TokenRefusal::Expired,
        ErrorKind::ImmatureSignature => TokenRefusal::NotYetValid,
        _ => TokenRefusal::Malformed,
    }
}

/// What a session token says, as the app's server mints it ([`mint`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenRequest {
    /// The audience (`aud`): the transceivers' `--session-token-audience`.
    pub audience: String,
    /// When it was minted (`iat`), Unix seconds.
    pub issued_at_s: u64,
    /// How long it lives: `exp` = `iat` + this.
    pub lifetime_s: u64,
    /// Its unique id (`jti`), for single use.
    pub id: String,
    /// The session's claims: `sub`, `route`, `metadata`.
    pub claims: SessionClaims,
}

/// A session token for `request`, signed with `algorithm` and `key` (the HS256 secret,
/// or the private key in PKCS#8 PEM for ES256 and EdDSA): what the app's server does,
/// and what `ufrag-token` prints.
pub fn mint(
    algorithm: TokenAlgorithm,
    key: &[u8],
    request: &TokenRequest,
) -> Result<String, String> {
    let encoding = match algorithm {
        TokenAlgorithm::Hs256 => jsonwebtoken::EncodingKey::from_secret(key.trim_ascii()),
        TokenAlgorithm::Es256 => jsonwebtoken::EncodingKey::from_ec_pem(key)
            .map_err(|e| format!("not a P-256 private key in PKCS#8 PEM: {e}"))?,
        TokenAlgorithm::Eddsa => jsonwebtoken::EncodingKey::from_ed_pem(key)
            .map_err(|e| format!("not an Ed25519 private key in PKCS#8 PEM: {e}"))?,
    };
    let mut claims = serde_json::json!({
        "aud": request.audience,
        "iat": request.issued_at_s,
        "exp": request.issued_at_s.saturating_add(request.lifetime_s),
        "jti": request.id,
    });
    let session = &request.claims;
    session_claims(
        session.subject.clone(),
        session.route.clone(),
        session.metadata.clone(),
    )
    .map_err(|_| {
        format!(
            "a claim over its limit: `sub` {MAX_SUBJECT_LEN} bytes, `route` {MAX_ROUTE_LEN} \
             of [A-Za-z0-9_.:/-], `metadata` a JSON object of {MAX_METADATA_LEN}"
        )
    })?;
    for (name, value) in [
        (
            "sub",
            session.subject.clone().map(serde_json::Value::String),
        ),
        (
            "route",
            session.route.clone().map(serde_json::Value::String),
        ),
        ("metadata", session.metadata.clone()),
    ] {
        if let Some(value) = value {
            claims[name] = value;
        }
    }
    let header = jsonwebtoken::Header::new(algorithm.jwt());
    jsonwebtoken::encode(&header, &claims, &encoding).map_err(|e| format!("cannot sign: {e}"))
}

/// What a valid `Authorization` header presents as a bearer credential, if anything.
pub fn bearer(authorization: Option<&str>) -> Option<&str> {
    ufrag_model_protocol::bearer::presented(authorization)
        .map(str::trim)
        .filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test";
    const NOW: u64 = 1_800_000_000;

    fn rules(single_use: bool) -> TokenRules {
        TokenRules {
            algorithm: TokenAlgorithm::Hs256,
            audience: "ufrag-test".into(),
            max_lifetime_s: 600,
            single_use,
        }
    }

    fn tokens(single_use: bool) -> SessionTokens {
        SessionTokens::new(SECRET, rules(single_use)).unwrap()
    }

    fn mint(claims: serde_json::Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap()
    }

    fn good() -> serde_json::Value {
        json!({
            "aud": "ufrag-test", "exp": NOW + 300, "iat": NOW, "jti": "t-1",
            "sub": "alice", "route": "agent/v2", "metadata": {"plan": "pro", "n": 3},
        })
    }

    fn with(field: &str, value: serde_json::Value) -> serde_json::Value {
        let mut claims = good();
        claims[field] = value;
        claims
    }

    fn without(field: &str) -> serde_json::Value {
        let mut claims = good();
        claims.as_object_mut().unwrap().remove(field);
        claims
    }

    #[test]
    fn a_good_token_admits_its_claims() {
        let claims = tokens(false).admit(&mint(good()), NOW).unwrap();
        assert_eq!(claims.subject.as_deref(), Some("alice"));
        assert_eq!(claims.route.as_deref(), Some("agent/v2"));
        assert_eq!(claims.metadata, Some(json!({"plan": "pro", "n": 3})));
        let bare = tokens(false)
            .admit(&mint(json!({"aud": "ufrag-test", "exp": NOW + 60})), NOW)
            .unwrap();
        assert_eq!(bare, SessionClaims::default());
    }

    #[test]
    fn each_bad_token_is_refused_with_its_reason_and_status() {
        let other_key = encode(
            &Header::new(Algorithm::HS256),
            &good(),
            &EncodingKey::from_secret(b"another-secret-another-secret-another"),
        )
        .unwrap();
        let hs384 = encode(
            &Header::new(Algorithm::HS384),
            &good(),
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        let good_token = mint(good());
        let (head, rest) = good_token.split_once('.').unwrap();
        let (_, signature) = rest.split_once('.').unwrap();
        // The claims swapped for someone else's, the signature kept.
        let forged_claims = format!(
            "{head}.{}.{signature}",
            mint(with("sub", json!("mallory")))
                .split('.')
                .nth(1)
                .unwrap()
        );
        let unsigned = format!(
            "{}.{}.",
            "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0",
            good_token.split('.').nth(1).unwrap()
        );
        let cases: Vec<(String, TokenRefusal, u16)> = vec![
            ("not a jwt".into(), TokenRefusal::Malformed, 401),
            ("a.b.c".into(), TokenRefusal::Malformed, 401),
            (
                mint(with("exp", json!("soon"))),
                TokenRefusal::Malformed,
                401,
            ),
            (mint(without("exp")), TokenRefusal::Malformed, 401),
            (other_key, TokenRefusal::BadSignature, 401),
            (hs384, TokenRefusal::BadSignature, 401),
            (forged_claims, TokenRefusal::BadSignature, 401),
            (unsigned, TokenRefusal::Malformed, 401),
            (
                mint(with("exp", json!(NOW - 11))),
                TokenRefusal::Expired,
                401,
            ),
            (
                mint(with("nbf", json!(NOW + 11))),
                TokenRefusal::NotYetValid,
                401,
            ),
            (
                mint(with("iat", json!(NOW + 11))),
                TokenRefusal::NotYetValid,
                401,
            ),
            (
                mint(with("exp", json!(NOW + 611))),
                TokenRefusal::LifetimeTooLong,
                401,
            ),
            (
                mint(with("iat", json!(NOW - 600))),
                TokenRefusal::LifetimeTooLong,
                401,
            ),
            (
                mint(with("sub", json!("x".repeat(257)))),
                TokenRefusal::BadClaims,
                401,
            ),
            (
                mint(with("route", json!("a b"))),
                TokenRefusal::BadClaims,
                401,
            ),
            (mint(with("route", json!(""))), TokenRefusal::BadClaims, 401),
            (
                mint(with("metadata", json!([1, 2]))),
                TokenRefusal::BadClaims,
                401,
            ),
            (
                mint(with("metadata", json!({"blob": "x".repeat(4100)}))),
                TokenRefusal::BadClaims,
                401,
            ),
            (
                mint(with("jti", json!("j".repeat(129)))),
                TokenRefusal::BadClaims,
                401,
            ),
            (
                mint(with("aud", json!("another-app"))),
                TokenRefusal::WrongAudience,
                403,
            ),
            (mint(without("aud")), TokenRefusal::WrongAudience, 403),
        ];
        let verifier = tokens(false);
        for (token, reason, status) in cases {
            assert_eq!(verifier.admit(&token, NOW), Err(reason), "{token}");
            assert_eq!(reason.status(), status, "{reason:?}");
        }
        // Within the leeway either side, the clock's skew is forgiven.
        assert!(
            verifier
                .admit(&mint(with("exp", json!(NOW - 10))), NOW)
                .is_ok()
        );
        assert!(
            verifier
                .admit(&mint(with("nbf", json!(NOW + 10))), NOW)
                .is_ok()
        );
    }

    #[test]
    fn a_single_use_token_admits_one_session_and_is_forgotten_after_it_expires() {
        let verifier = tokens(true);
        let token = mint(good());
        assert!(verifier.admit(&token, NOW).is_ok());
        assert_eq!(verifier.admit(&token, NOW + 1), Err(TokenRefusal::Reused));
        assert_eq!(TokenRefusal::Reused.status(), 403);
        // It still vouches for the caller of PATCH and DELETE until it expires.
        assert!(verifier.verify(&token, NOW + 1).is_ok());
        assert_eq!(
            verifier.verify(&token, NOW + 311).unwrap_err(),
            TokenRefusal::Expired
        );
        // Given back (its session was not created), it may be spent again, once.
        let again = mint(with("jti", json!("t-2")));
        let verified = verifier.verify(&again, NOW).unwrap();
        verifier.spend(&verified, NOW).unwrap();
        verifier.unspend(&verified);
        verifier.spend(&verified, NOW).unwrap();
        assert_eq!(verifier.spend(&verified, NOW), Err(TokenRefusal::Reused));
        // Without a jti there is nothing to remember it by.
        let no_jti = mint(without("jti"));
        assert_eq!(verifier.admit(&no_jti, NOW), Err(TokenRefusal::BadClaims));
        assert!(tokens(false).admit(&no_jti, NOW).is_ok());
        assert_eq!(verifier.remembered(), 2);
    }

    #[test]
    fn the_memory_of_single_use_tokens_is_bounded_and_sheds_only_the_expired() {
        let verifier = tokens(true);
        {
            let mut remembered = verifier.remembered.lock().unwrap();
            for i in 0..MAX_REMEMBERED as u64 {
                let mut key = [0u8; 16];
                key[..8].copy_from_slice(&i.to_be_bytes());
                // Half expire at NOW + 5, half at NOW + 500.
                remembered
                    .expiries
                    .insert(key, if i % 2 == 0 { NOW + 5 } else { NOW + 500 });
            }
        }
        let token = mint(with("jti", json!("fresh")));
        assert_eq!(
            verifier.admit(&token, NOW),
            Err(TokenRefusal::ReplayMemoryFull)
        );
        assert_eq!(TokenRefusal::ReplayMemoryFull.status(), 503);
        // Once the first half has expired, a sweep makes room.
        assert!(verifier.admit(&token, NOW + 5 + CLOCK_LEEWAY_S + 1).is_ok());
        assert_eq!(verifier.remembered(), MAX_REMEMBERED / 2 + 1);
    }

    #[test]
    fn es256_and_eddsa_tokens_verify_with_the_public_key_only() {
        for (algorithm, jwt, pkcs) in [
            (
                TokenAlgorithm::Es256,
                Algorithm::ES256,
                &rcgen::PKCS_ECDSA_P256_SHA256,
            ),
            (
                TokenAlgorithm::Eddsa,
                Algorithm::EdDSA,
                &rcgen::PKCS_ED25519,
            ),
        ] {
            let signer = rcgen::KeyPair::generate_for(pkcs).unwrap();
            let stranger = rcgen::KeyPair::generate_for(pkcs).unwrap();
            let sign = |pair: &rcgen::KeyPair| {
                let pem = pair.serialize_pem();
                let key = match algorithm {
                    TokenAlgorithm::Es256 => EncodingKey::from_ec_pem(pem.as_bytes()),
                    _ => EncodingKey::from_ed_pem(pem.as_bytes()),
                };
                encode(&Header::new(jwt), &good(), &key.unwrap()).unwrap()
            };
            let mut asymmetric = rules(false);
            asymmetric.algorithm = algorithm;
            let verifier =
                SessionTokens::new(signer.public_key_pem().as_bytes(), asymmetric).unwrap();
            let claims = verifier.admit(&sign(&signer), NOW).unwrap();
            assert_eq!(claims.subject.as_deref(), Some("alice"), "{algorithm:?}");
            assert_eq!(
                verifier.admit(&sign(&stranger), NOW),
                Err(TokenRefusal::BadSignature),
                "{algorithm:?}"
            );
            // An HS256 token "signed" with the public key itself (the algorithm
            // confusion attack) is refused: the algorithm is ours, not the token's.
            let confused = encode(
                &Header::new(Algorithm::HS256),
                &good(),
                &EncodingKey::from_secret(signer.public_key_pem().as_bytes()),
            )
            .unwrap();
            assert_eq!(
                verifier.admit(&confused, NOW),
                Err(TokenRefusal::BadSignature),
                "{algorithm:?}"
            );
        }
    }

    #[test]
    fn a_token_s_owner_is_its_subject_or_the_token_itself() {
        let verifier = tokens(false);
        let owner = |claims| verifier.verify(&mint(claims), NOW).unwrap().owner;
        // Two tokens for alice own the same sessions; bob's, and nameless ones, do not.
        assert_eq!(owner(good()), owner(with("jti", json!("another"))));
        assert_ne!(owner(good()), owner(with("sub", json!("bob"))));
        let nameless = without("sub");
        let mut another_nameless = nameless.clone();
        another_nameless["jti"] = json!("x");
        assert_ne!(owner(nameless.clone()), owner(good()));
        assert_ne!(owner(nameless), owner(another_nameless));
    }

    #[test]
    fn a_minted_token_verifies_with_every_claim_it_was_given() {
        let request = TokenRequest {
            audience: "ufrag-test".into(),
            issued_at_s: NOW,
            lifetime_s: 300,
            id: "mint-1".into(),
            claims: SessionClaims {
                subject: Some("bob".into()),
                route: Some("agent-b".into()),
                metadata: Some(json!({"locale": "fr"})),
            },
        };
        let token = super::mint(TokenAlgorithm::Hs256, SECRET, &request).unwrap();
        let verifier = tokens(true);
        assert_eq!(verifier.admit(&token, NOW + 1), Ok(request.claims.clone()));
        assert_eq!(verifier.admit(&token, NOW + 2), Err(TokenRefusal::Reused));
        assert_eq!(
            tokens(false).admit(&token, NOW + 300 + CLOCK_LEEWAY_S + 1),
            Err(TokenRefusal::Expired)
        );
    }

    #[test]
    fn keys_and_rules_are_checked_when_the_verifier_is_made() {
        assert!(SessionTokens::new(b"short\n", rules(false)).is_err());
        let mut long = rules(false);
        long.max_lifetime_s = MAX_LIFETIME_S + 1;
        assert!(SessionTokens::new(SECRET, long).is_err());
        let mut es = rules(false);
        es.algorithm = TokenAlgorithm::Es256;
        assert!(SessionTokens::new(b"not pem", es).is_err());
        let mut ed = rules(false);
        ed.algorithm = TokenAlgorithm::Eddsa;
        assert!(SessionTokens::new(b"not pem", ed).is_err());
    }

    #[test]
    fn the_protocol_document_gives_every_refusal_its_status() {
        let specification = include_str!("../../docs/model-protocol.md");
        for reason in TokenRefusal::ALL {
            let row = format!("| {} | `{}` |", reason.status(), reason.label());
            assert!(
                specification.contains(&row),
                "{row} is not in docs/model-protocol.md"
            );
        }
        assert!(specification.contains("262,144") && MAX_REMEMBERED == 262_144);
        assert!(specification.contains(&format!("at most {MAX_SUBJECT_LEN} bytes")));
        assert!(specification.contains(&format!("1 to {MAX_ROUTE_LEN} of")));
        assert!(specification.contains(&format!("{} KiB", MAX_METADATA_LEN / 1024)));
    }

    #[test]
    fn only_a_bearer_credential_is_presented() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(None), None);
    }
}
