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
    let client_addresses = options.flows.div_ceil(bench::PORTS_PER_CLIENT_ADDR);
    let (mut setups, mut left_out) = options.setups(client_addresses);
    if let Err(e) = preflight(options, &mut setups, &mut left_out) {
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
    let placement = if options.no_steer {
        crate::placement::Placement::default()
    } else {
        crate::placement::steer(&bench.bed, options.forwarder_cpu, crate::load::LOAD_CPU)
    };
    let seed = options.seed.unwrap_or_else(rounds::clock_seed);
    let environment = crate::environment::record(
        &bench.bed,
        &placement,
        options.generator == GeneratorKind::LiveFrames,
        (crate::load::LOAD_CPU, options.forwarder_cpu),
    );
    // The report so far, rewritten as rounds and phases finish.
    let write =
        |samples: &[cost::Sample], searched: &search_phase::Searched, partial: Option<String>| {
            report::write(
                options,
                &report::Measured {
                    setups: &setups,
                    left_out: &left_out,
                    samples,
                    searched,
                    seed,
                    environment: &environment,
                    partial,
                },
            )
        };
    let not_searched = search_phase::Searched::default();
    let search_left = if options.no_search {
        ""
    } else {
        "; the maximum-rate search has not run yet"
    };
    let samples = if options.rounds > 0 && options.direction == Direction::Up {
        let plan = rounds::Plan {
            rounds: options.rounds,
            loads: options.loads.clone(),
            trial: options.trial,
            size: options.search.size,
            seed,
        };
        rounds::run(&bench, &setups, &plan, &mut |samples, done| {
            let progress = format!("{done} of {} rounds done{search_left}", plan.rounds);
            if let Err(e) = write(samples, &not_searched, Some(progress)) {
                eprintln!("perf compare: writing the partial report: {e}");
            }
        })
    } else {
        vec![]
    };
    let searched = if options.no_search {
        search_phase::Searched::default()
    } else {
        let rounds_done = if samples.is_empty() {
            String::new()
        } else {
            "all rounds done; ".to_string()
        };
        search_phase::run(
            &bench,
            &setups,
            options,
            !options.no_steer,
            &mut |searched, done, steps| {
                let progress =
                    format!("{rounds_done}the maximum-rate search: {done} of {steps} setups done");
                if let Err(e) = write(&samples, searched, Some(progress)) {
                    eprintln!("perf compare: writing the partial report: {e}");
                }
            },
        )
    };
    drop(bench);
    let written = write(&samples, &searched, None);
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("perf compare: writing the report: {e}");
            1
        }
    }
}

/// Everything the run needs, checked before anything starts: root, and each setup's
/// program. A missing program stops the run with the command that installs it, or, with
/// `--skip-missing`, leaves its setup out with a loud note (in the report too). Linux
/// `perf`, which only profiles, is warned about.
fn preflight(
    options: &Options,
    setups: &mut Vec<&'static setups::Setup>,
    left_out: &mut Vec<(String, &'static str)>,
) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root (it builds network namespaces): run it with sudo".into());
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_default();
    let missing: Vec<(&'static str, String)> = setups
        .iter()
        .filter_map(|s| Some((s.key, s.missing(&exe_dir)?)))
        .collect();
    if !missing.is_empty() && !options.skip_missing {
        let named: Vec<&str> = missing.iter().map(|(_, why)| why.as_str()).collect();
        return Err(format!(
            "not installed, so not run (install, drop them from --only, or --skip-missing): {}",
            named.join("; ")
        ));
    }
    for (key, why) in &missing {
        eprintln!("!! SKIPPED {why}");
        left_out.push((setups::name_of(key), "not installed (--skip-missing)"));
    }
    setups.retain(|s| !missing.iter().any(|(key, _)| *key == s.key));
    if !options.no_search && !std::path::Path::new(crate::profile::LINUX_PERF).exists() {
        eprintln!(
            "!! no profiles: {} missing (apt-get install linux-perf)",
            crate::profile::LINUX_PERF
        );
    }
    Ok(())
}
