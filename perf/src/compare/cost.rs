//! The primary metric: what forwarding one packet costs the whole machine, at fixed
//! loads below saturation, with the null row's cost (the direct path: the same load
//! tools, no relay) subtracted in each round so the tools' own cost cancels. Pure: the
//! rounds' measurements in, medians, intervals and ratios out.

use crate::host_gate::{Disturbance, Reading};
use crate::stats::{Interval, bimodal, median_interval};

/// The confidence of every interval the report gives.
pub const CONFIDENCE: f64 = 0.95;

/// A load lost more than this share: that load's cost is left out of the row's round.
pub const LOSSY: f64 = 0.005;

/// One trial at a fixed load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadTrial {
    /// The offered rate, pps.
    pub offered_pps: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams that reached the sink.
    pub received: u64,
    /// Busy CPU seconds over every CPU during the trial.
    pub busy: f64,
    /// Wall seconds of the trial.
    pub wall: f64,
}

impl LoadTrial {
    /// Fraction lost.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 1.0;
        }
        self.sent.saturating_sub(self.received) as f64 / self.sent as f64
    }

    /// Busy µs per packet that arrived (`None` when none did or too many were lost).
    pub fn us_per_packet(&self) -> Option<f64> {
        (self.received > 0 && self.loss() <= LOSSY).then(|| self.busy * 1e6 / self.received as f64)
    }
}

/// One setup's trials in one round.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The setup's key.
    pub setup: String,
    /// The round (1-based).
    pub round: usize,
    /// Its place in the round's random order (1-based).
    pub position: usize,
    /// One trial per fixed load, in the order of the loads.
    pub loads: Vec<LoadTrial>,
    /// One latency trial per `--latency-loads` rate, in their order ([`super::latency`]).
    pub latency: Vec<crate::load::Trial>,
    /// What the host gate found; empty when the host was fit.
    pub disturbances: Vec<Disturbance>,
    /// What the gate read before the trials.
    pub reading: Option<Reading>,
}

impl Sample {
    /// Whether the host gate passed it.
    pub fn clean(&self) -> bool {
        self.disturbances.is_empty()
    }

    /// Setup `setup`'s sample of `round`, first in its order, with no trials; passed by
    /// the host gate or (not `clean`) left out for a busy host. For unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(setup: &str, round: usize, clean: bool) -> Sample {
        Sample {
            setup: setup.into(),
            round,
            position: 1,
            loads: vec![],
            latency: vec![],
            disturbances: if clean {
                vec![]
            } else {
                vec![crate::host_gate::Disturbance::BusyAtRest(0.5)]
            },
            reading: None,
        }
    }
}

/// µs per packet at each load with `null`'s cost at the same load subtracted, and the
/// pooled figure over the loads both carried (weighted by packets): `None` for a load the
/// row or the null row lost at.
pub fn net_costs(row: &Sample, null: &Sample) -> (Vec<Option<f64>>, Option<f64>) {
    let mut per_load = vec![];
    let (mut busy_us, mut packets) = (0.0, 0u64);
    for (r, n) in row.loads.iter().zip(&null.loads) {
        let net = match (r.us_per_packet(), n.us_per_packet()) {
            (Some(r_us), Some(n_us)) => {
                busy_us += r.busy * 1e6 - n_us * r.received as f64;
                packets += r.received;
                Some(r_us - n_us)
            }
            _ => None,
        };
        per_load.push(net);
    }
    (per_load, (packets > 0).then(|| busy_us / packets as f64))
}

/// A row's figures over the rounds the gate kept.
#[derive(Clone, Debug)]
pub struct RowCost {
    /// The setup's key.
    pub setup: String,
    /// Net µs per packet at each load, over the kept rounds.
    pub per_load: Vec<Option<Interval>>,
    /// Net µs per packet pooled over the loads.
    pub pooled: Option<Interval>,
    /// Its pooled cost divided by relay-mio's in the same round.
    pub ratio_to_baseline: Option<Interval>,
    /// Whether the pooled costs split into two groups.
    pub bimodal: bool,
    /// Rounds kept (its sample, the null row's and relay-mio's all clean).
    pub rounds_kept: usize,
    /// Rounds it ran in.
    pub rounds_run: usize,
    /// Median pooled cost by its place in the round's order (1-based place, median).
    pub by_position: Vec<(usize, f64)>,
    /// Every kept round's pooled cost, by round.
    pub pooled_by_round: Vec<(usize, f64)>,
}

