//! The maximum-rate search, done as FD.io CSIT does it on noisy hosts: short trials, a
//! rate judged by the median loss of several trials (one scheduling hiccup does not move
//! it), the first trial of a search discarded (caches and neighbour tables warm), and two
//! answers: NDR, the highest rate with no loss, and PDR, the highest with at most 0.5 %.
//! The gap between them is the run's noise figure: a setup whose NDR sits far below its
//! PDR drops a few packets at rates it otherwise carries.

use crate::bench::load::Trial;

/// The partial-drop goal: at most this fraction lost (0.5 %).
pub const PDR_LOSS: f64 = 0.005;

/// What set the limit of one search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The setup lost packets above the maximum (the generator reached the rate).
    Loss,
    /// The generator could not offer the next rate: the tool, not the setup, was the limit.
    Generator,
    /// The search reached its highest rate within the goal.
    Ceiling,
    /// No rate met the goal: there is no maximum to report.
    NoLossFree,
}

impl Limit {
    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Limit::Loss => "loss",
            Limit::Generator => "generator",
            Limit::Ceiling => "search ceiling",
            Limit::NoLossFree => "no loss-free rate",
        }
    }
}

/// How a search runs.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The first rate, pps.
    pub start: u64,
    /// The highest rate tried, pps.
    pub max: u64,
    /// Bisection stops when the bounds are this close (a fraction of the lower one).
    pub precision: f64,
    /// Trials at each rate; the rate's loss is their median.
    pub trials_per_rate: usize,
}

/// One rate, tried `trials_per_rate` times.
#[derive(Clone, Debug)]
pub struct Step {
    /// The offered rate.
    pub rate: u64,
    /// The trials at it.
    pub trials: Vec<Trial>,
}

impl Step {
    /// The trial with the median loss (the upper median for an even count): the one the
    /// rate is judged by.
    pub fn median(&self) -> Trial {
        let mut by_loss = self.trials.clone();
        by_loss.sort_by(|a, b| a.loss().total_cmp(&b.loss()));
        by_loss[by_loss.len() / 2]
    }

    fn meets(&self, goal: f64) -> bool {
        self.median().loss() <= goal
    }
}

/// One search: NDR, PDR and every step.
#[derive(Clone, Debug)]
pub struct SearchRun {
    /// The median trial at the highest rate with no loss; `None` if none had none.
    pub best: Option<Trial>,
    /// The median trial at the highest rate with at most [`PDR_LOSS`] loss.
    pub pdr: Option<Trial>,
    /// What stopped the search (for PDR).
    pub limit: Limit,
    /// Every trial that counted, in order.
    pub trials: Vec<Trial>,
    /// The first trial, not counted.
    pub discarded: Option<Trial>,
}

impl SearchRun {
    /// (PDR − NDR) / PDR: how far below its partial-drop rate a setup first drops a
    /// packet; `None` without both.
    pub fn noise(&self) -> Option<f64> {
        let (ndr, pdr) = (self.best?.sent_pps as f64, self.pdr?.sent_pps as f64);
        (pdr > 0.0).then(|| ((pdr - ndr) / pdr).max(0.0))
    }
}

/// The bounds of one goal among the measured steps: the highest rate that met it below
/// the lowest that did not.
fn bounds(steps: &[Step], goal: f64) -> (Option<&Step>, Option<&Step>) {
    let fail = steps
        .iter()
        .filter(|s| !s.meets(goal))
        .min_by_key(|s| s.rate);
    let pass = steps
        .iter()
        .filter(|s| s.meets(goal) && fail.is_none_or(|f| s.rate < f.rate))
        .max_by_key(|s| s.rate);
    (pass, fail)
}

