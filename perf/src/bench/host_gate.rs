//! The host gate: whether this shared VM was fit to measure on when a trial ran. Before
//! each setup's trials it reads the host at rest (how busy every CPU is with nothing of
//! ours running, steal, CPU pressure), a fixed-work calibration loop pinned to the
//! forwarder's core, and the cross-core wake-up probe ([`crate::bench::wake`]); during the
//! trials it reads steal again. A reading past a threshold marks the trials disturbed:
//! the report leaves them out of every median and says why.
//!
//! A CPU hog on the forwarder's core shows twice: the host is busy at rest, and the
//! calibration loop, sharing its core, runs at half speed.

use std::time::{Duration, Instant};

use crate::bench::cpu::{Snapshot, Spent};
use crate::bench::wake::WakeCost;

/// How long the host is watched at rest.
pub const QUIET_WINDOW: Duration = Duration::from_millis(200);

/// Thresholds past which a reading disturbs the trials that follow.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// Share of every CPU busy at rest (a quiet host: about 1 %).
    pub busy_at_rest: f64,
    /// Share of every CPU stolen by the hypervisor, at rest or during the trials.
    pub steal: f64,
    /// Share of the rest window some task waited for a CPU (PSI `some`).
    pub pressure_at_rest: f64,
    /// The calibration loop this many times slower than the fastest in the run.
    pub calibration_slowdown: f64,
    /// CPU time outside the experiment in any one trial, as a share of the machine's
    /// CPUs over it ([`crate::bench::outside`]; what ran is taken off the trial's busy time,
    /// so a little costs nothing, but a lot contends with what is measured).
    pub outside: f64,
}

/// The thresholds `perf compare` uses.
pub const THRESHOLDS: Thresholds = Thresholds {
    busy_at_rest: 0.10,
    steal: 0.02,
    pressure_at_rest: 0.05,
    calibration_slowdown: 1.3,
    outside: 0.02,
};

/// The host read before a setup's trials.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    /// The window at rest.
    pub at_rest: Spent,
    /// The calibration loop on the forwarder's core, µs (the fastest of three).
    pub calibration_us: Option<f64>,
    /// The wake-up round trip between the tools' core and the forwarder's.
    pub wake: Option<WakeCost>,
}

/// The longest [`settle`] waits for the host to go quiet.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(3);

/// Waits, in 50 ms windows and for at most [`SETTLE_LIMIT`], until the machine is less
/// than half of `limits.busy_at_rest` busy; how long it waited. The setup just stopped
/// may leave the kernel work for a moment (an XDP program and its maps freed, a UMEM
/// unpinned): that belongs to no trial, and without this wait the next setup's reading
/// at rest would be charged with it.
pub fn settle(limits: &Thresholds) -> Duration {
    let started = Instant::now();
    while started.elapsed() < SETTLE_LIMIT {
        let before = Snapshot::now();
        std::thread::sleep(Duration::from_millis(50));
        if before.until(&Snapshot::now()).busy_share() < limits.busy_at_rest / 2.0 {
            break;
        }
    }
    started.elapsed()
}

/// Reads the host: [`QUIET_WINDOW`] at rest, then the calibration loop and the wake-up
/// probe between `tools_cpu` and `forwarder_cpu`.
pub fn read(tools_cpu: usize, forwarder_cpu: usize) -> Reading {
    let before = Snapshot::now();
    std::thread::sleep(QUIET_WINDOW);
    let at_rest = before.until(&Snapshot::now());
    Reading {
        at_rest,
        calibration_us: calibrate(forwarder_cpu),
        wake: crate::bench::wake::round_trip(
            tools_cpu,
            forwarder_cpu,
            crate::bench::wake::ROUND_TRIPS,
        ),
    }
}

/// Iterations of the calibration loop: about 10 ms on this VM.
const CALIBRATION_STEPS: u64 = 4_000_000;

/// Fixed work (a xorshift chain no compiler can shorten), µs, the fastest of three, on a
/// thread pinned to `cpu`; `None` if it cannot be pinned there.
pub fn calibrate(cpu: usize) -> Option<f64> {
    std::thread::spawn(move || {
        if !ufrag_common::runtime::lifecycle::pin_current_thread(cpu) {
            return None;
        }
        (0..3)
            .map(|_| {
                let start = Instant::now();
                let mut x = std::hint::black_box(0x9E37_79B9_7F4A_7C15u64);
                for _ in 0..CALIBRATION_STEPS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                std::hint::black_box(x);
                start.elapsed().as_secs_f64() * 1e6
            })
            .min_by(f64::total_cmp)
    })
    .join()
    .ok()
    .flatten()
}

/// Why a setup's trials were left out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Disturbance {
    /// The host was this busy (share of every CPU) with nothing of ours running.
    BusyAtRest(f64),
    /// The hypervisor stole this share, at rest or during the trials.
    Steal(f64),
    /// Some task waited for a CPU this share of the rest window.
    PressureAtRest(f64),
    /// The calibration loop ran this many times slower than the run's fastest.
    SlowCalibration(f64),
    /// Threads outside the experiment took this share of the CPUs counted (every CPU, or a
    /// lab's `--relay-cpus` set) in a trial.
    Outside(f64),
    /// This many of the relay interface's interrupt and queue steering settings changed
    /// during the trials ([`crate::bench::steering`]).
    SteeringChanged(usize),
    /// Only some CPUs were to be counted, and their idle clocks did not read in a trial.
    ClocksUnread,
}

