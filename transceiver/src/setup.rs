//! Session setup, off the media path: minting a server ufrag (the routing hint to one
//! worker) and its password, and building a session with its SDP answer. Building a
//! str0m `Rtc` costs ≈ 0.6 ms of CPU (its DTLS library self-tests the crypto provider
//! on every context, and a fresh certificate would add 0.13 ms), so it runs on the
//! signaling thread that took the POST; the worker only inserts the finished session.

use std::net::SocketAddr;
use std::time::Instant;

use str0m::IceCreds;
use str0m::change::SdpOffer;
use str0m::config::DtlsCert;
use ufrag_common::hint::{RANDOM_LEN, RoutingHint, unix_seconds, unverified_minting};
use ufrag_common::runtime::keys::SharedKeys;

use crate::error::SignalError;
use crate::session::{Advertised, Session, SessionTuning};
use ufrag_model_protocol::messages::SessionId;

/// Everything needed to set up sessions for one worker.
#[derive(Debug, Clone)]
pub struct SessionMint {
    /// Hint keys: the current one mints ufrags and derives passwords. They may change
    /// while the process runs (a rotation): each session takes the keys of its moment.
    pub keys: SharedKeys,
    /// The cluster written into hints.
    pub cluster: u16,
    /// The worker's socket: where relays must send this worker's frames.
    pub hint_target: SocketAddr,
    /// The candidates advertised: the relay VIP (or the worker in direct mode), and the
    /// relay's TCP VIP when ICE-TCP is offered.
    pub advertise: Advertised,
    /// The process's DTLS certificate.
    pub dtls_cert: DtlsCert,
    /// How sessions are run (their quality reports, their playout buffer).
    pub tuning: SessionTuning,
}

/// A session built by [`SessionMint::session`], ready for its worker.
#[derive(Debug)]
pub struct NewSession {
    /// The session.
    pub session: Session,
    /// Its server ufrag (the worker indexes it).
    pub ufrag: String,
    /// The SDP answer for the client.
    pub answer: String,
}

impl SessionMint {
    /// A server ufrag carrying a routing hint to this worker, with `random` bits, and
    /// the password derived from it.
    pub fn credentials(&self, random: [u8; RANDOM_LEN]) -> IceCreds {
        self.credentials_minted(unix_seconds(std::time::SystemTime::now()), random)
    }

    /// The credentials of an ICE restart of the session whose server ufrag is `old`: a
    /// new ufrag with the same session bytes (so relays count its flows as the same
    /// session's), minted a second after the old one at the earliest (so it differs).
    /// `random` only for an `old` that is no hint.
    pub fn restart_credentials(&self, old: &str, random: [u8; RANDOM_LEN]) -> IceCreds {
        let now_s = unix_seconds(std::time::SystemTime::now());
        let (minted, session) = match unverified_minting(old.as_bytes()) {
            Some((old_minted, session)) => (now_s.max(old_minted.saturating_add(1)), session),
            None => (now_s, random),
        };
        self.credentials_minted(minted, session)
    }

    /// A server ufrag carrying a routing hint to this worker, minted at `minted_unix_s`
    /// with `random` bits, and its password.
    fn credentials_minted(&self, minted_unix_s: u32, random: [u8; RANDOM_LEN]) -> IceCreds {
        let target = RoutingHint {
            cluster: self.cluster,
            transceiver: self.hint_target,
        };
        let keys = self.keys.current();
        let ufrag = keys.encode(&target, minted_unix_s, random);
        let pass = keys
            .ice_password(keys.current().id(), ufrag.as_bytes())
            .expect("the current key derives passwords");
        IceCreds {
            ufrag: ufrag.as_str().to_string(),
            pass: pass.as_str().to_string(),
        }
    }

    /// Session `id` answering `offer`, with fresh credentials from `random`.
    pub fn session(
        &self,
        id: SessionId,
        offer: SdpOffer,
        random: [u8; RANDOM_LEN],
        now: Instant,
    ) -> Result<NewSession, SignalError> {
        let creds = self.credentials(random);
        let ufrag = creds.ufrag.clone();
        let (session, answer) = Session::accept_tuned(
            id,
            offer,
            creds,
            self.advertise,
            self.dtls_cert.clone(),
            now,
            self.tuning,
        )?;
        Ok(NewSession {
            session,
            ufrag,
            answer,
        })
    }
}
