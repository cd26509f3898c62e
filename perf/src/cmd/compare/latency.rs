//! Latency in the fixed-load rounds (`--latency-loads`): after its cost trials, each
//! setup in each round is offered each latency load from the same client sockets, every
//! datagram's one-way latency recorded. Per load and setup, the median over the rounds of
//! each round's p50 and p99 with its interval, and the per-round difference from
//! relay-mio's: the answer to "does this add latency at low load?" is said only when the
//! interval of that difference clears 0. Pure: the samples in, rows and Markdown out.

use std::fmt::Write as _;

use super::cost::CONFIDENCE;
use super::sample::{LOSSY, Sample};
use crate::bench::load::Trial;
use crate::bench::stats::{Interval, median_interval};

/// A latency trial counts when it lost at most [`LOSSY`] and recorded some latency.
fn usable(trial: &Trial) -> bool {
    trial.latency.samples > 0 && trial.loss() <= LOSSY
}

/// One setup's latency at one load, over the rounds kept.
#[derive(Clone, Debug)]
pub struct LatencyRow {
    /// The setup's key.
    pub setup: String,
    /// The offered rate, pps.
    pub offered_pps: u64,
    /// Each kept round's p50, µs: median and interval.
    pub p50_us: Option<Interval>,
    /// Each kept round's p99, µs: median and interval.
    pub p99_us: Option<Interval>,
    /// Per round, its p50 less relay-mio's in the same round, µs.
    pub p50_change_us: Option<Interval>,
    /// Per round, its p99 less relay-mio's in the same round, µs.
    pub p99_change_us: Option<Interval>,
    /// Rounds kept (its sample and relay-mio's both passed the host gate, and both
    /// trials were usable).
    pub rounds_kept: usize,
    /// The fewest datagrams a kept trial recorded (how deep its p99 reaches).
    pub fewest_samples: u64,
}

/// What a row's change from relay-mio says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change {
    /// The whole interval lies above 0: adds at least `low` µs.
    Adds(f64),
    /// The whole interval lies below 0: takes at least `-high` µs off.
    TakesOff(f64),
    /// The interval holds 0: no change shown.
    WithinNoise,
    /// No rounds to judge.
    Unknown,
}

impl Change {
    /// From the interval of the per-round differences.
    pub fn of(change: Option<Interval>) -> Change {
        match change {
            Some(i) if i.low > 0.0 => Change::Adds(i.low),
            Some(i) if i.high < 0.0 => Change::TakesOff(-i.high),
            Some(_) => Change::WithinNoise,
            None => Change::Unknown,
        }
    }

    /// A few words for the table.
    pub fn words(self) -> String {
        match self {
            Change::Adds(us) => format!("adds ≥ {us:.0} µs"),
            Change::TakesOff(us) => format!("takes ≥ {us:.0} µs off"),
            Change::WithinNoise => "within noise".into(),
            Change::Unknown => "–".into(),
        }
    }

    /// Its name in the JSON.
    pub fn kind(self) -> &'static str {
        match self {
            Change::Adds(_) => "adds",
            Change::TakesOff(_) => "takes_off",
            Change::WithinNoise => "within_noise",
            Change::Unknown => "unknown",
        }
    }
}

