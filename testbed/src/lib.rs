//! What the benchmark suite (`ufrag-perf`, shipped) and the tests share to run the
//! project for real: the network-namespace testbed, owned child processes, the one HTTP
//! client, a private `redis-server`, headless browsers and the str0m client peer. The
//! test-only parts (the behaviour suite, binaries built on demand, the counting allocator)
//! live in `ufrag-testkit`, which re-exports these.
//!
//! - [`addr`]: loopback addresses and ports unique to a run.
//! - [`browser`]: headless Chromium on the demo page, and the listener for its report.
//! - [`child`]: child processes owned by their starter (killed on drop and on its death).
//! - [`http`]: the one HTTP client, and the wait until an endpoint is ready.
//! - [`launch`]: starting a relay or a transceiver for a run, ready or with its last words.
//! - [`keys`]: the example hint key every test and testbed relay gets (refused by the
//!   binaries unless `UFRAG_ALLOW_EXAMPLE_SECRETS=1`).
//! - [`netns`]: running code inside a network namespace.
//! - [`redis`]: a private `redis-server` per run.
//! - [`tls`]: a throwaway PKI for a TLS Redis.
//! - [`topology`]: the one-armed relay topology in namespaces.
//! - [`webrtc_client`]: the str0m client peer the end-to-end tests and `perf` drive.
#![deny(unsafe_code)]

pub mod addr;
pub mod browser;
pub mod child;
pub mod http;
pub mod keys;
pub mod launch;
pub mod netns;
pub mod redis;
pub mod tls;
pub mod topology;
pub mod webrtc_client;

pub use child::OwnedChild;
pub use topology::{Testbed, TestbedOptions};