/// The samples of one round by setup.
fn in_round<'a>(samples: &'a [Sample], round: usize, setup: &str) -> Option<&'a Sample> {
    samples
        .iter()
        .find(|s| s.round == round && s.setup == setup)
}

/// Every row's cost from `samples`: `null` is the null row's key, `baseline` relay-mio's.
/// A round counts for a row when its sample, the null row's and the baseline's in that
/// round all passed the host gate.
pub fn row_costs(samples: &[Sample], null: &str, baseline: &str, setups: &[&str]) -> Vec<RowCost> {
    let loads = samples.iter().map(|s| s.loads.len()).max().unwrap_or(0);
    let rounds: Vec<usize> = {
        let mut r: Vec<usize> = samples.iter().map(|s| s.round).collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    let pooled_in = |round: usize, setup: &str| -> Option<(Vec<Option<f64>>, f64)> {
        let row = in_round(samples, round, setup)?;
        let null = in_round(samples, round, null)?;
        let (per_load, pooled) = net_costs(row, null);
        Some((per_load, pooled?))
    };
    setups
        .iter()
        .filter(|&&s| s != null)
        .map(|&setup| {
            let mut per_load: Vec<Vec<f64>> = vec![vec![]; loads];
            let (mut pooled, mut ratios, mut pooled_by_round) = (vec![], vec![], vec![]);
            let mut by_position: Vec<(usize, f64)> = vec![];
            let mut rounds_run = 0;
            for &round in &rounds {
                let Some(sample) = in_round(samples, round, setup) else {
                    continue;
                };
                rounds_run += 1;
                let kept = [setup, null, baseline]
                    .iter()
                    .all(|k| in_round(samples, round, k).is_none_or(Sample::clean))
                    && in_round(samples, round, null).is_some();
                if !kept {
                    continue;
                }
                let Some((loads_now, p)) = pooled_in(round, setup) else {
                    continue;
                };
                for (all, now) in per_load.iter_mut().zip(loads_now) {
                    all.extend(now);
                }
                pooled.push(p);
                pooled_by_round.push((round, p));
                by_position.push((sample.position, p));
                if let Some((_, b)) = pooled_in(round, baseline) {
                    ratios.push(p / b);
                }
            }
            let mut positions: Vec<usize> = by_position.iter().map(|p| p.0).collect();
            positions.sort_unstable();
            positions.dedup();
            RowCost {
                setup: setup.to_string(),
                per_load: per_load
                    .iter()
                    .map(|v| median_interval(v, CONFIDENCE))
                    .collect(),
                pooled: median_interval(&pooled, CONFIDENCE),
                ratio_to_baseline: median_interval(&ratios, CONFIDENCE),
                bimodal: bimodal(&pooled),
                rounds_kept: pooled.len(),
                rounds_run,
                by_position: positions
                    .into_iter()
                    .filter_map(|at| {
                        let v: Vec<f64> = by_position
                            .iter()
                            .filter(|p| p.0 == at)
                            .map(|p| p.1)
                            .collect();
                        crate::stats::median(&v).map(|m| (at, m))
                    })
                    .collect(),
                pooled_by_round,
            }
        })
        .collect()
}

/// Row `a`'s pooled cost over row `b`'s in each round both kept, as a median and its
/// interval (`None` when no round kept both, or either row is missing).
pub fn pair_ratio(rows: &[RowCost], a: &str, b: &str) -> Option<Interval> {
    let row = |key: &str| rows.iter().find(|r| r.setup == key);
    let (a, b) = (row(a)?, row(b)?);
    let ratios: Vec<f64> = a
        .pooled_by_round
        .iter()
        .filter_map(|(round, us)| {
            let (_, theirs) = b.pooled_by_round.iter().find(|(r, _)| r == round)?;
            Some(us / theirs)
        })
        .collect();
    median_interval(&ratios, CONFIDENCE)
}

/// Voice sessions one core carries at `us_per_packet`: a session is 50 packets a second
/// each way.
pub fn sessions_per_core(us_per_packet: f64) -> f64 {
    1e6 / us_per_packet.max(1e-9) / crate::report::VOICE_SESSION_PPS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trial at `pps` for one second costing `us` per packet, losing `lost`.
    fn trial(pps: u64, us: f64, lost: u64) -> LoadTrial {
        LoadTrial {
            offered_pps: pps,
            sent: pps,
            received: pps - lost,
            busy: us * (pps - lost) as f64 / 1e6,
            wall: 1.0,
        }
    }

    fn sample(setup: &str, round: usize, us: f64, clean: bool) -> Sample {
        Sample {
            loads: vec![trial(10_000, us, 0), trial(50_000, us, 0)],
            ..Sample::for_tests(setup, round, clean)
        }
    }

    #[test]
    fn the_null_rows_cost_is_subtracted_load_by_load() {
        let row = sample("mio", 1, 9.0, true);
        let null = sample("direct", 1, 2.0, true);
        let (per_load, pooled) = net_costs(&row, &null);
        assert_eq!(per_load, vec![Some(7.0), Some(7.0)]);
        assert!((pooled.unwrap() - 7.0).abs() < 1e-9);
    }

    #[test]
    fn a_lossy_load_is_left_out_of_the_pooled_cost() {
        let mut row = sample("nginx", 1, 30.0, true);
        row.loads[1] = trial(50_000, 30.0, 20_000); // 40 % lost
        let null = sample("direct", 1, 2.0, true);
        let (per_load, pooled) = net_costs(&row, &null);
        assert_eq!(per_load, vec![Some(28.0), None]);
        assert!((pooled.unwrap() - 28.0).abs() < 1e-9);
    }

    #[test]
    fn ratios_are_taken_within_a_round_so_a_slow_round_cancels() {
        // Round 3 runs everything twice as slow; the ratio stays 0.5.
        let mut samples = vec![];
        for round in 1..=6 {
            let slow = if round == 3 { 2.0 } else { 1.0 };
            samples.push(sample("direct", round, 1.0 * slow, true));
            samples.push(sample("mio", round, 9.0 * slow, true));
            samples.push(sample("afxdp", round, 5.0 * slow, true));
        }
        let rows = row_costs(&samples, "direct", "mio", &["direct", "mio", "afxdp"]);
        assert_eq!(rows.len(), 2, "no row for the null row itself");
        let afxdp = &rows[1];
        let ratio = afxdp.ratio_to_baseline.unwrap();
        assert!((ratio.low - 0.5).abs() < 1e-9 && (ratio.high - 0.5).abs() < 1e-9);
        assert_eq!(afxdp.rounds_kept, 6);
        assert!((rows[0].pooled.unwrap().median - 8.0).abs() < 1e-9);
    }

    #[test]
    fn a_disturbed_sample_drops_its_round_from_the_rows_that_depend_on_it() {
        let mut samples = vec![];
        for round in 1..=4 {
            samples.push(sample("direct", round, 1.0, true));
            // relay-mio's sample of round 2 was disturbed: no ratio in round 2 for anyone.
            samples.push(sample("mio", round, 9.0, round != 2));
            samples.push(sample("afxdp", round, 5.0, true));
        }
        let rows = row_costs(&samples, "direct", "mio", &["direct", "mio", "afxdp"]);
        assert_eq!((rows[0].rounds_kept, rows[0].rounds_run), (3, 4));
        assert_eq!(rows[1].rounds_kept, 3);
        assert_eq!(rows[1].ratio_to_baseline.unwrap().samples, 3);
    }

    #[test]
    fn a_pair_is_compared_round_by_round_over_the_rounds_both_kept() {
        let mut samples = vec![];
        for round in 1..=6 {
            let slow = if round == 2 { 3.0 } else { 1.0 };
            samples.push(sample("direct", round, 1.0, true));
            samples.push(sample("mio", round, 9.0 * slow, true));
            samples.push(sample("gso", round, 5.0 * slow, round != 5));
            samples.push(sample("bundles", round, 6.0 * slow, true));
        }
        let keys = ["direct", "mio", "gso", "bundles"];
        let rows = row_costs(&samples, "direct", "mio", &keys);
        // (5 µs − 1) / (6 µs − 1) net, whatever the round's speed; round 5 left out.
        let ratio = pair_ratio(&rows, "gso", "bundles").unwrap();
        assert_eq!(ratio.samples, 5);
        assert!((ratio.median - 0.8).abs() < 0.05, "{ratio:?}");
        assert!(pair_ratio(&rows, "gso", "afxdp").is_none());
    }

    #[test]
    fn a_voice_core_carries_a_million_microseconds_of_packets() {
        assert!((sessions_per_core(5.0) - 2_000.0).abs() < 1e-9);
    }
}
