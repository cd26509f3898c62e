//! The maximum-rate phase of `perf compare`: each setup's CSIT-style NDR and PDR
//! ([`crate::bench::search`]) in interleaved rounds, its latency at fractions of each search's
//! PDR, a full-length final trial at its median PDR ([`max_rate`]), its latency at a fixed
//! load, a Linux perf profile of the forwarder's core at 70 % of its maximum, and that
//! core's time by leg at 50k pps ([`crate::bench::legs`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::bed::Bed;
use super::max_rate::{self, FinalTrial, PdrLatency};
use super::options::{Direction, GeneratorKind, Options};
use super::setups::{Kind, Running, Setup};
use crate::bench::load::{Load, Trial};
use crate::bench::rounds::{Order, Rounds, Shuffler, eta};
use crate::bench::rows::Row;

/// What the phase measured.
#[derive(Debug, Default)]
pub struct Searched {
    /// One row per setup, in the order of the run's setups.
    pub rows: Vec<Row>,
    /// What each row's rounds measured beside its searches, by setup name.
    pub extras: Vec<(String, RowExtras)>,
    /// The profiles, as Markdown.
    pub profiles: String,
    /// Quilkin's own drop counters, if it ran.
    pub quilkin_drops: Option<BTreeMap<String, f64>>,
    /// Datagrams the relay host dropped for a full socket buffer, per setup.
    pub receive_buffer_drops: Vec<(String, u64)>,
}

/// One row's measurements beside its searches.
#[derive(Clone, Debug, Default)]
pub struct RowExtras {
    /// Forwarder cores (its workers).
    pub cores: usize,
    /// Its latency at fractions of each search's PDR, round by round.
    pub pdr_latency: Vec<PdrLatency>,
    /// The final trial at its median PDR.
    pub final_trial: Option<FinalTrial>,
}

impl Searched {
    /// Each row's maximum rate per forwarder core ([`max_rate::rate_row`]).
    pub fn rates(&self) -> Vec<max_rate::RateRow> {
        self.rows
            .iter()
            .map(|row| {
                let extras = self.extras_of(&row.setup);
                max_rate::rate_row(
                    row,
                    extras.map_or(1, |e| e.cores),
                    extras.and_then(|e| e.final_trial),
                )
            })
            .collect()
    }

    /// Each row's latency trials at fractions of its PDR, by setup name.
    pub fn pdr_latency(&self) -> Vec<(String, Vec<PdrLatency>)> {
        self.rows
            .iter()
            .map(|row| {
                let trials = self
                    .extras_of(&row.setup)
                    .map_or(vec![], |e| e.pdr_latency.clone());
                (row.setup.clone(), trials)
            })
            .collect()
    }

    fn extras_of(&self, setup: &str) -> Option<&RowExtras> {
        self.extras.iter().find(|(n, _)| n == setup).map(|(_, e)| e)
    }

    fn extras_mut(&mut self, setup: &str) -> &mut RowExtras {
        if let Some(i) = self.extras.iter().position(|(n, _)| n == setup) {
            return &mut self.extras[i].1;
        }
        self.extras.push((setup.to_string(), RowExtras::default()));
        &mut self.extras.last_mut().expect("just pushed").1
    }
}

