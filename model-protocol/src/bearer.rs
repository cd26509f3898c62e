//! Bearer tokens checked without telling a guesser anything through timing: neither how
//! much of a guess was right nor how long the token is.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A shared secret that peers present as `Authorization: Bearer <token>`, kept only as
/// its SHA-256 digest. A presented token is hashed and the two digests compared in
/// constant time: comparing the tokens themselves returns at once on a length mismatch,
/// which tells a guesser the token's length.
#[derive(Clone)]
pub struct BearerToken {
    digest: [u8; 32],
}

impl BearerToken {
    /// The token peers must present.
    pub fn new(token: &str) -> Self {
        BearerToken {
            digest: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// Whether `presented` is the token.
    pub fn matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(digest.ct_eq(&self.digest))
    }

    /// Whether an `Authorization` header's value (if any) presents the token.
    pub fn authorizes(&self, authorization: Option<&str>) -> bool {
        presented(authorization).is_some_and(|presented| self.matches(presented))
    }
}

/// What an `Authorization` header's value (if any) presents after `Bearer `, as written.
pub fn presented(authorization: Option<&str>) -> Option<&str> {
    authorization.and_then(|value| value.strip_prefix("Bearer "))
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(redacted)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_itself_authorizes() {
        let token = BearerToken::new("s3cret-token");
        assert!(token.authorizes(Some("Bearer s3cret-token")));
        for wrong in [
            None,
            Some(""),
            Some("s3cret-token"),
            Some("Bearer "),
            Some("Bearer s3cret"),
            Some("Bearer s3cret-token-and-more"),
            Some("Bearer S3cret-token"),
            Some("bearer s3cret-token"),
            Some("Basic s3cret-token"),
        ] {
            assert!(!token.authorizes(wrong), "{wrong:?}");
        }
        assert_eq!(format!("{token:?}"), "BearerToken(redacted)");
    }
}
