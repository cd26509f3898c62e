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
use ufrag_common::hint::{RANDOM_LEN, RoutingHint};
use ufrag_common::runtime::keys::SharedKeys;

use crate::error::SignalError;
use crate::model::SessionId;
use crate::session::{Advertised, Session};

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
        let target = RoutingHint {
            cluster: self.cluster,
            transceiver: self.hint_target,
        };
        let keys = self.keys.current();
        let ufrag = keys.mint(&target, random);
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
        let (session, answer) = Session::accept(
            id,
            offer,
            creds,
            self.advertise,
            self.dtls_cert.clone(),
            now,
        )?;
        Ok(NewSession {
            session,
            ufrag,
            answer,
        })
    }
}
