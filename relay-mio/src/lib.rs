//! relay-mio: the production relay on plain sockets. `SO_REUSEPORT` workers pinned to
//! cores, a mio event loop each, batched `recvmmsg`/`sendmmsg`, and the forwarding
//! decision, route cache, metrics and lifecycle shared with the AF_XDP backend through
//! `ufrag-common`.
//!
//! The library half exists so that the `perf` suite can reuse the batched socket I/O
//! ([`mmsg`]) for its bare forwarder and load tools.

pub mod mmsg;
pub mod relay;
pub mod worker;