impl Disturbance {
    /// How the report says it.
    pub fn label(&self) -> String {
        match self {
            Disturbance::BusyAtRest(b) => format!("host {:.0} % busy at rest", b * 100.0),
            Disturbance::Steal(s) => format!("{:.1} % stolen", s * 100.0),
            Disturbance::PressureAtRest(p) => {
                format!("CPU pressure {:.0} % at rest", p * 100.0)
            }
            Disturbance::SlowCalibration(x) => format!("calibration {x:.2}× slower"),
            Disturbance::Outside(share) => format!(
                "threads outside the experiment took {:.0} % of the CPUs counted in a trial",
                share * 100.0
            ),
            Disturbance::ClocksUnread => {
                "the per-CPU idle clocks did not read, so the CPUs counted could not be".into()
            }
            Disturbance::SteeringChanged(n) => format!(
                "{n} interrupt or queue steering setting(s) of the relay's interface changed \
                 during the trials"
            ),
        }
    }
}

/// Whether the CPU time that ran `outside` the experiment during the trials disturbed
/// them: its largest share of the machine in any one trial.
pub fn judge_outside(
    outside: &crate::bench::outside::Outside,
    limits: &Thresholds,
) -> Option<Disturbance> {
    let share = outside.worst_share;
    (share > limits.outside).then_some(Disturbance::Outside(share))
}

/// What disturbed trials read with `reading` before them and `during` (their window),
/// against `fastest_calibration_us`, the run's fastest calibration so far.
pub fn judge(
    reading: &Reading,
    during: Option<&Spent>,
    fastest_calibration_us: Option<f64>,
    limits: &Thresholds,
) -> Vec<Disturbance> {
    let mut found = vec![];
    let busy = reading.at_rest.busy_share();
    if busy > limits.busy_at_rest {
        found.push(Disturbance::BusyAtRest(busy));
    }
    let steal = during
        .map_or(0.0, Spent::steal_share)
        .max(reading.at_rest.steal_share());
    if steal > limits.steal {
        found.push(Disturbance::Steal(steal));
    }
    if let Some(p) = reading
        .at_rest
        .pressure
        .filter(|p| *p > limits.pressure_at_rest)
    {
        found.push(Disturbance::PressureAtRest(p));
    }
    if let (Some(now), Some(fastest)) = (reading.calibration_us, fastest_calibration_us) {
        let slowdown = now / fastest.max(1e-9);
        if slowdown > limits.calibration_slowdown {
            found.push(Disturbance::SlowCalibration(slowdown));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(busy: f64, steal: f64, pressure: f64) -> Spent {
        Spent {
            wall: 1.0,
            busy: busy * 2.0,
            steal: steal * 2.0,
            pressure: Some(pressure),
            cpus: 2,
            precision: crate::bench::cpu::Precision::Nanoseconds,
        }
    }

    fn reading(busy: f64, calibration_us: f64) -> Reading {
        Reading {
            at_rest: spent(busy, 0.0, 0.0),
            calibration_us: Some(calibration_us),
            wake: None,
        }
    }

    #[test]
    fn a_quiet_host_passes() {
        let r = reading(0.01, 10_000.0);
        assert!(judge(&r, Some(&spent(0.4, 0.0, 0.02)), Some(9_500.0), &THRESHOLDS).is_empty());
    }

    #[test]
    fn a_hog_on_the_forwarders_core_is_caught_twice() {
        // One of two CPUs spinning, and the calibration loop sharing its core.
        let r = reading(0.51, 20_000.0);
        let found = judge(&r, None, Some(10_000.0), &THRESHOLDS);
        assert!(matches!(found[0], Disturbance::BusyAtRest(b) if b > 0.5));
        assert!(matches!(found[1], Disturbance::SlowCalibration(x) if (x - 2.0).abs() < 1e-9));
        assert_eq!(found[0].label(), "host 51 % busy at rest");
    }

    #[test]
    fn steal_during_the_trials_counts_as_much_as_at_rest() {
        let r = reading(0.01, 10_000.0);
        let found = judge(&r, Some(&spent(0.4, 0.05, 0.0)), None, &THRESHOLDS);
        assert_eq!(found, vec![Disturbance::Steal(0.05)]);
    }

    #[test]
    fn pressure_at_rest_is_a_disturbance() {
        let mut r = reading(0.01, 10_000.0);
        r.at_rest.pressure = Some(0.2);
        assert_eq!(
            judge(&r, None, None, &THRESHOLDS),
            vec![Disturbance::PressureAtRest(0.2)]
        );
    }

    #[test]
    fn time_outside_the_experiment_past_its_share_of_the_machine_disturbs_the_trials() {
        let outside = |worst_share: f64| crate::bench::outside::Outside {
            seconds: 0.0,
            busiest: vec![],
            worst_share,
        };
        assert_eq!(judge_outside(&outside(0.01), &THRESHOLDS), None);
        let found = judge_outside(&outside(0.3), &THRESHOLDS);
        assert_eq!(found, Some(Disturbance::Outside(0.3)));
        assert_eq!(
            found.unwrap().label(),
            "threads outside the experiment took 30 % of the CPUs counted in a trial"
        );
    }

    #[test]
    fn the_calibration_loop_takes_time_and_a_missing_cpu_gives_none() {
        let us = calibrate(0).expect("CPU 0 exists");
        assert!(us > 0.0);
        assert_eq!(calibrate(100_000), None);
    }
}