/// Searches every setup in `--search-rounds` interleaved rounds, each round in an order
/// drawn from `seed`; after each search, the setup's latency at `--pdr-fractions` of the
/// PDR it found; in the last round, the final trial at its median PDR and the extras of
/// `finish_row`. `steer` says whether the relay's NAPI threads go to the forwarder's
/// core. After each setup, `step_done` gets what was searched so far, the steps done and
/// the steps in all (for a partial report).
pub fn run(
    bench: &dyn Bed,
    setups: &[&Setup],
    options: &Options,
    (steer, seed): (bool, u64),
    step_done: &mut dyn FnMut(&Searched, usize, usize),
) -> Searched {
    let mut searched = Searched::default();
    let rounds = options.search_rounds.max(1);
    // One trial per rate: a search's repetition is the rounds', each judged whole.
    let per_round = crate::bench::measure::SearchArgs {
        repeats: 1,
        trials_per_rate: Some(options.search.trials_per_rate.unwrap_or(1)),
        ..options.search
    };
    let relay_ns = bench.relay().ns();
    let started = std::time::Instant::now();
    let phase = crate::bench::progress::Phase::start("maximum-rate search", rounds * setups.len());
    // A stream of orders of its own: the fixed-load rounds' seed, told apart.
    let order = Order::Shuffled(Shuffler::new(seed ^ SEARCH_ORDER_SALT));
    for turn in Rounds::new(1, rounds, setups.len(), order) {
        let setup = setups[turn.setup];
        let (round, done, steps) = (turn.round, turn.done, turn.steps);
        phase.step(done, &format!("round {round} of {rounds}: {}", setup.name));
        crate::say!(
            "search {}/{steps} (round {round} of {rounds}): {}{}",
            done + 1,
            setup.name,
            eta(started.elapsed(), done, steps)
        );
        // The run's preflight started every setup once: one that fails now cannot go on.
        let running = setup.start(bench.relay()).unwrap_or_else(|e| panic!("{e}"));
        if steer && let Some(placed) = bench.place_after_start() {
            crate::say!("  {placed}");
        }
        let cpu = bench.relay().forwarder_cpu();
        let mut load = running.counted(bench.search_load(setup, options));
        if options.direction != Direction::Up {
            // A relay learns the client's next hop from its first replies (AF_XDP
            // asks the kernel): a short trial first, not counted.
            let _ = load.trial(1_000, Duration::from_millis(300));
        }
        let drops_before = crate::bench::load::udp_receive_buffer_drops(relay_ns);
        let runs = crate::bench::measure::runs(
            setup.name,
            load.as_mut(),
            &per_round,
            || crate::bench::cpu::cpu_busy_seconds(cpu),
            cpu,
        );
        let found_pdr = runs
            .last()
            .and_then(|r| r.search.pdr)
            .map(|t| t.offered_pps);
        let pdr_latency = if setup.is_calibration() {
            vec![]
        } else {
            latency_at_fractions(load.as_mut(), found_pdr, options)
        };
        let drops = crate::bench::load::udp_receive_buffer_drops(relay_ns) - drops_before;
        match searched
            .receive_buffer_drops
            .iter_mut()
            .find(|(n, _)| n == setup.name)
        {
            Some((_, d)) => *d += drops,
            None => searched
                .receive_buffer_drops
                .push((setup.name.to_string(), drops)),
        }
        let extras = searched.extras_mut(setup.name);
        extras.cores = setup.cores_used(bench.relay()).max(1);
        extras
            .pdr_latency
            .extend(pdr_latency.into_iter().map(|(fraction, trial)| PdrLatency {
                round,
                fraction,
                trial,
            }));
        let index = match searched.rows.iter().position(|r| r.setup == setup.name) {
            Some(i) => {
                searched.rows[i].runs.extend(runs);
                i
            }
            None => {
                searched.rows.push(Row {
                    setup: setup.name.to_string(),
                    runs,
                    fixed: crate::bench::load::Trial::NONE,
                    busy_polls: setup.busy_polls(),
                });
                searched.rows.len() - 1
            }
        };
        if round == rounds {
            let final_trial = final_trial(load.as_mut(), &searched.rows[index], options);
            searched.extras_mut(setup.name).final_trial = final_trial;
            let clients_reach = setup
                .forwards_in_a_process()
                .then(|| setup.target(bench.relay()).dst);
            finish_row(
                bench,
                &mut searched,
                (index, clients_reach),
                load.as_mut(),
                options,
            );
            if let (Running::Quilkin(q), Kind::Quilkin { .. }) = (&running, setup.kind) {
                let drops = q.drops();
                crate::say!("  Quilkin's own drop counters: {drops:?}");
                searched.quilkin_drops = Some(drops);
            }
        }
        // The rows in the run's order, whatever order the round took them in.
        let place = |name: &str| setups.iter().position(|s| s.name == name);
        searched.rows.sort_by_key(|r| place(&r.setup));
        drop(load);
        drop(running);
        step_done(&searched, done + 1, steps);
    }
    searched
}

/// Told apart from the fixed-load rounds' orders, which come from the same seed.
const SEARCH_ORDER_SALT: u64 = 0x5EA2_C400_0000_0001;

