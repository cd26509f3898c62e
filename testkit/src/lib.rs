//! The test kit: what the tests and the benchmarks of every crate share, and nothing
//! that ships. It depends only on `ufrag-common`, so no crate's tests form a dependency
//! cycle through it.
//!
//! - [`addr`]: loopback addresses and ports unique to a test.
//! - [`alloc`]: the counting global allocator of the zero-allocation tests.
//! - [`browser`]: headless Chromium on the demo page, and the listener for its report.
//! - [`cargo_build`]: another crate's binary or an example, built through cargo on demand.
//! - [`child`]: child processes owned by their test (killed on drop and on parent death).
//! - [`http`]: the one HTTP client, and the wait until an endpoint is ready.
//! - [`netns`]: running code inside a network namespace.
//! - [`testbed`]: the one-armed relay topology in namespaces, and the tools to run
//!   binaries in it.
//! - [`redis`]: a private `redis-server` per test.
//! - [`keys`]: the hint key every test uses.
//! - [`relay_suite`]: the relay behaviour suite every relay backend runs.
//! - [`webrtc_client`]: the str0m client peer the end-to-end tests and `perf` drive.
#![deny(unsafe_code)]

pub mod addr;
pub mod alloc;
pub mod browser;
pub mod cargo_build;
pub mod child;
pub mod http;
pub mod json_log;
pub mod keys;
pub mod netns;
pub mod redis;
pub mod relay_suite;
pub mod testbed;
pub mod tls;
pub mod webrtc_client;

pub use child::OwnedChild;
