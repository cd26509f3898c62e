//! `perf compare`: is kernel bypass warranted for this relay? Every setup side by side on
//! the netns testbed, in two phases:
//!
//! 1. **Cost at fixed loads** (the primary metric, [`rounds`]): randomized interleaved
//!    rounds; in each, every setup offered the same fixed loads below saturation, every
//!    CPU's busy time counted, the null row's (the direct path's) subtracted
//!    ([`cost`]); the host gate ([`crate::host_gate`]) leaves out trials taken while the
//!    host misbehaved; medians with distribution-free intervals and a verdict that is
//!    said only when its interval clears it ([`verdict`]).
//! 2. **The maximum rate** (secondary, [`search_phase`]): CSIT-style NDR and PDR
//!    searches, the latency trial and a profile of the forwarder's core.
//!
//! [`setups`] is the one table of what can be compared; [`bench`] the testbed and its
//! loads; [`options`] the flags; [`report`] writes the Markdown, JSON and SVG.

pub mod bench;
pub mod cost;
pub mod notes;
pub mod options;
pub mod report;
pub mod rounds;
pub mod search_phase;
pub mod setups;
pub mod verdict;

use bench::Bench;
pub use options::{Direction, GeneratorKind, Options};

/// Runs `perf compare`; the process's exit code.
pub fn run(options: &Options) -> i32 {
    if let Err(e) = options.check() {
        eprintln!("perf compare: {e}");
        return 2;
    }
    crate::load::pin_to_load_cpu();
    let bench = match Bench::up(options.ipv6, options.flows, options.forwarder_cpu) {
        Ok(bench) => bench,
        Err(e) => {
            eprintln!("perf compare: {e}");
            return 2;
        }
    };
    crate::interrupt::delete_on_interrupt(bench.bed.namespaces());
    let (setups, left_out) = options.setups(bench.plan.addresses());
    let missing: Vec<String> = setups
        .iter()
        .filter_map(|s| s.missing(&bench.exe_dir))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "perf compare: not installed, so not run (drop them from --only, or install):\n  {}",
            missing.join("\n  ")
        );
        return 2;
    }
    let placement = if options.no_steer {
        crate::placement::Placement::default()
    } else {
        crate::placement::steer(&bench.bed, options.forwarder_cpu, crate::load::LOAD_CPU)
    };
    let seed = options.seed.unwrap_or_else(rounds::clock_seed);
    let samples = if options.rounds > 0 && options.direction == Direction::Up {
        let plan = rounds::Plan {
            rounds: options.rounds,
            loads: options.loads.clone(),
            trial: options.trial,
            size: options.search.size,
            seed,
        };
        rounds::run(&bench, &setups, &plan)
    } else {
        vec![]
    };
    let searched = if options.no_search {
        search_phase::Searched::default()
    } else {
        search_phase::run(&bench, &setups, options, !options.no_steer)
    };
    let environment = crate::environment::record(
        &bench.bed,
        &placement,
        options.generator == GeneratorKind::LiveFrames,
        (crate::load::LOAD_CPU, options.forwarder_cpu),
    );
    drop(bench);
    let written = report::write(
        options,
        &report::Measured {
            setups: &setups,
            left_out: &left_out,
            samples: &samples,
            searched: &searched,
            seed,
            environment: &environment,
        },
    );
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("perf compare: writing the report: {e}");
            1
        }
    }
}
