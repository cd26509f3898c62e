//! relay-mio: the production relay on plain sockets. `SO_REUSEPORT` workers pinned to
//! cores, a mio event loop each, batched `recvmmsg`/`sendmmsg`, and the forwarding
//! decision, route cache, metrics and lifecycle shared with the AF_XDP backend through
//! `ufrag-common`. With TCP VIPs configured, each worker also serves ICE over TCP
//! ([`tcp`]) for clients whose networks block UDP. Dependencies run one way:
//! `relay` → `worker` → `tcp` → {`outbox`, `token`}.
//!
//! The batched socket I/O (the only unsafe code it needs) lives in `ufrag-udp`, which the
//! perf load tools share; this crate has none.
#![forbid(unsafe_code)]

pub mod cli;
mod outbox;
pub mod relay;
pub mod tcp;
mod token;
pub mod worker;
