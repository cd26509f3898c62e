//! The primary phase of `perf compare`: randomized interleaved rounds
//! ([`crate::bench::rounds`]). Every setup once per round, in a new random order each
//! round, started afresh; each offered the same fixed loads from client sockets, with every
//! CPU's busy time counted around each trial and the host read by the gate before it. On
//! a NIC with several RX queues, what each queue received is counted around the trials
//! ([`crate::bench::spread`]); in a lab, a turn during which the interface's interrupt or
//! queue steering differed from the run's start is left out ([`crate::bench::steering`]).

use std::time::{Duration, Instant};

use super::bed::Bed;
use super::fast_path;
use super::relay_host::RelayHost;
use super::sample::{LoadTrial, Sample};
use super::setups::Setup;
use crate::bench::counted::{Elsewhere, NetworkWork};
use crate::bench::cpu::Snapshot;
use crate::bench::host_gate::{self, Disturbance, THRESHOLDS};
use crate::bench::load::LOAD_CPU;
use crate::bench::rounds::{Order, Rounds, Shuffler, eta};
use crate::bench::spread::Spread;
use std::collections::BTreeSet;

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
    let shuffler = Shuffler::new(if first <= 1 {
        plan.seed
    } else {
        plan.seed ^ (first as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    });
    let mut fastest_calibration: Option<f64> = samples
        .iter()
        .filter_map(|s| s.reading?.calibration_us)
        .min_by(f64::total_cmp);
    let rounds = Rounds::new(first, plan.rounds, setups.len(), Order::Shuffled(shuffler));
    let started = Instant::now();
    let phase =
        crate::bench::progress::Phase::start("fixed-load rounds", plan.rounds * setups.len());
    for turn in rounds {
        let setup = setups[turn.setup];
        let (round, last) = (turn.round, turn.last_round);
        phase.step(
            turn.done,
            &format!("round {round} of {last}: {}", setup.name),
        );
        crate::say!(
            "round {round}/{last}: {} ({}/{}{})",
            setup.name,
            turn.done + 1,
            turn.steps,
            eta(started.elapsed(), turn.done, turn.steps)
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
        if !measured.steering_changed.is_empty() {
            disturbances.push(Disturbance::SteeringChanged(
                measured.steering_changed.len(),
            ));
            for change in &measured.steering_changed {
                crate::say!("  steering changed during the trials: {change}");
            }
        }
        if measured.clocks_unread {
            disturbances.push(Disturbance::ClocksUnread);
        }
        if !measured.elsewhere.is_empty() {
            let named: Vec<String> = measured.elsewhere.iter().map(Elsewhere::label).collect();
            crate::say!(
                "  !! network work outside the counted CPUs: {}",
                named.join("; ")
            );
        }
        if let Some(skew) = measured
            .queues
            .as_ref()
            .and_then(|q| q.skew(crate::bench::spread::sending_flows(bench.relay().flows)))
        {
            crate::say!("  !! the load did not spread over the RX queues: {skew}");
        }
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
            position: turn.position,
            loads: measured.loads,
            latency: measured.latency,
            disturbances,
            reading: Some(reading),
            fast_path: measured.fast_path,
            outside: Some(measured.outside),
            queues: measured.queues,
            steering_changed: measured.steering_changed,
            host_busy: measured.host_busy,
            elsewhere: measured.elsewhere,
        });
        if turn.ends_round {
            round_done(samples, round);
        }
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
    /// What each RX queue received over that window (more than one queue).
    queues: Option<Spread>,
    /// The steering settings that differed from the run's start around that window.
    steering_changed: Vec<String>,
    /// Whether some CPUs were to be counted but their idle clocks did not read in a trial.
    clocks_unread: bool,
    /// The whole host's busy seconds over the trials, when only some CPUs were counted.
    host_busy: Option<f64>,
    /// Network work on CPUs not counted, over the trials.
    elsewhere: Vec<Elsewhere>,
}

