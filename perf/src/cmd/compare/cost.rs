//! The primary metric: what one more forwarded packet costs the machine (every CPU, or a
//! lab's counted CPUs, [`crate::bench::counted`]), and what a setup holds at no load, from fixed-load trials in interleaved rounds. In each round a
//! line is fitted through each setup's trials ([`super::marginal`]) and the null row's
//! line (the direct path: the same load tools, no relay) is subtracted, so the tools' own
//! cost cancels; ratios are taken within a round, over the loads both rows carried. A
//! round counts for a row only when the host gate passed the row, the null row and
//! whatever it is compared with, and the null row's own trial looked like its others.
//! Pure: the rounds' measurements in, medians, intervals and ratios out.

use super::sample::{NotCarried, Sample};
use crate::bench::stats::{Interval, bimodal, median, median_interval, outliers};

use super::marginal::{self, Line};
use super::verdict::Candidate;

/// The confidence asked of every descriptive interval in the report (each interval says
/// the coverage it has, which is higher, or lower when there are too few rounds).
pub const CONFIDENCE: f64 = 0.95;

/// A null-row trial this many scaled MADs from the null row's median at its load marks
/// its round as disturbed: the null row is subtracted from every row, so one slow null
/// trial would move every row of its round.
pub const NULL_OUTLIER_MADS: f64 = 5.0;

/// µs per packet at each load with `null`'s cost at the same load subtracted: `None` for
/// a load the row or the null row did not carry.
pub fn net_costs(row: &Sample, null: &Sample) -> Vec<Option<f64>> {
    row.loads
        .iter()
        .zip(&null.loads)
        .map(|(r, n)| Some(r.us_per_packet()? - n.us_per_packet()?))
        .collect()
}

/// A load a setup did not carry in some of its rounds ([`Analysis::misses`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Miss {
    /// The load, pps.
    pub load: u64,
    /// Why.
    pub why: NotCarried,
    /// In how many rounds.
    pub rounds: usize,
    /// Whether the load is still in the setup's set: then those rounds give it no line.
    pub in_set: bool,
}

/// A row's figures over the rounds kept for it.
#[derive(Clone, Debug)]
pub struct RowCost {
    /// The setup's key.
    pub setup: String,
    /// Net µs per packet at each load, over the kept rounds.
    pub per_load: Vec<Option<Interval>>,
    /// Net marginal µs per packet: the slope of its line less the null row's.
    pub marginal: Option<Interval>,
    /// Net cores held at zero load: the intercept of its line less the null row's.
    pub fixed_cores: Option<Interval>,
    /// Its marginal cost over relay-mio's in the same round, through the loads both
    /// rows' sets keep.
    pub ratio_to_baseline: Option<Interval>,
    /// Whether the per-round marginal costs split into two groups.
    pub bimodal: bool,
    /// Rounds kept (its sample and the null row's passed the gate, both carried every load
    /// of its set, and a line fitted).
    pub rounds_kept: usize,
    /// Rounds it ran in.
    pub rounds_run: usize,
    /// Median marginal cost by its place in the round's order (1-based place, median).
    pub by_position: Vec<(usize, f64)>,
    /// Every kept round's net line, by round.
    pub by_round: Vec<(usize, Line)>,
    /// The loads its lines go through ([`Analysis::load_set`]), by load.
    pub load_set: Vec<bool>,
}

impl RowCost {
    /// Its marginal cost in `round`, if that round was kept.
    pub fn marginal_in(&self, round: usize) -> Option<f64> {
        self.by_round
            .iter()
            .find(|(r, _)| *r == round)
            .map(|(_, line)| line.us_per_packet)
    }
}

/// The rounds' samples, with the rule for which of them count.
#[derive(Debug)]
pub struct Analysis<'a> {
    samples: &'a [Sample],
    null: &'a str,
    /// Rounds whose null-row trial was an outlier, with why.
    pub null_outliers: Vec<(usize, String)>,
}

