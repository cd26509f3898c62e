//! The measuring primitives every subcommand shares: load and its sink ([`load`]), the
//! maximum-rate search ([`search`], [`measure`]), where the CPU time goes ([`cpu`],
//! [`outside`], [`legs`], [`profile`], [`wake`], and in a lab [`counted`]), whether the host
//! was fit to measure on ([`host_gate`], [`steering`]), what the run ran on
//! ([`environment`], [`nic`], [`settings`], [`placement`]), how a load spread over a
//! NIC's queues ([`spread`]), the
//! statistics ([`stats`]), interleaved rounds ([`rounds`]), WebRTC sessions
//! ([`sessions`]), the maximum-rate rows ([`rows`]), a long run's progress and clean-up
//! ([`progress`], [`interrupt`]), and the system tools it drives ([`shell`]).

pub mod counted;
pub mod cpu;
pub mod environment;
pub mod host_gate;
pub mod interrupt;
pub mod legs;
pub mod load;
pub mod measure;
pub mod nic;
pub mod outside;
pub mod placement;
pub mod probe;
pub mod profile;
pub mod progress;
pub mod rounds;
pub mod rows;
pub mod search;
pub mod sessions;
pub mod settings;
pub mod shell;
pub mod spread;
pub mod stats;
pub mod steering;
pub mod wake;