/// Starts `setup`, makes its flows, offers each load once (after a short warm-up that
/// is not counted), then each latency load ([`measure_latency`]), and stops it; the cost
/// trials, the latency trials, the window the cost trials span, and what relay-afxdp's
/// in-kernel fast path carried in them (for a setup with one).
fn measure(bench: &dyn Bed, setup: &Setup, plan: &Plan) -> Measured {
    // The run's preflight started every setup once: one that fails now cannot go on.
    let running = setup.start(bench.relay()).unwrap_or_else(|e| panic!("{e}"));
    let mut load = running.counted(bench.fixed_load(setup, plan.size));
    // The relay has just started: all its fast path forwarded so far is the one datagram
    // each flow sent after its proof, so this counts the flows it carries.
    let flows_carried = fast_path::read(bench.relay(), setup).map_or(0, |made| made.packets);
    // Neighbour tables, caches and the relay's first wake-ups: not counted.
    let _ = load.trial(plan.loads[0], Duration::from_millis(200));
    // Read outside the window: a scrape of `/metrics` is not the relay's forwarding.
    let fast_before = fast_path::read(bench.relay(), setup);
    // Outside the window too: ethtool and sysfs reads, and a census of every thread.
    let steering_before = read_steering(bench.relay());
    if let Some((start, now)) = bench
        .relay()
        .steering
        .as_ref()
        .zip(steering_before.as_ref())
    {
        for differs in start.changes(now) {
            crate::say!(
                "  steering differs from the run's start (not during the trials): {differs}"
            );
        }
    }
    // The direct path's load does not cross the relay's interface.
    let crosses = setup.kind != super::setups::Kind::Direct;
    let queues_before = read_queues(bench.relay()).filter(|_| crosses);
    let window = Snapshot::now();
    let mut trials = vec![];
    let mut outside = crate::bench::outside::Outside::default();
    let roots = bench.experiment_roots();
    let counted = some_cpus(bench.relay());
    let (mut host_busy, mut elsewhere) = (0.0, crate::bench::counted::ByCpu::new());
    let mut clocks_unread = false;
    for &rate in &plan.loads {
        // A census of every thread around each trial, outside its window (reading
        // every thread's counters is work of ours): what ran outside the experiment
        // is taken off the trial's busy time, and judged by the gate.
        let census = crate::bench::outside::Census::take(&roots);
        let network = counted.map(|_| NetworkWork::read(&bench.relay().iface.name));
        let before = Snapshot::now();
        let t = load.trial(rate, plan.trial);
        let after = Snapshot::now();
        let spent = before.until(&after);
        let strangers = census.until(&crate::bench::outside::Census::take(&roots));
        // Some CPUs counted (a lab): theirs alone. What ran outside the experiment cannot be
        // taken off (the census does not say on which CPU it ran), so the gate judges it
        // as a share of the counted CPUs, as if it all ran there. A lab's preflight made
        // sure the per-CPU clocks read; should one not, the trial says so.
        let busy = match (counted, before.busy_by_cpu(&after)) {
            (Some(cpus), Some(by_cpu)) => {
                host_busy += spent.busy;
                if let Some(network) = network {
                    let now = NetworkWork::read(&bench.relay().iface.name);
                    crate::bench::counted::add(&mut elsewhere, &network.elsewhere(&now, cpus));
                }
                by_cpu
                    .iter()
                    .filter(|(cpu, _)| cpus.contains(cpu))
                    .map(|(_, busy)| busy)
                    .sum()
            }
            (Some(_), None) => {
                clocks_unread = true;
                (spent.busy - strangers.seconds).max(0.0)
            }
            (None, _) => (spent.busy - strangers.seconds).max(0.0),
        };
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
             ({}){}",
            t.sent,
            t.sent_pps,
            t.received,
            busy * 1e6 / t.received.max(1) as f64,
            counted.map_or("whole machine".to_string(), |cpus| format!(
                "CPUs {}",
                crate::bench::counted::cpu_list(cpus)
            )),
            trial.not_carried().map_or(String::new(), |why| format!(
                ": not carried, {}",
                why.label()
            ))
        );
        let judged_over = match counted {
            Some(cpus) => crate::bench::cpu::Spent {
                cpus: cpus.len(),
                ..spent
            },
            None => spent,
        };
        outside.add(&strangers, &judged_over);
        trials.push(trial);
    }
    let during = window.until(&Snapshot::now());
    let queues = queues_before
        .zip(read_queues(bench.relay()))
        .map(|(before, after)| Spread::between(&before, &after, bench.relay().afxdp_workers));
    let steering_changed = steering_before
        .zip(read_steering(bench.relay()))
        .map_or(vec![], |(before, after)| before.changes(&after));
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
        queues,
        steering_changed,
        clocks_unread,
        host_busy: counted.map(|_| host_busy),
        elsewhere: elsewhere
            .into_iter()
            .map(|(cpu, (softirqs, interrupts))| Elsewhere {
                cpu,
                softirqs,
                interrupts,
            })
            .collect(),
    }
}

/// The CPUs the relay host's cost counts when they are not all of them (a lab with
/// `--relay-cpus`); `None` counts every CPU.
fn some_cpus(relay: &RelayHost) -> Option<&BTreeSet<usize>> {
    relay
        .counted
        .as_ref()
        .filter(|cpus| cpus.len() < crate::bench::environment::online_cpus())
}

/// Each RX queue's packets on the relay's interface now; `None` with one queue.
fn read_queues(relay: &RelayHost) -> Option<std::collections::BTreeMap<usize, u64>> {
    (relay.afxdp_workers > 1)
        .then(|| crate::bench::spread::read(relay.ns(), &relay.iface.name))
        .flatten()
}

/// The relay interface's steering now (a lab's relay host; `None` on the testbed).
fn read_steering(relay: &RelayHost) -> Option<crate::bench::steering::Steering> {
    relay
        .steering
        .as_ref()
        .map(|_| crate::bench::steering::Steering::read(&relay.iface.name))
}

/// On `setup`, started, after its cost trials (so sampling costs them nothing): flows
/// made from new client sockets, each latency load offered once (after a short warm-up)
/// with every datagram's latency recorded.
fn measure_latency(bench: &dyn Bed, setup: &Setup, plan: &Plan) -> Vec<crate::bench::load::Trial> {
    let Some(&first) = plan
        .latency_loads
        .first()
        .filter(|_| !setup.is_calibration())
    else {
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
