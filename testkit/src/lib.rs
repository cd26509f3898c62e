//! The test kit: what the tests of every crate share, and nothing that ships. It depends
//! only on `ufrag-common` and `ufrag-testbed` (whose modules it re-exports), so no
//! crate's tests form a dependency cycle through it.
//!
//! - [`alloc`]: the counting global allocator of the zero-allocation tests.
//! - [`cargo_build`]: another crate's binary or an example, built through cargo on demand.
//! - [`json_log`]: the error line of a binary's JSON logs.
//! - [`relay_suite`]: the relay behaviour suite every relay backend runs.
//! - [`testbed`]: the netns testbed and the tools to run the project's binaries in it.
//! - Re-exported from `ufrag-testbed`: [`addr`], [`browser`], [`child`], [`http`],
//!   [`keys`], [`netns`], [`redis`], [`tls`], [`webrtc_client`].
#![deny(unsafe_code)]

pub mod alloc;
pub mod cargo_build;
pub mod json_log;
pub mod relay_suite;
pub mod testbed;

pub use ufrag_testbed::{
    OwnedChild, addr, browser, child, http, keys, netns, redis, tls, webrtc_client,
};
