//! The sans-IO core both relay backends share: everything a relay decides about a
//! datagram, and nothing that touches a socket or a clock.
//!
//! - [`demux`]: RFC 7983 first-byte classification.
//! - [`stun`]: a borrowed STUN view (header, attributes, USERNAME, FINGERPRINT,
//!   MESSAGE-INTEGRITY) and a writer for Binding Requests.
//! - [`ice_chars`]: bytes ↔ ICE characters.
//! - [`hint`]: the routing hint in the server ufrag, and the stateless ICE password.
//! - [`frame`]: the relay ↔ transceiver frame header.
//! - [`bundle`]: several frames in one internal datagram (frame version 2).
//! - [`flow`]: the fixed-capacity flow table with idle expiry.
//! - [`admission`]: what one session, source prefix and worker may cost in new flows.
//! - [`replay`]: the filter that admits a Binding Request once per relay, whichever
//!   worker sees it.
//! - [`forward`]: the forwarding decision for one datagram, shared by both backends.
//! - [`route_lookups`]: what asking the route cache may cost (rates, a memory of misses).
//! - [`proven_prefixes`]: how many proven flows each client prefix holds, against its cap.
//! - [`rfc4571`]: ICE-TCP framing: whole messages split out of a receive buffer in place.
//! - [`wire`]: the wire below ours: Ethernet, IP and UDP lengths and offsets, checksums,
//!   addresses and source prefixes.
//! - [`returns`]: the live flows' return paths, shared lock-free by one relay's workers
//!   (relay-afxdp: a transceiver's reply may reach any worker).
//! - [`execute`]: carrying a decision out through a backend's egress, and counting every
//!   datagram exactly once.
//! - [`config`]: the relay configuration (TOML + flags) and its validation; the files
//!   and variables it names are read through [`config::ConfigSources`].
//! - [`reasons`]: why a datagram was dropped, a cache lookup failed or a connection
//!   closed, each with its stable metric label.
//! - [`metrics`]: the counters each worker keeps and the metric families they form.
//! - [`runbook`]: what an operator does about each drop and close reason.
//! - `runtime` (feature `runtime`): the I/O parts both relay binaries share: Redis route
//!   cache, HTTP endpoints and the `/metrics` exposition, signals and drain, CPU pinning.
//!
//! Per-packet paths (classify, parse, verify, look up) never allocate, never panic on any
//! input and take time as an argument; tests assert all three.
#![forbid(unsafe_code)]

pub mod admission;
pub mod bundle;
pub mod config;
pub mod config_file;
pub mod demux;
pub mod execute;
pub mod flow;
pub mod forward;
pub mod frame;
pub mod hint;
pub mod ice_chars;
pub mod metrics;
pub mod proven_prefixes;
pub mod reasons;
pub mod replay;
pub mod returns;
pub mod rfc4571;
pub mod route_lookups;
pub mod runbook;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod stun;
pub mod wire;
