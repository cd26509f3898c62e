//! The primary phase of `perf compare`: randomized interleaved rounds. Every setup once
//! per round, in a new random order each round, started afresh; each offered the same
//! fixed loads from client sockets, with every CPU's busy time counted around each trial
//! and the host read by the gate before it. Drift in the host's speed then falls on every
//! row alike, and a round's ratios compare setups measured minutes apart at most.

use std::time::{Duration, Instant};

use super::bed::Bed;
use super::fast_path;
use super::sample::{LoadTrial, Sample};
use super::setups::Setup;
use crate::bench::cpu::Snapshot;
use crate::bench::host_gate::{self, THRESHOLDS};
use crate::bench::load::LOAD_CPU;

/// How the rounds run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Rounds.
    pub rounds: usize,
    /// The fixed loads, pps, each below every measured setup's saturation.
    pub loads: Vec<u64>,
    /// Each trial's length.
    pub trial: Duration,
    /// The latency loads, pps (none: no latency trials).
    pub latency_loads: Vec<u64>,
    /// Each latency trial's length.
    pub latency_trial: Duration,
    /// UDP payload bytes.
    pub size: usize,
    /// The seed of the rounds' orders.
    pub seed: u64,
}

/// A small, seeded generator for the rounds' orders (xorshift64*): the order is in the
/// report, and `--seed` repeats it.
#[derive(Clone, Debug)]
pub struct Shuffler(u64);

