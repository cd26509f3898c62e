//! Return routability for one session's send path: media and DTLS leave only toward a
//! client address that has shown it receives.
//!
//! # Why
//!
//! The session's own client holds the ICE password, so it can sign a check with
//! USE-CANDIDATE from a spoofed address V; str0m follows the nomination and would send
//! the model's audio (about 50 packets a second, for as long as a spoofed check every few
//! seconds keeps it there) to V: reflection with a large gain.
//!
//! # Rule
//!
//! - Until the session connects, every datagram goes where str0m sends it: the DTLS
//!   handshake is a few small flights, and completing it proves the client saw the
//!   server's flight on the path it was sent on, which becomes the *verified* path.
//! - After that, STUN (answers to the client's checks: one small datagram per request,
//!   no gain) goes where str0m sends it; any other datagram for a path that is not the
//!   verified one goes to the verified path instead, and the new path is probed: a
//!   Binding Request signed with the client's ICE password, whose random transaction id
//!   only a receiver at that address can echo. Its success response from that very path
//!   makes it the verified path (a NAT rebinding costs one round trip of media).
//! - Probes to one path leave at most once per [`PROBE_EVERY`].
//!
//! Sans-IO: the worker passes time in and sends what this says.

use std::time::{Duration, Instant};

use crate::session_table::ClientPath;

/// The least time between two probes of one path.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Where one of the session's datagrams goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// Where str0m sent it.
    AsSent,
    /// To the verified path instead of an unverified one.
    Verified(ClientPath),
}

/// One outstanding probe.
#[derive(Clone, Copy, Debug)]
struct Probe {
    path: ClientPath,
    transaction_id: [u8; 12],
    sent_at: Instant,
}

/// One session's verified path and outstanding probe.
#[derive(Debug, Default)]
pub struct PathCheck {
    /// The path of the last datagram before the session connected, then the path that
    /// last proved it receives.
    verified: Option<ClientPath>,
    connected: bool,
    probe: Option<Probe>,
}

impl PathCheck {
    /// Where a datagram str0m sends to `path` goes (`stun`: it is a STUN message), and
    /// whether `path` should be probed now (the caller sends a probe and reports its
    /// transaction with [`PathCheck::probed`]).
    pub fn route(&mut self, path: ClientPath, stun: bool, now: Instant) -> (Destination, bool) {
        if !self.connected {
            if !stun {
                self.verified = Some(path);
            }
            return (Destination::AsSent, false);
        }
        let verified = match self.verified {
            Some(verified) if verified != path && !stun => verified,
            _ => return (Destination::AsSent, false),
        };
        let probe_due = self.probe.is_none_or(|probe| {
            probe.path != path || now.saturating_duration_since(probe.sent_at) >= PROBE_EVERY
        });
        (Destination::Verified(verified), probe_due)
    }

    /// The session connected: the path its handshake went over is verified.
    pub fn connected(&mut self) {
        self.connected = true;
    }

    /// A probe with `transaction_id` went to `path` at `now`.
    pub fn probed(&mut self, path: ClientPath, transaction_id: [u8; 12], now: Instant) {
        self.probe = Some(Probe {
            path,
            transaction_id,
            sent_at: now,
        });
    }

    /// A STUN success response with `transaction_id` came from `path`: whether it
    /// answers the outstanding probe (then `path` is verified from now on).
    pub fn answered(&mut self, path: ClientPath, transaction_id: &[u8; 12]) -> bool {
        let Some(probe) = self.probe else {
            return false;
        };
        if probe.path != path || probe.transaction_id != *transaction_id {
            return false;
        }
        self.verified = Some(path);
        self.probe = None;
        true
    }

    /// The path media may go to now, if any.
    pub fn verified(&self) -> Option<ClientPath> {
        self.verified
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(client: &str) -> ClientPath {
        ClientPath {
            client: client.parse().unwrap(),
            local: "203.0.113.1:3478".parse().unwrap(),
        }
    }

    #[test]
    fn media_stays_on_the_verified_path_until_the_new_one_answers_a_probe() {
        let t0 = Instant::now();
        let (real, spoofed) = (path("198.51.100.7:5000"), path("192.0.2.66:9"));
        let mut check = PathCheck::default();
        // The handshake goes where str0m sends it.
        assert_eq!(check.route(real, false, t0), (Destination::AsSent, false));
        check.connected();
        assert_eq!(check.verified(), Some(real));
        // A forged nomination moved str0m to `spoofed`: media stays on `real`, one probe.
        assert_eq!(
            check.route(spoofed, false, t0),
            (Destination::Verified(real), true)
        );
        check.probed(spoofed, [7; 12], t0);
        assert_eq!(
            check.route(spoofed, false, t0),
            (Destination::Verified(real), false)
        );
        // Answers to checks are not held back.
        assert_eq!(check.route(spoofed, true, t0), (Destination::AsSent, false));
        // A wrong transaction, or the right one from elsewhere, verifies nothing.
        assert!(!check.answered(spoofed, &[8; 12]));
        assert!(!check.answered(path("192.0.2.67:9"), &[7; 12]));
        // The probe is repeated at most every PROBE_EVERY.
        let later = t0 + PROBE_EVERY;
        assert_eq!(
            check.route(spoofed, false, later),
            (Destination::Verified(real), true)
        );
        // A real client at the new address answers: media follows.
        check.probed(spoofed, [9; 12], later);
        assert!(check.answered(spoofed, &[9; 12]));
        assert_eq!(
            check.route(spoofed, false, later),
            (Destination::AsSent, false)
        );
        assert_eq!(check.verified(), Some(spoofed));
    }
}
