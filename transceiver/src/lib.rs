//! The transceiver: WebRTC sessions on str0m behind the relay. WHIP-style signaling
//! ([`signaling`]), one UDP socket per worker holding many sessions with O(1) demux
//! ([`worker`]), the model seam and the built-in echo model ([`model`]), metrics, and the
//! demo page.
#![forbid(unsafe_code)]

pub mod metrics;
pub mod model;
pub mod page;
pub mod signaling;
pub mod worker;
