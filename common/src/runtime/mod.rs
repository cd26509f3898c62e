//! The operational parts both relay binaries share, behind the `runtime` feature so the
//! sans-IO core stays free of I/O dependencies: the host's files and environment as the
//! configuration reads them ([`host`]), the Redis route cache, the HTTP endpoints
//! (`/metrics`, `/healthz`, `/readyz`) and the `/metrics` exposition, signal handling and
//! drain, CPU pinning, and hint keys reloaded without a restart.

pub mod cache;
pub mod exposition;
pub mod host;
pub mod http;
pub mod keys;
pub mod lifecycle;
