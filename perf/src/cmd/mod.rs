//! The subcommands of `perf`: each module holds its options (clap) and its `run`.

pub mod children;
pub mod compare;
pub mod diff;
pub mod gate;
pub mod lab;
pub mod load;
pub mod loopback;
pub mod model;
pub mod resilience;
pub mod runs;
pub mod sessions;
pub mod tools;
