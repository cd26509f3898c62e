//! The transceiver: WebRTC sessions on str0m behind the relay. WHIP-style signaling
//! ([`signaling`]) on a bounded HTTP transport ([`http`]); per worker one UDP socket and its I/O ([`worker`]) around a sans-IO
//! table of sessions with O(1) demux and one timer heap ([`session_table`]), each session
//! in str0m's input/`poll_output` shape ([`session`]), built off the media path on the
//! signaling thread ([`setup`]); the model seam and the built-in
//! echo model ([`model`]), metrics with enum reasons ([`metrics`]), the demo page, and
//! the service that starts, drains and joins it all ([`service`]).
#![forbid(unsafe_code)]

pub mod http;
pub mod metrics;
pub mod model;
pub mod page;
pub mod path_check;
pub mod per_address;
pub mod service;
pub mod session;
pub mod session_table;
pub mod setup;
pub mod signaling;
pub mod worker;