/// The latency trials after one search: one at each of `--pdr-fractions` of the PDR it
/// found (`found_pdr`, offered pps), none when it found none, from the search's own
/// generator (the sink reads each sampled datagram's kernel receive time, so the
/// generator's busy polling on its core does not reach the latencies). Once the
/// generator falls short in one of them, a higher fraction of the same search is not
/// tried (recorded as an empty trial at its rate: short, not kept); the next search
/// starts afresh.
fn latency_at_fractions(
    load: &mut dyn Load,
    found_pdr: Option<u64>,
    options: &Options,
) -> Vec<(f64, Trial)> {
    let Some(pdr) = found_pdr else {
        return vec![];
    };
    let mut reach: Option<u64> = None;
    options
        .pdr_fractions
        .iter()
        .map(|&fraction| {
            let rate = ((pdr as f64 * fraction) as u64).max(1);
            if let Some(reach) = reach
                && rate as f64 > 0.95 * reach as f64
            {
                crate::say!(
                    "  latency at {:.0} % of PDR ({rate} pps): beyond the generator's reach ({reach} pps), not tried",
                    fraction * 100.0
                );
                return (fraction, Trial { offered_pps: rate, ..Trial::NONE });
            }
            let trial = load.trial(rate, options.pdr_latency_trial);
            if trial.generator_bound() {
                reach = Some(reach.map_or(trial.sent_pps, |r| r.min(trial.sent_pps)));
            }
            crate::say!(
                "  latency at {:.0} % of PDR ({rate} pps, sent at {} pps): {} datagrams, p50 {:.0} µs, p99 {:.0} µs, loss {:.3} %",
                fraction * 100.0,
                trial.sent_pps,
                trial.latency.samples,
                trial.latency.p50(),
                trial.latency.p99(),
                trial.loss() * 100.0
            );
            (fraction, trial)
        })
        .collect()
}

/// One trial of `--final-trial` at the median of `row`'s PDRs so far (offered pps), or
/// none (no PDR found, or a zero length).
fn final_trial(load: &mut dyn Load, row: &Row, options: &Options) -> Option<FinalTrial> {
    if options.final_trial.is_zero() {
        return None;
    }
    let pdrs: Vec<f64> = row
        .runs
        .iter()
        .filter_map(|r| r.search.pdr.map(|t| t.offered_pps as f64))
        .collect();
    let rate = crate::bench::stats::median(&pdrs)? as u64;
    let trial = load.trial(rate, options.final_trial);
    crate::say!(
        "  final trial at the median PDR ({rate} pps) for {:?}: loss {:.3} %",
        options.final_trial,
        trial.loss() * 100.0
    );
    Some(FinalTrial {
        seconds: options.final_trial.as_secs_f64(),
        trial,
    })
}

/// The load at which the forwarder's core is traced leg by leg ([`crate::bench::legs`]).
pub const LEGS_PPS: u64 = 50_000;

/// The last round's extras for row `index`: the latency trial, a profile of the
/// forwarder's core over one more trial at 70 % of its maximum, and its time by leg over
/// one at [`LEGS_PPS`] (`clients_reach` is where the setup takes its clients' datagrams:
/// sockets on its port face the clients; `None` for a setup with no process to split).
/// With `--no-profile`, the latency trial alone.
fn finish_row(
    bench: &dyn Bed,
    searched: &mut Searched,
    (index, clients_reach): (usize, Option<std::net::SocketAddr>),
    load: &mut dyn Load,
    options: &Options,
) {
    let args = &options.search;
    let row = &mut searched.rows[index];
    row.fixed = load.latency_trial(args.fixed_pps, args.latency_trial);
    if options.generator == GeneratorKind::LiveFrames {
        // The live-frames generator busy-polls the tools' core: its busy share says
        // nothing; a tools limit shows as the generator falling short.
        for run in &mut row.runs {
            run.tools_busy = None;
        }
    }
    let rate = row
        .max_pps()
        .map_or(args.fixed_pps, |m| (m.0 * 0.7) as u64)
        .max(1_000);
    if options.no_profile {
        return;
    }
    let dir = options.out.parent().unwrap_or(std::path::Path::new("."));
    match crate::bench::profile::Recording::start(bench.relay().forwarder_cpu(), dir, "compare") {
        Some(recording) => {
            let _ = load.trial(rate, args.search_trial.max(Duration::from_secs(1)));
            if let Some(p) = recording.finish() {
                searched
                    .profiles
                    .push_str(&crate::bench::profile::markdown(&row.setup, rate, &p));
            }
        }
        None => crate::say!(
            "  no profile: {} missing",
            crate::bench::profile::LINUX_PERF
        ),
    }
    // The same core traced leg by leg at the fixed load (or 70 % of the maximum when
    // that is less): which side's system calls, softirqs and the relay's own work.
    let legs_rate = LEGS_PPS.min(rate);
    if let Some(clients_reach) = clients_reach
        && let Some(recording) =
            crate::bench::legs::LegRecording::start(bench.relay().forwarder_cpu(), dir, "compare")
    {
        let trial = load.trial(legs_rate, args.search_trial.max(Duration::from_millis(500)));
        if let Some(legs) = recording.finish(clients_reach) {
            let title = format!(
                "{}: the forwarder's core by leg, at {legs_rate} pps",
                row.setup
            );
            searched.profiles.push_str(&crate::bench::legs::markdown(
                &title,
                trial.received,
                &legs,
                crate::bench::legs::RELAY_SIDES,
            ));
        }
    }
}
