//! Return routability for one session's send path: DTLS and media leave only toward a
//! client address that has answered a probe, so something there receives.
//!
//! # Why
//!
//! The session's own client holds the ICE password, so it can sign a check with
//! USE-CANDIDATE from a spoofed address V; str0m follows the nomination and sends there
//! whatever it sends next: the DTLS flight (about 1 KB, retransmitted on a timer) before
//! the session connects, the model's audio (about 50 packets a second) after. Sent as
//! str0m chose, that is reflection with a large gain, and to the relay it looks like a
//! session's path (the transceiver's DTLS on it), so a flow squatted from a spoofed
//! address would count as proven.
//!
//! # Rule
//!
//! - A path is *verified* only when it answers a probe: a Binding Request signed with the
//!   client's ICE password, whose random transaction id only a receiver at that address
//!   can echo. Nothing else verifies a path, before the session connects or after.
//! - STUN (answers to the client's checks: one small datagram per request) goes where
//!   str0m sends it. Any other datagram goes to the verified path: to the path str0m chose
//!   if that one is verified, else to the session's verified path instead. With no
//!   verified path yet, it is *held* (at most [`MAX_HELD_DATAGRAMS`] and
//!   [`MAX_HELD_BYTES`], the rest dropped and counted) until the path answers, then sent.
//! - A path str0m sends to and that is not verified is probed, at most once per
//!   [`PROBE_EVERY`] in a row, and only while it has *credit*: the bytes it has sent the session
//!   less the bytes sent to it. So toward an address that has not shown it receives, the
//!   transceiver sends no more bytes than it received from it, and only STUN: a spoofed
//!   source gains nothing by amplification.
//! - Consent (RFC 7675): the verified path is probed again about every
//!   [`CONSENT_EVERY`]; when it has answered none for [`CONSENT_LOST_AFTER`], it stops
//!   being verified, and media waits as above until a path answers.
//!
//! Sans-IO: the worker passes time in and sends what this says.

use std::time::{Duration, Instant};

use ufrag_common::frame::Transport;

use crate::session_table::ClientPath;

/// The least time between two probes in a row of one path that has not answered yet (one
/// probe is outstanding at a time: a probe of another path replaces it; the bytes any
/// path is sent stay within its credit).
pub const PROBE_EVERY: Duration = Duration::from_millis(500);
/// About how often the verified path is probed for consent (RFC 7675 §5.1: 5 s, each
/// interval drawn from 0.8 to 1.2 times it).
pub const CONSENT_EVERY: Duration = Duration::from_secs(5);
/// A verified path that has answered no probe for this long loses consent (RFC 7675).
pub const CONSENT_LOST_AFTER: Duration = Duration::from_secs(30);
/// The most bytes of credit one unverified path can bank (a few checks' worth).
pub const MAX_CREDIT: usize = 1500;
/// Unverified paths whose credit is kept at once (the oldest is forgotten).
pub const CREDITED_PATHS: usize = 8;
/// Datagrams held for a path until it answers its probe.
pub const MAX_HELD_DATAGRAMS: usize = 8;
/// Bytes held for a path until it answers its probe (a DTLS server flight fits).
pub const MAX_HELD_BYTES: usize = 8 * 1024;

/// Where one of the session's datagrams goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// Where str0m sent it (STUN, or a verified path: [`Destination::sent_verified`]).
    AsSent {
        /// The path has answered a probe.
        verified: bool,
    },
    /// To the verified path (over its own transport) instead of the unverified one str0m
    /// chose.
    Verified(ClientPath, Transport),
    /// Held until the path answers its probe ([`PathCheck::take_held`]).
    Held,
    /// Not sent: no verified path, and the hold is full.
    Dropped,
}

impl Destination {
    /// Whether the datagram goes to a path that has answered a probe: the frame says so
    /// to the relay, which counts only such frames as the transceiver's half of a flow's
    /// proof.
    pub fn sent_verified(self) -> bool {
        matches!(
            self,
            Destination::AsSent { verified: true } | Destination::Verified(..)
        )
    }
}

/// One outstanding probe.
#[derive(Clone, Copy, Debug)]
struct Probe {
    path: ClientPath,
    transaction_id: [u8; 12],
    sent_at: Instant,
}

