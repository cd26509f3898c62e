//! One setup's secondary measurement: repeated NDR/PDR searches ([`crate::bench::search`]), each
//! with what the forwarder's core, the tools' core and the machine spent per packet at its
//! NDR, and the host's wake-up round trip read before it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::bench::cpu::{cpu_busy_seconds, machine_busy_seconds};
use crate::bench::load::{LOAD_CPU, Load, Trial};
use crate::bench::rows::{Row, Run};
use crate::bench::search::{Plan, ndr_pdr};

/// What a rate's last trial cost: (forwarder, tools, machine) busy seconds, packets
/// received, wall seconds.
type TrialCost = ((f64, f64, f64), u64, f64);

/// How each setup is searched, and its latency trial.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct SearchArgs {
    /// Length of each search trial (short, CSIT-style: a rate is judged by the median
    /// of `--trials-per-rate` of them).
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    pub search_trial: Duration,
    /// Trials at each rate of the search; the rate's loss is their median (default 3;
    /// `perf compare` 1: its searches repeat in interleaved rounds instead).
    #[arg(long)]
    pub trials_per_rate: Option<usize>,
    /// First rate of the search, packets per second.
    #[arg(long, default_value_t = 20_000)]
    pub start_pps: u64,
    /// Highest rate tried.
    #[arg(long, default_value_t = 4_000_000)]
    pub max_pps: u64,
    /// The fixed load at which latency is reported.
    #[arg(long, default_value_t = 20_000)]
    pub fixed_pps: u64,
    /// Length of the latency trial at --fixed-pps (longer: more samples in the tail).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub latency_trial: Duration,
    /// UDP payload bytes of every generated datagram (200: a voice packet; 1200: video).
    #[arg(long, default_value_t = crate::bench::load::DATAGRAM_LEN)]
    pub size: usize,
    /// Searches per setup (median and spread are over these).
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    /// The search stops when the bounds are this close (a fraction of the lower one).
    #[arg(long, default_value_t = 0.05)]
    pub precision: f64,
}

/// Trials at each rate of a search unless `--trials-per-rate` says otherwise.
pub const TRIALS_PER_RATE: usize = 3;

impl SearchArgs {
    /// The search's plan.
    pub fn plan(&self) -> Plan {
        Plan {
            start: self.start_pps,
            max: self.max_pps,
            precision: self.precision,
            trials_per_rate: self.trials_per_rate.unwrap_or(TRIALS_PER_RATE),
        }
    }
}

/// Searches `load` `args.repeats` times and takes its latency trial: a row.
pub fn row(
    name: &str,
    load: &mut dyn Load,
    args: &SearchArgs,
    busy_polls: bool,
    (forwarder_busy, forwarder_cpu): (impl Fn() -> f64, usize),
) -> Row {
    let runs = runs(name, load, args, forwarder_busy, forwarder_cpu);
    let fixed = load.latency_trial(args.fixed_pps, args.latency_trial);
    Row {
        setup: name.to_string(),
        runs,
        fixed,
        busy_polls,
    }
}

/// `args.repeats` searches of `load`, each with what the forwarder (`forwarder_busy`:
/// its busy seconds so far), the tools' core and the machine spent per packet at its
/// NDR, and the host's wake-up round trip between the tools' core and `forwarder_cpu`
/// read just before it.
pub fn runs(
    name: &str,
    load: &mut dyn Load,
    args: &SearchArgs,
    forwarder_busy: impl Fn() -> f64,
    forwarder_cpu: usize,
) -> Vec<Run> {
    crate::say!("searching {name}…");
    let mut runs = vec![];
    for repeat in 0..args.repeats.max(1) {
        let host_wake = crate::bench::wake::round_trip(
            LOAD_CPU,
            forwarder_cpu,
            crate::bench::wake::ROUND_TRIPS,
        );
        if let Some(w) = host_wake {
            crate::say!("  host wake-up round trip: {}", w.label());
        }
        let mut costs: HashMap<u64, TrialCost> = HashMap::new();
        let search = ndr_pdr(
            |rate| {
                let (f0, t0, m0) = (
                    forwarder_busy(),
                    cpu_busy_seconds(LOAD_CPU),
                    machine_busy_seconds(),
                );
                let wall = Instant::now();
                let t: Trial = load.trial(rate, args.search_trial);
                let wall = wall.elapsed().as_secs_f64();
                // Two readings of /proc/stat's 10 ms counts can differ by less than nothing
                // on an idle core: a cost is never below zero.
                let spent = (
                    (forwarder_busy() - f0).max(0.0),
                    (cpu_busy_seconds(LOAD_CPU) - t0).max(0.0),
                    (machine_busy_seconds() - m0).max(0.0),
                );
                costs.insert(rate, (spent, t.received, wall));
                crate::say!(
                    "  [{}/{}] {rate:>8} pps offered: achieved {:>8}, received {:>9}, loss {:.3} %",
                    repeat + 1,
                    args.repeats,
                    t.sent_pps,
                    t.received,
                    t.loss() * 100.0
                );
                t
            },
            args.plan(),
        );
        let at_best = search.best.and_then(|b| costs.get(&b.offered_pps).copied());
        let per_packet = |busy: f64, received: u64| busy * 1e6 / received.max(1) as f64;
        runs.push(Run {
            forwarder_us_per_packet: at_best.map(|((f, _, _), n, _)| per_packet(f, n)),
            forwarder_busy: at_best.map(|((f, _, _), _, wall)| f / wall),
            tools_busy: at_best.map(|((_, t, _), _, wall)| t / wall),
            machine_us_per_packet: at_best.map(|((_, _, m), n, _)| per_packet(m, n)),
            host_wake,
            search,
        });
    }
    runs
}
