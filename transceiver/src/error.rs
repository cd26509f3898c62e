//! The errors signaling reports for a session it could not set up, shared by the session,
//! its setup, the worker and signaling (which turns them into HTTP statuses).

/// Why signaling failed, as the HTTP layer reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalError {
    /// The offer is unusable (400): one-line reason.
    BadOffer(String),
    /// No room for another session (503).
    Full,
}

impl std::fmt::Display for SignalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignalError::BadOffer(why) => write!(f, "bad offer: {why}"),
            SignalError::Full => f.write_str("no room for another session"),
        }
    }
}

impl std::error::Error for SignalError {}