/// The path media goes to, and its consent.
#[derive(Clone, Copy, Debug)]
struct VerifiedPath {
    path: ClientPath,
    transport: Transport,
    /// When it last answered a probe.
    answered_at: Instant,
    /// When the next consent probe is due.
    consent_due: Instant,
}

/// A datagram held for a path until it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldDatagram {
    /// The transport it goes over.
    pub transport: Transport,
    /// The datagram.
    pub contents: Vec<u8>,
}

/// What is held for one path until it answers.
#[derive(Debug)]
struct Hold {
    path: ClientPath,
    datagrams: Vec<HeldDatagram>,
    bytes: usize,
}

/// What the session must do for its paths now ([`PathCheck::upkeep`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upkeep {
    /// Nothing.
    Nothing,
    /// Probe the verified path for consent ([`PathCheck::probed`] once sent).
    ConsentProbe(ClientPath, Transport),
    /// The verified path answered no probe for [`CONSENT_LOST_AFTER`]: it is verified no
    /// more.
    ConsentLost(ClientPath),
}

/// One session's verified path, outstanding probes and held datagrams.
#[derive(Debug, Default)]
pub struct PathCheck {
    verified: Option<VerifiedPath>,
    /// Credit of the unverified paths heard from most recently, oldest first (at most
    /// [`CREDITED_PATHS`]: a client checks a few candidate pairs at once).
    credits: Vec<(ClientPath, usize)>,
    /// What waits for the unverified path str0m sends to.
    hold: Option<Hold>,
    /// The outstanding probe of an unverified path.
    probe: Option<Probe>,
    /// The outstanding consent probe of the verified path.
    consent: Option<Probe>,
}

impl PathCheck {
    /// `bytes` authenticated bytes came from `path` (a signed check, or DTLS or media
    /// str0m took): credit toward probing it, if it is not verified.
    pub fn heard(&mut self, path: ClientPath, bytes: usize) {
        if self.is_verified(path) {
            return;
        }
        let at = match self.credits.iter().position(|(p, _)| *p == path) {
            Some(at) => at,
            None => {
                if self.credits.len() == CREDITED_PATHS {
                    self.credits.remove(0);
                }
                self.credits.push((path, 0));
                self.credits.len() - 1
            }
        };
        let (_, credit) = &mut self.credits[at];
        *credit = (*credit + bytes).min(MAX_CREDIT);
    }

    /// Where `contents`, which str0m sends to `path` over `transport`, goes (`stun`: it
    /// is a STUN message). A held datagram is copied and kept here.
    pub fn route(
        &mut self,
        path: ClientPath,
        transport: Transport,
        contents: &[u8],
        stun: bool,
    ) -> Destination {
        if self.is_verified(path) {
            return Destination::AsSent { verified: true };
        }
        if stun {
            // An answer to the path's own check: one datagram per request, and smaller.
            self.spend(path, contents.len());
            return Destination::AsSent { verified: false };
        }
        if let Some(verified) = self.verified {
            return Destination::Verified(verified.path, verified.transport);
        }
        // A flight for another path is stale now: str0m sends its next one here.
        let hold = match &mut self.hold {
            Some(hold) if hold.path == path => hold,
            other => other.insert(Hold {
                path,
                datagrams: Vec::new(),
                bytes: 0,
            }),
        };
        let fits = hold.datagrams.len() < MAX_HELD_DATAGRAMS
            && hold.bytes + contents.len() <= MAX_HELD_BYTES;
        if !fits {
            return Destination::Dropped;
        }
        hold.bytes += contents.len();
        hold.datagrams.push(HeldDatagram {
            transport,
            contents: contents.to_vec(),
        });
        Destination::Held
    }

    /// Whether a probe of `len` bytes may go to the unverified `path` at `now`: none has
    /// in the last [`PROBE_EVERY`], and the path's credit covers it.
    pub fn may_probe(&self, path: ClientPath, len: usize, now: Instant) -> bool {
        if self.is_verified(path) {
            return false;
        }
        let rested = self.probe.is_none_or(|probe| {
            probe.path != path || now.saturating_duration_since(probe.sent_at) >= PROBE_EVERY
        });
        let credit = (self.credits.iter())
            .find(|(p, _)| *p == path)
            .map_or(0, |(_, credit)| *credit);
        rested && credit >= len
    }