/// Every row's latency at every load of `loads` from `samples` (`baseline`: relay-mio's
/// key), in the order of `setups`, load by load.
pub fn latency_rows(
    samples: &[Sample],
    baseline: &str,
    setups: &[&str],
    loads: &[u64],
) -> Vec<LatencyRow> {
    let mut rows = vec![];
    for (at, &offered_pps) in loads.iter().enumerate() {
        for &setup in setups {
            let trial_in = |round: usize, key: &str| -> Option<Trial> {
                let sample = samples
                    .iter()
                    .find(|s| s.round == round && s.setup == key)?;
                let trial = sample.latency.get(at).copied()?;
                (sample.clean() && usable(&trial)).then_some(trial)
            };
            let mut rounds: Vec<usize> = samples
                .iter()
                .filter(|s| s.setup == setup)
                .map(|s| s.round)
                .collect();
            rounds.sort_unstable();
            rounds.dedup();
            let (mut p50, mut p99, mut p50_change, mut p99_change) =
                (vec![], vec![], vec![], vec![]);
            let mut fewest_samples = u64::MAX;
            for round in rounds {
                let (Some(own), Some(base)) = (trial_in(round, setup), trial_in(round, baseline))
                else {
                    continue;
                };
                p50.push(own.latency.p50());
                p99.push(own.latency.p99());
                p50_change.push(own.latency.p50() - base.latency.p50());
                p99_change.push(own.latency.p99() - base.latency.p99());
                fewest_samples = fewest_samples.min(own.latency.samples);
            }
            rows.push(LatencyRow {
                setup: setup.to_string(),
                offered_pps,
                p50_us: median_interval(&p50, CONFIDENCE),
                p99_us: median_interval(&p99, CONFIDENCE),
                p50_change_us: median_interval(&p50_change, CONFIDENCE),
                p99_change_us: median_interval(&p99_change, CONFIDENCE),
                rounds_kept: p50.len(),
                fewest_samples: if p50.is_empty() { 0 } else { fewest_samples },
            });
        }
    }
    rows
}

/// The report's section: one table, load by load (`name_of` names a setup's key).
pub fn markdown(rows: &[LatencyRow], trial_seconds: f64, name_of: fn(&str) -> String) -> String {
    let mut out = format!(
        "\n## Latency at low loads, in the rounds\n\nAfter its cost trials in each round, each \
         setup is offered each load below for {trial_seconds:.1} s from the same client \
         sockets, and every datagram that reaches the sink has its one-way latency recorded \
         (µs, client socket to the transceiver's socket). Per round, each setup's p50 and p99; \
         below, their medians over the rounds kept with an interval of at least {:.0} % \
         confidence, and the median of the per-round differences from relay-mio's in the \
         same round. A change is claimed only when its interval clears 0 (\"within noise\": \
         the interval holds 0; a wide interval shows little). A round counts when both \
         samples passed the host gate and both trials lost at most {:.1} %.\n\n\
         | load | setup | p50 µs | p99 µs | p50 change from relay-mio | p99 change from relay-mio | p50 says | p99 says | rounds kept | fewest datagrams in a trial |\n\
         |---:|---|---:|---:|---:|---:|---|---|---:|---:|\n",
        CONFIDENCE * 100.0,
        LOSSY * 100.0
    );
    let label = |i: Option<Interval>| i.map_or("–".into(), |i| i.label(0));
    for r in rows {
        let _ = writeln!(
            out,
            "| {}k pps | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.offered_pps as f64 / 1000.0,
            name_of(&r.setup),
            label(r.p50_us),
            label(r.p99_us),
            label(r.p50_change_us),
            label(r.p99_change_us),
            Change::of(r.p50_change_us).words(),
            Change::of(r.p99_change_us).words(),
            r.rounds_kept,
            r.fewest_samples
        );
    }
    out
}