impl Shuffler {
    /// Seeded with `seed` (0 is replaced: xorshift has no zero state).
    pub fn new(seed: u64) -> Shuffler {
        Shuffler(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `items` in a random order (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

/// ", about N min left" after `done` of `steps` equal steps took `elapsed` (nothing
/// before the first is done).
pub fn eta(elapsed: Duration, done: usize, steps: usize) -> String {
    if done == 0 {
        return String::new();
    }
    let left = elapsed.as_secs_f64() / done as f64 * steps.saturating_sub(done) as f64;
    format!(", about {:.0} min left", (left / 60.0).ceil())
}

/// A seed from the clock, for a run that names none.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// Runs `plan.rounds` rounds on `bench`, numbered from `first`, appending every sample
/// to `samples` in the order taken (a sequential run calls it again for each block).
/// After each round, `round_done` gets the samples so far and the last round done (for
/// a partial report).
pub fn run(
    bench: &dyn Bed,
    setups: &[&'static Setup],
    plan: &Plan,
    first: usize,
    samples: &mut Vec<Sample>,
    round_done: &mut dyn FnMut(&[Sample], usize),
) {
    // The pilot keeps `--seed`'s orders; each later block draws from a stream of its own.
    let mut shuffler = Shuffler::new(if first <= 1 {
        plan.seed
    } else {
        plan.seed ^ (first as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    });
    let mut fastest_calibration: Option<f64> = samples
        .iter()
        .filter_map(|s| s.reading?.calibration_us)
        .min_by(f64::total_cmp);
    let steps = plan.rounds * setups.len();
    let last = first + plan.rounds - 1;
    let started = Instant::now();
    let phase = crate::bench::progress::Phase::start("fixed-load rounds", steps);
    for round in first..=last {
        let mut order = setups.to_vec();
        shuffler.shuffle(&mut order);
        for (position, setup) in order.iter().enumerate() {
            let done = (round - first) * setups.len() + position;
            phase.step(done, &format!("round {round} of {last}: {}", setup.name));
            crate::say!(
                "round {round}/{last}: {} ({}/{steps}{})",
                setup.name,
                done + 1,
                eta(started.elapsed(), done, steps)
            );
            let settled = host_gate::settle(&THRESHOLDS);
            if settled > Duration::from_millis(500) {
                crate::say!(
                    "  waited {:.1} s for the host to settle after the last setup",
                    settled.as_secs_f64()
                );
            }
            let reading = host_gate::read(LOAD_CPU, bench.relay().forwarder_cpu());
            let measured = measure(bench, setup, plan);
            let mut disturbances = host_gate::judge(
                &reading,
                Some(&measured.during),
                fastest_calibration.or(reading.calibration_us),
                &THRESHOLDS,
            );
            disturbances.extend(host_gate::judge_outside(&measured.outside, &THRESHOLDS));
            if let Some(c) = reading.calibration_us {
                fastest_calibration = Some(fastest_calibration.map_or(c, |f: f64| f.min(c)));
            }
            for d in &disturbances {
                crate::say!("  host gate: {} (left out)", d.label());
            }
            if !measured.outside.busiest.is_empty() {
                crate::say!("  outside the experiment: {}", measured.outside.label(3));
            }
            samples.push(Sample {
                setup: setup.key.to_string(),
                round,
                position: position + 1,
                loads: measured.loads,
                latency: measured.latency,
                disturbances,
                reading: Some(reading),
                fast_path: measured.fast_path,
                outside: Some(measured.outside),
            });
        }
        round_done(samples, round);
    }
}

/// What one setup's turn in a round measured.
struct Measured {
    /// The cost trials.
    loads: Vec<LoadTrial>,
    /// The latency trials.
    latency: Vec<crate::bench::load::Trial>,
    /// The machine over the window the cost trials span.
    during: crate::bench::cpu::Spent,
    /// What relay-afxdp's in-kernel fast path carried in them (a setup with one).
    fast_path: Option<super::carried::Carried>,
    /// What ran outside the experiment over that window.
    outside: crate::bench::outside::Outside,
}

/// Starts `setup`, makes its flows, offers each load once (after a short warm-up that
/// is not counted), then each latency load ([`measure_latency`]), and stops it; the cost
/// trials, the latency trials, the window the cost trials span, and what relay-afxdp's
/// in-kernel fast path carried in them (for a setup with one).
fn measure(bench: &dyn Bed, setup: &Setup, plan: &Plan) -> Measured {
    // The run's preflight started every setup once: one that fails now cannot go on.
    let running = setup.start(bench.relay()).unwrap_or_else(|e| panic!("{e}"));
    let mut load = bench.fixed_load(setup, plan.size);
    // The relay has just started: all its fast path forwarded so far is the one datagram
    // each flow sent after its proof, so this counts the flows it carries.
    let flows_carried = fast_path::read(bench.relay(), setup).map_or(0, |made| made.packets);
    // Neighbour tables, caches and the relay's first wake-ups: not counted.
    let _ = load.trial(plan.loads[0], Duration::from_millis(200));
    // Read outside the window: a scrape of `/metrics` is not the relay's forwarding.
    let fast_before = fast_path::read(bench.relay(), setup);
    // Outside the window too: a census reads every thread's counters.
    let window = Snapshot::now();
    let mut trials = vec![];
    let mut outside = crate::bench::outside::Outside::default();
    for &rate in &plan.loads {
        // A census of every thread around each trial, outside its window (reading
        // every thread's counters is work of ours): what ran outside the experiment
        // is taken off the trial's busy time, and judged by the gate.
        let census = crate::bench::outside::Census::take(std::process::id());
        let before = Snapshot::now();
        let t = load.trial(rate, plan.trial);
        let spent = before.until(&Snapshot::now());
        let strangers = census.until(&crate::bench::outside::Census::take(std::process::id()));
        let busy = (spent.busy - strangers.seconds).max(0.0);
        let trial = LoadTrial {
            offered_pps: rate,
            sent: t.sent,
            received: t.received,
            busy,
            wall: spent.wall,
            sent_pps: Some(t.sent_pps),
        };
        crate::say!(
            "  {rate:>6} pps: sent {:>7} at {:>6} pps, received {:>7}, {:.2} µs per packet \
             (whole machine){}",
            t.sent,
            t.sent_pps,
            t.received,
            busy * 1e6 / t.received.max(1) as f64,
            trial.not_carried().map_or(String::new(), |why| format!(
                ": not carried, {}",
                why.label()
            ))
        );
        outside.add(&strangers, &spent);
        trials.push(trial);
    }
    let during = window.until(&Snapshot::now());
    let carried = fast_path::read(bench.relay(), setup)
        .zip(fast_before)
        .map(|(after, before)| after.since(&before).with_flows(flows_carried));
    if let Some(c) = carried {
        let received: u64 = trials.iter().map(|t| t.received).sum();
        crate::say!(
            "  fast path: forwarded {} of the {received} datagrams received ({:.1} %), {} left \
             to the workers; carried {} of {} flows",
            c.packets,
            c.share_of(received).unwrap_or(0.0) * 100.0,
            c.left_to_workers,
            c.flows,
            bench.relay().flows
        );
    }
    drop(load);
    let latency = measure_latency(bench, setup, plan);
    drop(running);
    Measured {
        loads: trials,
        latency,
        during,
        fast_path: carried,
        outside,
    }
}

/// On `setup`, started, after its cost trials (so sampling costs them nothing): flows
/// made from new client sockets, each latency load offered once (after a short warm-up)
/// with every datagram's latency recorded.
fn measure_latency(bench: &dyn Bed, setup: &Setup, plan: &Plan) -> Vec<crate::bench::load::Trial> {
    let Some(&first) = plan.latency_loads.first() else {
        return vec![];
    };
    let mut load = bench.latency_load(setup, plan.size);
    let _ = load.trial(first, Duration::from_millis(200));
    let trials = plan
        .latency_loads
        .iter()
        .map(|&rate| {
            let t = load.latency_trial(rate, plan.latency_trial);
            crate::say!(
                "  {rate:>6} pps: latency p50 {:.0} µs, p99 {:.0} µs ({} datagrams, {} of {} arrived)",
                t.latency.p50(),
                t.latency.p99(),
                t.latency.samples,
                t.received,
                t.sent
            );
            t
        })
        .collect();
    drop(load);
    trials
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_is_a_permutation_and_the_seed_repeats_it() {
        let mut a: Vec<u32> = (0..8).collect();
        let mut b = a.clone();
        Shuffler::new(42).shuffle(&mut a);
        Shuffler::new(42).shuffle(&mut b);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn over_many_rounds_every_setup_takes_every_place() {
        let mut shuffler = Shuffler::new(7);
        let mut seen = [[0u32; 4]; 4];
        for _ in 0..400 {
            let mut order = [0usize, 1, 2, 3];
            shuffler.shuffle(&mut order);
            for (place, setup) in order.iter().enumerate() {
                seen[*setup][place] += 1;
            }
        }
        for row in seen {
            for count in row {
                assert!((60..=140).contains(&count), "{seen:?}");
            }
        }
    }
}
