//! The model protocol: what the transceiver and a model backend say to each other, and
//! how it travels. Types and codec only, no I/O: the transceiver's bridge and the
//! reference servers (`ufrag-model-servers`) both build on it, and a backend written in
//! Rust can too.
//!
//! - [`messages`]: [`messages::ModelInput`] (transceiver → model) and
//!   [`messages::ModelOutput`] (model → transceiver), the session context and statistics
//!   they carry, and the limits on marks.
//! - [`audio`]: the audio formats a backend may choose in its hello (Opus, or PCM16 at
//!   16, 24 or 48 kHz).
//! - [`wire`]: version 1 on a WebSocket: the hellos, JSON text messages and binary
//!   audio, with every refusal named.
//! - [`bearer`]: the shared bearer token a backend may require, checked in constant time.
#![forbid(unsafe_code)]

pub mod audio;
pub mod bearer;
pub mod messages;
pub mod wire;