/// The rows as JSON.
pub fn json(
    rows: &[LatencyRow],
    interval_json: fn(Option<Interval>) -> serde_json::Value,
) -> serde_json::Value {
    rows.iter()
        .map(|r| {
            serde_json::json!({
                "setup": r.setup,
                "offered_pps": r.offered_pps,
                "p50_us": interval_json(r.p50_us),
                "p99_us": interval_json(r.p99_us),
                "p50_change_us": interval_json(r.p50_change_us),
                "p99_change_us": interval_json(r.p99_change_us),
                "p50_says": Change::of(r.p50_change_us).kind(),
                "p99_says": Change::of(r.p99_change_us).kind(),
                "rounds_kept": r.rounds_kept,
                "fewest_samples": r.fewest_samples,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::load::{CDF_QUANTILES, Latency};

    /// A latency trial at `pps` whose p50 and p99 are `p50` and `p99` µs.
    fn trial(pps: u64, p50: f64, p99: f64, lost: u64) -> Trial {
        let mut cdf_us = [p50; CDF_QUANTILES.len()];
        cdf_us[4] = p99;
        Trial {
            offered_pps: pps,
            sent_pps: pps,
            sent: pps,
            received: pps - lost,
            latency: Latency {
                samples: pps - lost,
                cdf_us,
            },
        }
    }

    fn sample(setup: &str, round: usize, latency: Vec<Trial>, clean: bool) -> Sample {
        Sample {
            latency,
            ..Sample::for_tests(setup, round, clean)
        }
    }

    #[test]
    fn the_change_is_taken_within_each_round_so_a_slow_round_cancels() {
        let mut samples = vec![];
        for round in 1..=8 {
            // Round 4 is slow for everyone; bundles are 10 µs faster in every round.
            let slow = if round == 4 { 500.0 } else { 0.0 };
            samples.push(sample(
                "mio",
                round,
                vec![trial(1_000, 100.0 + slow, 300.0 + slow, 0)],
                true,
            ));
            samples.push(sample(
                "mio-bundles",
                round,
                vec![trial(1_000, 90.0 + slow, 290.0 + slow, 0)],
                true,
            ));
        }
        let rows = latency_rows(&samples, "mio", &["mio", "mio-bundles"], &[1_000]);
        assert_eq!(rows.len(), 2);
        let bundles = &rows[1];
        let change = bundles.p99_change_us.unwrap();
        assert_eq!((change.low, change.high), (-10.0, -10.0));
        assert_eq!(Change::of(bundles.p99_change_us), Change::TakesOff(10.0));
        assert_eq!(bundles.rounds_kept, 8);
        assert_eq!(bundles.p50_us.unwrap().median, 90.0);
        let mio = &rows[0];
        assert_eq!(
            Change::of(mio.p50_change_us),
            Change::WithinNoise,
            "against itself"
        );
    }

    #[test]
    fn a_disturbed_or_lossy_round_is_left_out_for_the_rows_that_depend_on_it() {
        let mut samples = vec![];
        for round in 1..=5 {
            // relay-mio's round 2 was disturbed; the row's round 3 lost 5 %.
            samples.push(sample(
                "mio",
                round,
                vec![trial(1_000, 100.0, 300.0, 0)],
                round != 2,
            ));
            let lost = if round == 3 { 50 } else { 0 };
            samples.push(sample(
                "naive",
                round,
                vec![trial(1_000, 150.0, 400.0, lost)],
                true,
            ));
        }
        let rows = latency_rows(&samples, "mio", &["mio", "naive"], &[1_000]);
        assert_eq!(rows[0].rounds_kept, 4);
        assert_eq!(rows[1].rounds_kept, 3);
        assert_eq!(Change::of(rows[1].p99_change_us), Change::Adds(100.0));
    }

    #[test]
    fn each_load_has_its_own_rows_and_a_missing_trial_is_no_round() {
        let samples = vec![
            sample(
                "mio",
                1,
                vec![
                    trial(1_000, 100.0, 300.0, 0),
                    trial(20_000, 120.0, 350.0, 0),
                ],
                true,
            ),
            sample("naive", 1, vec![trial(1_000, 150.0, 400.0, 0)], true),
        ];
        let rows = latency_rows(&samples, "mio", &["mio", "naive"], &[1_000, 20_000]);
        let at: Vec<(u64, &str, usize)> = rows
            .iter()
            .map(|r| (r.offered_pps, r.setup.as_str(), r.rounds_kept))
            .collect();
        assert_eq!(
            at,
            [
                (1_000, "mio", 1),
                (1_000, "naive", 1),
                (20_000, "mio", 1),
                (20_000, "naive", 0)
            ]
        );
        assert_eq!(Change::of(rows[3].p99_change_us), Change::Unknown);
        let md = markdown(&rows, 3.0, |k| k.to_string());
        assert!(md.contains("| 20k pps | naive | – | – |"), "{md}");
        assert!(md.contains("| 1k pps | naive | 150 [150–150] |"), "{md}");
    }
}