impl<'a> Analysis<'a> {
    /// `samples` with `null` the null row's key; finds the null row's outlier rounds.
    pub fn new(samples: &'a [Sample], null: &'a str) -> Analysis<'a> {
        let mut analysis = Analysis {
            samples,
            null,
            null_outliers: vec![],
        };
        analysis.null_outliers = analysis.find_null_outliers();
        analysis
    }

    /// Every round that ran, in order.
    pub fn rounds(&self) -> Vec<usize> {
        let mut r: Vec<usize> = self.samples.iter().map(|s| s.round).collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    /// `setup`'s sample of `round`, whether or not the gate passed it.
    fn sample(&self, round: usize, setup: &str) -> Option<&'a Sample> {
        self.samples
            .iter()
            .find(|s| s.round == round && s.setup == setup)
    }

    /// `setup`'s sample of `round` if the gate passed it.
    fn passed(&self, round: usize, setup: &str) -> Option<&'a Sample> {
        self.sample(round, setup).filter(|s| s.clean())
    }

    /// The null row's sample of `round` if the gate passed it and it was no outlier.
    fn null_in(&self, round: usize) -> Option<&'a Sample> {
        if self.null_outliers.iter().any(|(r, _)| *r == round) {
            return None;
        }
        self.passed(round, self.null)
    }

    /// The null row's rounds whose trial at some load lay more than
    /// [`NULL_OUTLIER_MADS`] scaled MADs from its median at that load (over the trials the
    /// gate passed), each with the load and the two figures.
    fn find_null_outliers(&self) -> Vec<(usize, String)> {
        let passed: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.setup == self.null && s.clean())
            .collect();
        let loads = passed.iter().map(|s| s.loads.len()).min().unwrap_or(0);
        let mut found: Vec<(usize, String)> = vec![];
        for load in 0..loads {
            let costs: Vec<(usize, f64)> = passed
                .iter()
                .filter_map(|s| Some((s.round, s.loads[load].us_per_packet()?)))
                .collect();
            let values: Vec<f64> = costs.iter().map(|c| c.1).collect();
            let Some(centre) = median(&values) else {
                continue;
            };
            // A spread under 15 % of the median is taken as 15 %: the rule is for gross
            // disturbances (a null trial at twice its usual cost), and a tighter floor
            // leaves out good rounds of heavy-tailed but undisturbed samples.
            let flagged = outliers(&values, NULL_OUTLIER_MADS, 0.15 * centre);
            for ((round, us), _) in costs.iter().zip(flagged).filter(|(_, f)| *f) {
                if found.iter().any(|(r, _)| r == round) {
                    continue;
                }
                found.push((
                    *round,
                    format!(
                        "the null row cost {us:.2} µs per packet at {} pps against its median {centre:.2}",
                        passed[0].loads[load].offered_pps
                    ),
                ));
            }
        }
        found.sort_by_key(|f| f.0);
        found
    }

    /// The loads `setup`'s lines go through in every round of the run: those it and the
    /// null row both carried in more than half of the rounds where both passed the gate.
    /// Fixed for the run, so every round's line measures the same span; a round that did
    /// not carry one of them gives the row no line. (Dropping each round's own misses
    /// instead would mix lines over different spans, chosen by how each round went.)
    pub fn load_set(&self, setup: &str) -> Vec<bool> {
        let mut carried: Vec<usize> = vec![];
        let mut rounds = 0;
        for round in self.rounds() {
            let (Some(sample), Some(null)) = (self.passed(round, setup), self.null_in(round))
            else {
                continue;
            };
            rounds += 1;
            let now = marginal::carried_by_all(&[sample, null]);
            carried.resize(carried.len().max(now.len()), 0);
            for (count, yes) in carried.iter_mut().zip(now) {
                *count += usize::from(yes);
            }
        }
        carried.iter().map(|&n| 2 * n > rounds).collect()
    }

    /// The loads `setup` did not carry in the rounds where it and the null row passed
    /// the gate (by load, then why), and how many such rounds there were.
    pub fn misses(&self, setup: &str) -> (Vec<Miss>, usize) {
        let load_set = self.load_set(setup);
        let mut misses: Vec<Miss> = vec![];
        let mut rounds = 0;
        for round in self.rounds() {
            let (Some(sample), Some(_)) = (self.passed(round, setup), self.null_in(round)) else {
                continue;
            };
            rounds += 1;
            for (i, trial) in sample.loads.iter().enumerate() {
                let Some(why) = trial.not_carried() else {
                    continue;
                };
                match misses
                    .iter_mut()
                    .find(|m| m.load == trial.offered_pps && m.why == why)
                {
                    Some(m) => m.rounds += 1,
                    None => misses.push(Miss {
                        load: trial.offered_pps,
                        why,
                        rounds: 1,
                        in_set: load_set.get(i).copied().unwrap_or(false),
                    }),
                }
            }
        }
        misses.sort_by_key(|m| (m.load, m.why.label()));
        (misses, rounds)
    }

    /// The loads a pair's ratios go through: those both rows' sets keep.
    pub fn pair_load_set(&self, row: &str, other: &str) -> Vec<bool> {
        self.load_set(row)
            .iter()
            .zip(self.load_set(other))
            .map(|(a, b)| *a && b)
            .collect()
    }

    /// `row`'s marginal cost over `other`'s in each round where both and the null row
    /// count, through the pair's loads ([`Analysis::pair_load_set`]).
    pub fn ratios(&self, row: &str, other: &str) -> Vec<(usize, f64)> {
        let loads = self.pair_load_set(row, other);
        self.rounds()
            .into_iter()
            .filter_map(|round| {
                let null = self.null_in(round)?;
                let (a, b) = (self.passed(round, row)?, self.passed(round, other)?);
                Some((round, marginal::ratio_in_round(a, b, null, &loads)?))
            })
            .collect()
    }

    /// `row`'s ratio to `other` as a median and its interval at [`CONFIDENCE`].
    pub fn pair_ratio(&self, row: &str, other: &str) -> Option<Interval> {
        let ratios: Vec<f64> = self.ratios(row, other).iter().map(|r| r.1).collect();
        median_interval(&ratios, CONFIDENCE)
    }

    /// Each of `bypass` against each of `sockets`, round by round, for the verdict.
    pub fn candidates(&self, bypass: &[&str], sockets: &[&str]) -> Vec<Candidate> {
        bypass
            .iter()
            .map(|&row| Candidate {
                setup: row.to_string(),
                against: sockets
                    .iter()
                    .map(|&socket| (socket.to_string(), self.ratios(row, socket)))
                    .collect(),
            })
            .collect()
    }

    /// `setup`'s figures; `baseline` is relay-mio's key, for the ratio column.
    pub fn row(&self, setup: &str, baseline: &str) -> RowCost {
        let loads = self
            .samples
            .iter()
            .map(|s| s.loads.len())
            .max()
            .unwrap_or(0);
        let load_set = self.load_set(setup);
        let mut per_load: Vec<Vec<f64>> = vec![vec![]; loads];
        let (mut by_round, mut positions) = (vec![], vec![]);
        let mut rounds_run = 0;
        for round in self.rounds() {
            if self.sample(round, setup).is_none() {
                continue;
            }
            rounds_run += 1;
            let (Some(sample), Some(null)) = (self.passed(round, setup), self.null_in(round))
            else {
                continue;
            };
            let Some(line) = marginal::net_line(sample, null, &load_set) else {
                continue;
            };
            for ((all, now), keep) in per_load
                .iter_mut()
                .zip(net_costs(sample, null))
                .zip(&load_set)
            {
                if *keep {
                    all.extend(now);
                }
            }
            by_round.push((round, line));
            positions.push((sample.position, line.us_per_packet));
        }
        let marginals: Vec<f64> = by_round.iter().map(|(_, l)| l.us_per_packet).collect();
        let fixed: Vec<f64> = by_round.iter().map(|(_, l)| l.fixed_cores).collect();
        let ratios: Vec<f64> = self.ratios(setup, baseline).iter().map(|r| r.1).collect();
        let mut places: Vec<usize> = positions.iter().map(|p| p.0).collect();
        places.sort_unstable();
        places.dedup();
        RowCost {
            setup: setup.to_string(),
            per_load: per_load
                .iter()
                .map(|v| median_interval(v, CONFIDENCE))
                .collect(),
            marginal: median_interval(&marginals, CONFIDENCE),
            fixed_cores: median_interval(&fixed, CONFIDENCE),
            ratio_to_baseline: median_interval(&ratios, CONFIDENCE),
            bimodal: bimodal(&marginals),
            rounds_kept: by_round.len(),
            rounds_run,
            by_position: places
                .into_iter()
                .filter_map(|at| {
                    let v: Vec<f64> = positions
                        .iter()
                        .filter(|p| p.0 == at)
                        .map(|p| p.1)
                        .collect();
                    median(&v).map(|m| (at, m))
                })
                .collect(),
            by_round,
            load_set,
        }
    }

    /// Every row's figures but the null row's.
    pub fn rows(&self, setups: &[&str], baseline: &str) -> Vec<RowCost> {
        setups
            .iter()
            .filter(|&&s| s != self.null)
            .map(|s| self.row(s, baseline))
            .collect()
    }
}