    /// A probe of `len` bytes with `transaction_id` went to `path` at `now`: a consent
    /// probe if `path` is the verified path, else a probe that spends its credit.
    pub fn probed(&mut self, path: ClientPath, transaction_id: [u8; 12], len: usize, now: Instant) {
        let probe = Probe {
            path,
            transaction_id,
            sent_at: now,
        };
        match &mut self.verified {
            Some(verified) if verified.path == path => {
                self.consent = Some(probe);
                verified.consent_due = now + consent_interval(&transaction_id);
            }
            _ => {
                self.spend(path, len);
                self.probe = Some(probe);
            }
        }
    }

    /// A STUN success response with `transaction_id` came over `transport` from `path`
    /// at `now`: whether it answers an outstanding probe. If it does, `path` is the
    /// verified path from now on (the held datagrams are for it: [`PathCheck::take_held`]).
    pub fn answered(
        &mut self,
        path: ClientPath,
        transport: Transport,
        transaction_id: &[u8; 12],
        now: Instant,
    ) -> bool {
        let answers = |probe: Option<Probe>| {
            probe.is_some_and(|p| p.path == path && p.transaction_id == *transaction_id)
        };
        if answers(self.consent) {
            self.consent = None;
            if let Some(verified) = &mut self.verified {
                verified.answered_at = now;
            }
            return true;
        }
        if !answers(self.probe) {
            return false;
        }
        self.probe = None;
        self.verified = Some(VerifiedPath {
            path,
            transport,
            answered_at: now,
            consent_due: now + consent_interval(transaction_id),
        });
        self.consent = None;
        self.credits.retain(|(p, _)| *p != path);
        true
    }

    /// The datagrams held for `path`, now that it is verified (else none).
    pub fn take_held(&mut self, path: ClientPath) -> Vec<HeldDatagram> {
        if !self.is_verified(path) {
            return Vec::new();
        }
        match self.hold.take_if(|hold| hold.path == path) {
            Some(hold) => hold.datagrams,
            None => Vec::new(),
        }
    }

    /// What is due at `now`: a consent probe of the verified path, or its loss.
    pub fn upkeep(&mut self, now: Instant) -> Upkeep {
        let Some(verified) = self.verified else {
            return Upkeep::Nothing;
        };
        if now.saturating_duration_since(verified.answered_at) >= CONSENT_LOST_AFTER {
            self.verified = None;
            self.consent = None;
            return Upkeep::ConsentLost(verified.path);
        }
        if now >= verified.consent_due {
            // Asked again after PROBE_EVERY should this probe not go out; its sending
            // sets the next interval ([`PathCheck::probed`]).
            if let Some(verified) = &mut self.verified {
                verified.consent_due = now + PROBE_EVERY;
            }
            return Upkeep::ConsentProbe(verified.path, verified.transport);
        }
        Upkeep::Nothing
    }

    /// When [`PathCheck::upkeep`] next has something to do, if ever.
    pub fn next_upkeep(&self) -> Option<Instant> {
        self.verified.map(|verified| {
            verified
                .consent_due
                .min(verified.answered_at + CONSENT_LOST_AFTER)
        })
    }

    /// The path media may go to now, if any.
    pub fn verified(&self) -> Option<ClientPath> {
        self.verified.map(|verified| verified.path)
    }

    /// The verified path and the transport it is reached over, if any.
    pub fn verified_over(&self) -> Option<(ClientPath, Transport)> {
        self.verified
            .map(|verified| (verified.path, verified.transport))
    }

    fn is_verified(&self, path: ClientPath) -> bool {
        self.verified.is_some_and(|verified| verified.path == path)
    }

    /// `bytes` went to the unverified `path`: its credit shrinks by as much.
    fn spend(&mut self, path: ClientPath, bytes: usize) {
        if let Some((_, credit)) = self.credits.iter_mut().find(|(p, _)| *p == path) {
            *credit = credit.saturating_sub(bytes);
        }
    }
}

