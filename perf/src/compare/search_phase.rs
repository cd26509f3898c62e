//! The secondary phase of `perf compare`: each setup's maximum rate (CSIT-style NDR and
//! PDR, [`crate::search`]) with the live-frames generator, its latency at a fixed load,
//! a Linux perf profile of the forwarder's core at 70 % of its maximum, and that core's
//! time by leg at 50k pps ([`crate::legs`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::bed::Bed;
use super::options::{Direction, GeneratorKind, Options};
use super::setups::{Kind, Running, Setup};
use crate::load::Load;
use crate::report::Row;

/// What the phase measured.
#[derive(Debug, Default)]
pub struct Searched {
    /// One row per setup.
    pub rows: Vec<Row>,
    /// The profiles, as Markdown.
    pub profiles: String,
    /// Quilkin's own drop counters, if it ran.
    pub quilkin_drops: Option<BTreeMap<String, f64>>,
    /// Datagrams the relay host dropped for a full socket buffer, per setup.
    pub receive_buffer_drops: Vec<(String, u64)>,
}

/// Searches every setup (in `--repeats` rounds with `--interleave`); `steer` says
/// whether the relay's NAPI threads go to the forwarder's core. After each setup,
/// `step_done` gets what was searched so far, the steps done and the steps in all (for a
/// partial report).
pub fn run(
    bench: &dyn Bed,
    setups: &[&Setup],
    options: &Options,
    steer: bool,
    step_done: &mut dyn FnMut(&Searched, usize, usize),
) -> Searched {
    let mut searched = Searched::default();
    let rounds = if options.interleave {
        options.search.repeats.max(1)
    } else {
        1
    };
    let per_round = crate::measure::SearchArgs {
        repeats: if options.interleave {
            1
        } else {
            options.search.repeats
        },
        ..options.search
    };
    let relay_ns = bench.relay().ns();
    let steps = rounds * setups.len();
    let started = std::time::Instant::now();
    let phase = crate::progress::Phase::start("maximum-rate search", steps);
    for round in 1..=rounds {
        for (position, setup) in setups.iter().enumerate() {
            let done = (round - 1) * setups.len() + position;
            phase.step(done, &format!("round {round} of {rounds}: {}", setup.name));
            crate::say!(
                "search {}/{steps}{}: {}{}",
                done + 1,
                if options.interleave {
                    format!(" (round {round} of {rounds})")
                } else {
                    String::new()
                },
                setup.name,
                super::rounds::eta(started.elapsed(), done, steps)
            );
            // The run's preflight started every setup once: one that fails now cannot go on.
            let running = setup.start(bench.relay()).unwrap_or_else(|e| panic!("{e}"));
            if steer && let Some(placed) = bench.place_after_start() {
                crate::say!("  {placed}");
            }
            let cpu = bench.relay().forwarder_cpu();
            let mut load = bench.search_load(setup, options);
            if options.direction != Direction::Up {
                // A relay learns the client's next hop from its first replies (AF_XDP
                // asks the kernel): a short trial first, not counted.
                let _ = load.trial(1_000, Duration::from_millis(300));
            }
            let drops_before = crate::load::udp_receive_buffer_drops(relay_ns);
            let runs = crate::measure::runs(
                setup.name,
                load.as_mut(),
                &per_round,
                || crate::cpu::cpu_busy_seconds(cpu),
                cpu,
            );
            let drops = crate::load::udp_receive_buffer_drops(relay_ns) - drops_before;
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
            let index = match searched.rows.iter().position(|r| r.setup == setup.name) {
                Some(i) => {
                    searched.rows[i].runs.extend(runs);
                    i
                }
                None => {
                    searched.rows.push(Row {
                        setup: setup.name.to_string(),
                        runs,
                        fixed: crate::load::Trial::NONE,
                        busy_polls: setup.busy_polls(),
                    });
                    searched.rows.len() - 1
                }
            };
            if round == rounds {
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
            drop(load);
            drop(running);
            step_done(&searched, done + 1, steps);
        }
    }
    searched
}

/// The load at which the forwarder's core is traced leg by leg ([`crate::legs`]).
pub const LEGS_PPS: u64 = 50_000;

/// The last round's extras for row `index`: the latency trial, a profile of the
/// forwarder's core over one more trial at 70 % of its maximum, and its time by leg over
/// one at [`LEGS_PPS`] (`clients_reach` is where the setup takes its clients' datagrams:
/// sockets on its port face the clients; `None` for a setup with no process to split).
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
    let rate = row
        .max_pps()
        .map_or(args.fixed_pps, |m| (m.0 * 0.7) as u64)
        .max(1_000);
    let dir = options.out.parent().unwrap_or(std::path::Path::new("."));
    match crate::profile::Recording::start(bench.relay().forwarder_cpu(), dir, "compare") {
        Some(recording) => {
            let _ = load.trial(rate, args.search_trial.max(Duration::from_secs(1)));
            if let Some(p) = recording.finish() {
                searched
                    .profiles
                    .push_str(&crate::profile::markdown(&row.setup, rate, &p));
            }
        }
        None => crate::say!("  no profile: {} missing", crate::profile::LINUX_PERF),
    }
    // The same core traced leg by leg at the fixed load (or 70 % of the maximum when
    // that is less): which side's system calls, softirqs and the relay's own work.
    let legs_rate = LEGS_PPS.min(rate);
    if let Some(clients_reach) = clients_reach
        && let Some(recording) =
            crate::legs::LegRecording::start(bench.relay().forwarder_cpu(), dir, "compare")
    {
        let trial = load.trial(legs_rate, args.search_trial.max(Duration::from_millis(500)));
        if let Some(legs) = recording.finish(clients_reach) {
            let title = format!(
                "{}: the forwarder's core by leg, at {legs_rate} pps",
                row.setup
            );
            searched.profiles.push_str(&crate::legs::markdown(
                &title,
                trial.received,
                &legs,
                crate::legs::RELAY_SIDES,
            ));
        }
    }
    if options.generator == GeneratorKind::LiveFrames {
        // The live-frames generator busy-polls the tools' core: its busy share says
        // nothing; a tools limit shows as the generator falling short.
        for run in &mut row.runs {
            run.tools_busy = None;
        }
    }
}