/// Voice sessions one core carries at `us_per_packet`: a session is 50 packets a second
/// each way.
pub fn sessions_per_core(us_per_packet: f64) -> f64 {
    1e6 / us_per_packet.max(1e-9) / crate::bench::rows::VOICE_SESSION_PPS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::compare::sample::LoadTrial;

    /// The loads every test sample is offered.
    const LOADS: [u64; 4] = [10_000, 20_000, 35_000, 50_000];

    /// A one-second trial at `pps` costing `us` per packet with no fixed cost, losing
    /// `lost`.
    fn trial(pps: u64, us: f64, lost: u64) -> LoadTrial {
        LoadTrial {
            offered_pps: pps,
            sent: pps,
            received: pps - lost,
            busy: us * (pps - lost) as f64 / 1e6,
            wall: 1.0,
            sent_pps: None,
        }
    }

    fn sample(setup: &str, round: usize, us: f64, clean: bool) -> Sample {
        Sample {
            loads: LOADS.iter().map(|&pps| trial(pps, us, 0)).collect(),
            ..Sample::for_tests(setup, round, clean)
        }
    }

    #[test]
    fn the_null_rows_cost_is_subtracted_load_by_load() {
        let row = sample("mio", 1, 9.0, true);
        let null = sample("direct", 1, 2.0, true);
        assert_eq!(net_costs(&row, &null), vec![Some(7.0); 4]);
        let mut lossy = row.clone();
        lossy.loads[3] = trial(50_000, 9.0, 20_000); // 40 % lost
        assert_eq!(net_costs(&lossy, &null)[3], None);
    }

    #[test]
    fn a_trial_is_carried_only_when_little_was_lost_and_the_generator_kept_pace() {
        let kept = trial(50_000, 9.0, 0);
        assert_eq!(kept.not_carried(), None, "no rate recorded: judged on loss");
        let pace = |sent_pps| LoadTrial {
            sent_pps: Some(sent_pps),
            ..kept
        };
        assert_eq!(pace(48_000).not_carried(), None, "4 % slow is within pace");
        assert_eq!(pace(47_000).not_carried(), Some(NotCarried::Stretched));
        assert_eq!(pace(47_000).us_per_packet(), None);
        assert_eq!(
            trial(50_000, 9.0, 300).not_carried(),
            Some(NotCarried::Lost)
        );
        assert_eq!(
            trial(50_000, 9.0, 250).not_carried(),
            None,
            "0.5 % lost is kept"
        );
        let nothing = LoadTrial {
            received: 0,
            ..kept
        };
        assert_eq!(nothing.not_carried(), Some(NotCarried::Lost));
    }

    /// Six rounds over five loads: direct at 1 µs, relay-mio at 9, afxdp at 5 per
    /// packet; in the rounds `stretched`, relay-mio reaches the host's ceiling at the top
    /// load: the trial stretches to 1.25 s and, batching deeper, costs 5 µs a packet.
    fn stretched_runs(stretched: &[usize]) -> Vec<Sample> {
        let loads = [10_000, 20_000, 35_000, 50_000, 65_000];
        let row = |setup: &str, round: usize, us: f64, at_ceiling: bool| Sample {
            loads: loads
                .iter()
                .map(|&pps| {
                    let top = at_ceiling && pps == 65_000;
                    LoadTrial {
                        sent_pps: Some(if top { 52_000 } else { pps }),
                        wall: if top { 1.25 } else { 1.0 },
                        ..trial(pps, if top { 5.0 } else { us }, 0)
                    }
                })
                .collect(),
            ..Sample::for_tests(setup, round, true)
        };
        (1..=6)
            .flat_map(|round| {
                [
                    row("direct", round, 1.0, false),
                    row("mio", round, 9.0, stretched.contains(&round)),
                    row("afxdp", round, 5.0, false),
                ]
            })
            .collect()
    }

    #[test]
    fn a_load_a_row_mostly_stretched_leaves_its_lines_in_every_round() {
        let samples = stretched_runs(&[1, 2, 3, 4]);
        let analysis = Analysis::new(&samples, "direct");
        assert_eq!(analysis.load_set("mio"), [true, true, true, true, false]);
        assert_eq!(analysis.load_set("afxdp"), [true; 5]);
        let ratios = analysis.ratios("afxdp", "mio");
        assert_eq!(
            ratios.len(),
            6,
            "every round, through the four loads both keep"
        );
        assert!(
            ratios.iter().all(|r| (r.1 - 0.5).abs() < 1e-9),
            "{ratios:?}"
        );
        let mio = analysis.row("mio", "mio");
        assert_eq!(mio.rounds_kept, 6);
        assert!(mio.by_round.iter().all(|(_, line)| line.loads == 4));
        assert!((mio.marginal.unwrap().median - 8.0).abs() < 1e-9);
        assert!(
            mio.per_load[4].is_none(),
            "no figure at a load out of its set"
        );
    }

    #[test]
    fn a_round_that_stretched_a_load_of_the_set_gives_that_row_no_line() {
        // Only round 2 stretched: the set keeps the top load, and round 2, which did
        // not carry it, is left out rather than fitted through fewer loads.
        let samples = stretched_runs(&[2]);
        let analysis = Analysis::new(&samples, "direct");
        assert_eq!(analysis.load_set("mio"), [true; 5]);
        let rounds: Vec<usize> = analysis
            .ratios("afxdp", "mio")
            .iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(rounds, [1, 3, 4, 5, 6]);
        let mio = analysis.row("mio", "mio");
        assert_eq!((mio.rounds_kept, mio.rounds_run), (5, 6));
        assert!(mio.by_round.iter().all(|(_, line)| line.loads == 5));
        assert_eq!(analysis.row("afxdp", "mio").rounds_kept, 6);
    }

    #[test]
    fn ratios_are_taken_within_a_round_so_a_slow_round_cancels() {
        // Round 3 runs both relays twice as slow (the null row as usual); the ratio
        // stays 0.5.
        let mut samples = vec![];
        for round in 1..=6 {
            let slow = if round == 3 { 2.0 } else { 1.0 };
            samples.push(sample("direct", round, 1.0, true));
            samples.push(sample("mio", round, 1.0 + 8.0 * slow, true));
            samples.push(sample("afxdp", round, 1.0 + 4.0 * slow, true));
        }
        let analysis = Analysis::new(&samples, "direct");
        let rows = analysis.rows(&["direct", "mio", "afxdp"], "mio");
        assert_eq!(rows.len(), 2, "no row for the null row itself");
        let ratio = rows[1].ratio_to_baseline.unwrap();
        assert!((ratio.low - 0.5).abs() < 1e-9 && (ratio.high - 0.5).abs() < 1e-9);
        assert_eq!(rows[1].rounds_kept, 6);
        assert!((rows[0].marginal.unwrap().median - 8.0).abs() < 1e-9);
        assert!(rows[0].fixed_cores.unwrap().median.abs() < 1e-9);
    }

    #[test]
    fn a_disturbed_sample_drops_its_round_from_the_ratios_that_use_it() {
        let mut samples = vec![];
        for round in 1..=4 {
            samples.push(sample("direct", round, 1.0, true));
            // relay-mio's sample of round 2 was disturbed.
            samples.push(sample("mio", round, 9.0, round != 2));
            samples.push(sample("afxdp", round, 5.0, true));
        }
        let analysis = Analysis::new(&samples, "direct");
        let rows = analysis.rows(&["direct", "mio", "afxdp"], "mio");
        assert_eq!((rows[0].rounds_kept, rows[0].rounds_run), (3, 4));
        assert_eq!(rows[1].rounds_kept, 4, "afxdp's own cost keeps round 2");
        assert_eq!(rows[1].ratio_to_baseline.unwrap().samples, 3);
    }

    #[test]
    fn a_null_trial_far_from_its_others_leaves_its_round_out_and_says_why() {
        let mut samples = vec![];
        for round in 1..=8 {
            let mut null = sample("direct", round, 7.0 + 0.05 * round as f64, true);
            if round == 2 {
                // The committed report's case: about 7 µs normally, 13.3 once at 25k.
                null.loads[1] = trial(20_000, 13.3, 0);
            }
            samples.push(null);
            samples.push(sample("mio", round, 17.0, true));
            samples.push(sample("afxdp", round, 11.0, true));
        }
        let analysis = Analysis::new(&samples, "direct");
        assert_eq!(
            analysis.null_outliers.len(),
            1,
            "{:?}",
            analysis.null_outliers
        );
        let (round, why) = &analysis.null_outliers[0];
        assert_eq!(*round, 2);
        assert!(
            why.contains("13.30 µs") && why.contains("20000 pps"),
            "{why}"
        );
        let rows = analysis.rows(&["direct", "mio", "afxdp"], "mio");
        assert_eq!(rows[1].ratio_to_baseline.unwrap().samples, 7);
        assert!(rows[1].by_round.iter().all(|(r, _)| *r != 2));
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
        let analysis = Analysis::new(&samples, "direct");
        let ratio = analysis.pair_ratio("gso", "bundles").unwrap();
        assert_eq!(ratio.samples, 5);
        assert!((ratio.median - 0.8).abs() < 1e-9, "{ratio:?}");
        assert!(analysis.pair_ratio("gso", "afxdp").is_none());
    }

    #[test]
    fn a_bypass_row_is_weighed_against_each_socket_row_over_the_rounds_both_kept() {
        let mut samples = vec![];
        for round in 1..=6 {
            samples.push(sample("direct", round, 1.0, true));
            samples.push(sample("mio", round, 11.0, true));
            // Bundles' sample of round 4 is disturbed: that round counts only against mio.
            samples.push(sample("mio-bundles", round, 6.0, round != 4));
            samples.push(sample("afxdp", round, 4.0, true));
        }
        let analysis = Analysis::new(&samples, "direct");
        let candidates = analysis.candidates(&["afxdp"], &["mio", "mio-bundles"]);
        assert_eq!(candidates.len(), 1);
        let against = &candidates[0].against;
        assert_eq!(against[0].0, "mio");
        assert_eq!(against[0].1.len(), 6);
        assert!(against[0].1.iter().all(|(_, r)| (r - 0.3).abs() < 1e-9));
        assert_eq!(against[1].0, "mio-bundles");
        assert_eq!(
            against[1].1.iter().map(|r| r.0).collect::<Vec<_>>(),
            [1, 2, 3, 5, 6]
        );
        assert!(against[1].1.iter().all(|(_, r)| (r - 0.6).abs() < 1e-9));
    }

    #[test]
    fn busy_polling_is_a_fixed_cost_not_a_cost_per_packet() {
        let mut samples = vec![];
        for round in 1..=6 {
            samples.push(sample("direct", round, 1.0, true));
            let mut busy = sample("afxdp-busy", round, 2.0, true);
            for t in &mut busy.loads {
                t.busy += 1.0; // a whole core at any load
            }
            samples.push(busy);
        }
        let rows = Analysis::new(&samples, "direct").rows(&["afxdp-busy"], "mio");
        assert!((rows[0].marginal.unwrap().median - 1.0).abs() < 1e-9);
        assert!((rows[0].fixed_cores.unwrap().median - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_voice_core_carries_a_million_microseconds_of_packets() {
        assert!((sessions_per_core(5.0) - 2_000.0).abs() < 1e-9);
    }
}