/// Searches with `trial`: one discarded trial at `plan.start`; then doubling from there
/// until the median loss exceeds [`PDR_LOSS`], the generator falls short or `plan.max` is
/// reached; then bisection for PDR and for NDR between the steps that bound each, until
/// the bounds are within `plan.precision`. A goal not met at the start bisects down and
/// gives up below `start / 64`.
pub fn ndr_pdr(mut trial: impl FnMut(u64) -> Trial, plan: Plan) -> SearchRun {
    let per_rate = plan.trials_per_rate.max(1);
    let discarded = Some(trial(plan.start.min(plan.max)));
    let mut steps: Vec<Step> = vec![];
    let mut measure = |rate: u64, steps: &mut Vec<Step>| -> Trial {
        let trials: Vec<Trial> = (0..per_rate).map(|_| trial(rate)).collect();
        let step = Step { rate, trials };
        let median = step.median();
        steps.push(step);
        median
    };
    let mut rate = plan.start.min(plan.max);
    let mut limit = Limit::Loss;
    loop {
        let t = measure(rate, &mut steps);
        if t.loss() > PDR_LOSS {
            break;
        }
        if t.generator_bound() {
            limit = Limit::Generator;
            break;
        }
        if rate >= plan.max {
            limit = Limit::Ceiling;
            break;
        }
        rate = rate.saturating_mul(2).min(plan.max);
    }
    let floor = (plan.start / 64).max(1);
    for goal in [PDR_LOSS, 0.0] {
        loop {
            let (pass, fail) = bounds(&steps, goal);
            let Some(fail) = fail.map(|f| f.rate) else {
                break; // met at every rate tried
            };
            let lo = pass.map_or(0, |p| p.rate);
            if fail - lo <= ((lo as f64 * plan.precision) as u64).max(1) || fail <= floor {
                break;
            }
            measure(lo + (fail - lo) / 2, &mut steps);
        }
    }
    let (pdr, _) = bounds(&steps, PDR_LOSS);
    let (ndr, _) = bounds(&steps, 0.0);
    let pdr = pdr.map(Step::median);
    SearchRun {
        best: ndr.map(Step::median),
        limit: if pdr.is_none() {
            Limit::NoLossFree
        } else {
            limit
        },
        pdr,
        trials: steps
            .iter()
            .flat_map(|s| s.trials.iter().copied())
            .collect(),
        discarded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::load::Latency;

    /// A setup that carries `capacity` pps and drops the rest.
    fn fake(capacity: u64) -> impl FnMut(u64) -> Trial {
        move |rate| Trial {
            offered_pps: rate,
            sent_pps: rate,
            sent: rate,
            received: rate.min(capacity),
            latency: Latency::default(),
        }
    }

    const PLAN: Plan = Plan {
        start: 20_000,
        max: 2_000_000,
        precision: 0.02,
        trials_per_rate: 3,
    };

    #[test]
    fn the_search_brackets_the_capacity_within_the_precision() {
        for capacity in [33_333, 100_000, 271_000, 999_000] {
            let run = ndr_pdr(fake(capacity), PLAN);
            let ndr = run.best.expect("a loss-free rate");
            assert_eq!(ndr.loss(), 0.0);
            assert!(
                ndr.offered_pps <= capacity && ndr.offered_pps as f64 >= 0.98 * capacity as f64,
                "capacity {capacity}: {ndr:?}"
            );
            // PDR may sit up to 0.5 % above the capacity.
            let pdr = run.pdr.unwrap();
            assert!(pdr.offered_pps >= ndr.offered_pps && pdr.loss() <= PDR_LOSS);
            assert_eq!(run.limit, Limit::Loss);
            assert!(run.noise().unwrap() < 0.03, "{:?}", run.noise());
            assert_eq!(run.trials.len() % 3, 0, "three trials a rate");
        }
    }

    #[test]
    fn one_bad_trial_in_three_does_not_move_the_result() {
        let mut n = 0;
        let capacity = 100_000;
        let run = ndr_pdr(
            |rate| {
                n += 1;
                let mut t = fake(capacity)(rate);
                if n % 3 == 0 {
                    t.received /= 2; // a hiccup in every third trial
                }
                t
            },
            PLAN,
        );
        let ndr = run.best.unwrap().offered_pps;
        assert!(ndr as f64 >= 0.98 * capacity as f64, "{ndr}");
    }

    #[test]
    fn the_first_trial_is_discarded() {
        let mut first = true;
        let run = ndr_pdr(
            |rate| {
                let mut t = fake(50_000)(rate);
                if std::mem::take(&mut first) {
                    t.received = 0; // a cold start loses everything
                }
                t
            },
            PLAN,
        );
        assert_eq!(run.discarded.unwrap().received, 0);
        assert!(run.best.is_some());
    }

    #[test]
    fn ndr_and_pdr_differ_when_a_setup_drops_a_little_early() {
        // Up to 100k it drops 0.2 % from 60k on; beyond 100k it drops the excess.
        let run = ndr_pdr(
            |rate| {
                let lost = if rate > 100_000 {
                    rate - 100_000
                } else if rate > 60_000 {
                    rate / 500
                } else {
                    0
                };
                Trial {
                    received: rate - lost,
                    ..fake(u64::MAX)(rate)
                }
            },
            PLAN,
        );
        let (ndr, pdr) = (run.best.unwrap().offered_pps, run.pdr.unwrap().offered_pps);
        assert!((58_000..=60_000).contains(&ndr), "NDR {ndr}");
        assert!((98_000..=100_600).contains(&pdr), "PDR {pdr}");
        assert!(run.noise().unwrap() > 0.35);
    }

    #[test]
    fn the_search_stops_at_the_ceiling() {
        let run = ndr_pdr(
            fake(u64::MAX),
            Plan {
                start: 10_000,
                max: 40_000,
                ..PLAN
            },
        );
        assert_eq!(run.best.unwrap().offered_pps, 40_000);
        assert_eq!(run.limit, Limit::Ceiling);
        assert_eq!(run.trials.len(), 9, "10k, 20k, 40k, three each");
    }

    #[test]
    fn a_setup_that_loses_at_every_rate_has_no_maximum() {
        let run = ndr_pdr(
            |rate| Trial {
                received: rate / 2,
                ..fake(0)(rate)
            },
            PLAN,
        );
        assert!(run.best.is_none() && run.pdr.is_none());
        assert_eq!(run.limit, Limit::NoLossFree);
        assert!(run.trials.len() < 40, "gives up below start/64");
    }

    #[test]
    fn a_generator_that_falls_short_is_named_as_the_limit() {
        let run = ndr_pdr(
            |rate| Trial {
                sent_pps: rate.min(150_000),
                ..fake(u64::MAX)(rate)
            },
            PLAN,
        );
        assert_eq!(run.limit, Limit::Generator);
        assert_eq!(run.best.unwrap().sent_pps, 150_000);
    }
}
