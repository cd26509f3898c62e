//! WebRTC sessions on str0m behind the relay, WHIP signaling and the echo model (issue 4).
//!
//! Empty until its issue lands: nothing here pretends to work yet.
#![forbid(unsafe_code)]
