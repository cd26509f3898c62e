//! The transceiver: WebRTC sessions on str0m behind the relay. WHIP-style signaling
//! ([`signaling`]) on a bounded HTTP transport ([`http`]); per worker one UDP socket and its I/O ([`worker`]) around a sans-IO
//! table of sessions with O(1) demux and one timer heap ([`session_table`]), each session
//! in str0m's input/`poll_output` shape ([`session`]) playing the model's audio at real
//! time ([`playout`]), built off the media path on the
//! signaling thread ([`setup`]); per-session credentials minted by the app's server
//! ([`session_token`]); the model seam and the built-in
//! echo model ([`model`]; the messages and their wire codec are the
//! `ufrag-model-protocol` crate's), metrics with enum reasons ([`metrics`]), the demo page, the
//! service that starts, drains and joins it all ([`service`]), and its command line
//! ([`cli`]) with the config file read as flags (`ufrag_common::config_file`); [`runbook`] says what
//! an operator does about each counted reason.
//!
//! Dependencies run one way (`scripts/import-circles.py` checks that no two modules name
//! each other, directly or around a circle): `service` → {`http`, `signaling`, `worker`};
//! `http` → `signaling`; `signaling` → `worker`'s handle; `worker` → {`setup`,
//! `session`}; `setup` → `session`; `session` → {`sdp`, `path_check`, `session_table`,
//! `playout`};
//! and below them all `error`, `random`, `model`, `metrics`, `page`, `per_address`,
//! `client_address`, `session_token` (→ `model`); `model_bridge` → {`model`, `pcm`}
//! (PCM16 audio for a backend that asks for it);
//! `cli` → {`service`}; `runbook` → {`metrics`, `session_token`}.
#![forbid(unsafe_code)]

pub mod cli;
pub mod client_address;
pub mod error;
pub mod http;
pub mod metrics;
pub mod model;
pub mod model_bridge;
pub mod page;
pub mod path_check;
pub mod pcm;
pub mod per_address;
pub mod playout;
pub mod proxy_protocol;
pub mod random;
pub mod runbook;
pub mod sdp;
pub mod service;
pub mod session;
pub mod session_table;
pub mod session_token;
pub mod setup;
pub mod signaling;
pub mod worker;