/// The time to the next consent probe: [`CONSENT_EVERY`] times 0.8 to 1.2, drawn from
/// the (random) transaction id of the probe before it.
fn consent_interval(transaction_id: &[u8; 12]) -> Duration {
    let spread = u64::from(u16::from_be_bytes([transaction_id[10], transaction_id[11]]));
    let every = CONSENT_EVERY.as_millis() as u64;
    Duration::from_millis(every * 4 / 5 + every * 2 / 5 * spread / u64::from(u16::MAX))
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

    const UDP: Transport = Transport::Udp;
    const PROBE_LEN: usize = 120;

    /// Verifies `path` the only way there is: a probe, answered.
    fn verify(check: &mut PathCheck, path: ClientPath, id: u8, now: Instant) {
        check.heard(path, PROBE_LEN);
        assert!(check.may_probe(path, PROBE_LEN, now));
        check.probed(path, [id; 12], PROBE_LEN, now);
        assert!(check.answered(path, UDP, &[id; 12], now));
    }

    #[test]
    fn before_any_answer_dtls_is_held_and_released_to_the_path_that_answers() {
        let t0 = Instant::now();
        let real = path("198.51.100.7:5000");
        let mut check = PathCheck::default();
        // The answer to the client's check goes out; the DTLS flight waits.
        assert_eq!(
            check.route(real, UDP, &[0; 60], true),
            Destination::AsSent { verified: false }
        );
        assert_eq!(check.route(real, UDP, &[22; 900], false), Destination::Held);
        assert_eq!(check.route(real, UDP, &[22; 300], false), Destination::Held);
        // No credit yet (nothing heard): no probe.
        assert!(!check.may_probe(real, PROBE_LEN, t0));
        // The client's ClientHello (200 bytes) pays for one probe.
        check.heard(real, 200);
        assert!(check.may_probe(real, PROBE_LEN, t0));
        check.probed(real, [5; 12], PROBE_LEN, t0);
        assert!(
            !check.may_probe(real, PROBE_LEN, t0 + PROBE_EVERY),
            "credit spent"
        );
        // Nothing is released before the answer, and nothing to another path.
        assert!(check.take_held(real).is_empty());
        assert!(check.answered(real, UDP, &[5; 12], t0));
        let held = check.take_held(real);
        assert_eq!(
            held.iter().map(|h| h.contents.len()).collect::<Vec<_>>(),
            [900, 300]
        );
        assert_eq!(
            check.route(real, UDP, &[22; 100], false),
            Destination::AsSent { verified: true }
        );
    }

    #[test]
    fn the_hold_is_bounded_and_belongs_to_one_path() {
        let (a, b) = (path("198.51.100.7:5000"), path("192.0.2.66:9"));
        let mut check = PathCheck::default();
        for _ in 0..MAX_HELD_DATAGRAMS {
            assert_eq!(check.route(a, UDP, &[22; 100], false), Destination::Held);
        }
        assert_eq!(check.route(a, UDP, &[22; 100], false), Destination::Dropped);
        // A datagram for another path starts that path's hold afresh.
        assert_eq!(
            check.route(b, UDP, &[22; MAX_HELD_BYTES], false),
            Destination::Held
        );
        assert_eq!(check.route(b, UDP, &[22; 1], false), Destination::Dropped);
        // `a`'s datagrams are gone: if `a` answers now, nothing stale goes out.
        let t0 = Instant::now();
        verify(&mut check, a, 1, t0);
        assert!(check.take_held(a).is_empty());
    }

    #[test]
    fn an_unverified_path_is_sent_no_more_bytes_than_it_sent() {
        let t0 = Instant::now();
        let spoofed = path("192.0.2.66:9");
        let mut check = PathCheck::default();
        // A 100-byte check, answered with 64 bytes: 36 bytes of credit, no probe.
        check.heard(spoofed, 100);
        check.route(spoofed, UDP, &[0; 64], true);
        assert!(!check.may_probe(spoofed, PROBE_LEN, t0));
        // Timer-driven retransmissions earn nothing, however long they go on.
        for round in 0..100 {
            let now = t0 + PROBE_EVERY * round;
            assert_eq!(check.route(spoofed, UDP, &[22; 10], false), {
                if round < MAX_HELD_DATAGRAMS as u32 {
                    Destination::Held
                } else {
                    Destination::Dropped
                }
            });
            assert!(!check.may_probe(spoofed, PROBE_LEN, now));
        }
        // Credit is capped: a long quiet spell of sending cannot bank probes.
        check.heard(spoofed, 1_000_000);
        let mut probes = 0;
        for round in 0..100 {
            let now = t0 + PROBE_EVERY * round;
            if check.may_probe(spoofed, PROBE_LEN, now) {
                check.probed(spoofed, [round as u8; 12], PROBE_LEN, now);
                probes += 1;
            }
        }
        assert_eq!(probes, MAX_CREDIT / PROBE_LEN);
    }

    #[test]
    fn media_stays_on_the_verified_path_until_the_new_one_answers_a_probe() {
        let t0 = Instant::now();
        let (real, spoofed) = (path("198.51.100.7:5000"), path("192.0.2.66:9"));
        let mut check = PathCheck::default();
        verify(&mut check, real, 1, t0);
        // A forged nomination moved str0m to `spoofed`: media stays on `real`.
        assert_eq!(
            check.route(spoofed, UDP, &[0x80; 100], false),
            Destination::Verified(real, UDP)
        );
        assert!(Destination::Verified(real, UDP).sent_verified());
        // Answers to checks are not held back, and are not marked verified.
        assert_eq!(
            check.route(spoofed, UDP, &[1; 64], true),
            Destination::AsSent { verified: false }
        );
        // One probe paid for by the check, at most every PROBE_EVERY.
        check.heard(spoofed, 2 * PROBE_LEN);
        assert!(check.may_probe(spoofed, PROBE_LEN, t0));
        check.probed(spoofed, [7; 12], PROBE_LEN, t0);
        assert!(!check.may_probe(spoofed, PROBE_LEN, t0));
        assert!(check.may_probe(spoofed, PROBE_LEN, t0 + PROBE_EVERY));
        // A wrong transaction, or the right one from elsewhere, verifies nothing.
        assert!(!check.answered(spoofed, UDP, &[8; 12], t0));
        assert!(!check.answered(path("192.0.2.67:9"), UDP, &[7; 12], t0));
        assert_eq!(check.verified(), Some(real));
        // A real client at the new address answers: media follows.
        assert!(check.answered(spoofed, UDP, &[7; 12], t0));
        assert_eq!(
            check.route(spoofed, UDP, &[0x80; 100], false),
            Destination::AsSent { verified: true }
        );
        assert_eq!(check.verified(), Some(spoofed));
    }

    #[test]
    fn consent_is_probed_every_few_seconds_and_lost_after_thirty_unanswered() {
        let t0 = Instant::now();
        let real = path("198.51.100.7:5000");
        let mut check = PathCheck::default();
        assert_eq!(check.upkeep(t0), Upkeep::Nothing);
        assert_eq!(check.next_upkeep(), None);
        verify(&mut check, real, 1, t0);
        let due = check.next_upkeep().expect("a consent probe is scheduled");
        assert!(due >= t0 + CONSENT_EVERY * 4 / 5 && due <= t0 + CONSENT_EVERY * 6 / 5);
        assert_eq!(
            check.upkeep(due - Duration::from_millis(1)),
            Upkeep::Nothing
        );
        assert_eq!(check.upkeep(due), Upkeep::ConsentProbe(real, UDP));
        // Answered: consent renewed, the next probe scheduled.
        check.probed(real, [2; 12], PROBE_LEN, due);
        assert!(check.answered(real, UDP, &[2; 12], due));
        assert_eq!(check.upkeep(due), Upkeep::Nothing);
        // The client goes away: probes go out unanswered, then consent is lost.
        let lost_at = loop {
            let now = check.next_upkeep().expect("verified still");
            match check.upkeep(now) {
                Upkeep::ConsentProbe(p, _) => check.probed(p, [3; 12], PROBE_LEN, now),
                Upkeep::ConsentLost(p) => {
                    assert_eq!(p, real);
                    break now;
                }
                Upkeep::Nothing => panic!("woken for nothing at {now:?}"),
            }
        };
        assert_eq!(lost_at.duration_since(due), CONSENT_LOST_AFTER);
        assert_eq!(check.verified(), None);
        // Media now waits for a path to answer again.
        assert_eq!(
            check.route(real, UDP, &[0x80; 100], false),
            Destination::Held
        );
    }
}
