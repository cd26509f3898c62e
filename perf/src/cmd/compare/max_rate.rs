//! The maximum rate and the latency under it, as co-primary results of `perf compare`:
//! each row's NDR and PDR per forwarder core over its interleaved searches (median with
//! a distribution-free interval and its exact coverage), the full-length final trial at
//! the median PDR, and the latency at fractions of each search's PDR, measured in the
//! same rounds. A percentile is shown only when every trial behind it recorded enough
//! datagrams beyond it. Pure: what the search phase measured in, rows and Markdown out.

use std::fmt::Write as _;

use super::cost::CONFIDENCE;
use crate::bench::load::{CDF_QUANTILES, Trial};
use crate::bench::rows::Row;
use crate::bench::search::PDR_LOSS;
use crate::bench::stats::{Interval, median_interval};

/// A percentile is read from a trial only when at least this many of its recorded
/// datagrams lie beyond it (p99.9 needs 10,000 samples; p99.99, 100,000).
pub const MIN_BEYOND: f64 = 10.0;

/// The percentiles the latency table reports.
pub const PERCENTILES: [f64; 4] = [0.5, 0.99, 0.999, 0.9999];

/// One latency trial at a fraction of one search's PDR.
#[derive(Clone, Copy, Debug)]
pub struct PdrLatency {
    /// The search round (1-based).
    pub round: usize,
    /// The fraction of that search's PDR offered.
    pub fraction: f64,
    /// The trial (its offered rate is the fraction of the PDR).
    pub trial: Trial,
}

/// The final trial at a row's median PDR, full length.
#[derive(Clone, Copy, Debug)]
pub struct FinalTrial {
    /// Its length, seconds.
    pub seconds: f64,
    /// The trial.
    pub trial: Trial,
}

impl FinalTrial {
    /// True when the found rate held for the whole trial (loss at most [`PDR_LOSS`]).
    pub fn held(&self) -> bool {
        self.trial.loss() <= PDR_LOSS
    }
}

/// A row's maximum rate over its searches.
#[derive(Clone, Debug)]
pub struct RateRow {
    /// The setup's name.
    pub setup: String,
    /// Forwarder cores the row ran on (its workers): the rates are divided by these.
    pub cores: usize,
    /// NDR per forwarder core, pps.
    pub ndr: Option<Interval>,
    /// PDR per forwarder core, pps.
    pub pdr: Option<Interval>,
    /// Searches that found each (NDR, PDR) of those run.
    pub found: (usize, usize),
    /// Searches run.
    pub searches: usize,
    /// The final trial at the median PDR.
    pub final_trial: Option<FinalTrial>,
}

/// A row's maximum rate from its searches; `cores` its forwarder cores.
pub fn rate_row(row: &Row, cores: usize, final_trial: Option<FinalTrial>) -> RateRow {
    let per_core = |t: Option<Trial>| t.map(|t| t.sent_pps as f64 / cores.max(1) as f64);
    let ndr: Vec<f64> = row
        .runs
        .iter()
        .filter_map(|r| per_core(r.search.best))
        .collect();
    let pdr: Vec<f64> = row
        .runs
        .iter()
        .filter_map(|r| per_core(r.search.pdr))
        .collect();
    RateRow {
        setup: row.setup.clone(),
        cores,
        ndr: median_interval(&ndr, CONFIDENCE),
        pdr: median_interval(&pdr, CONFIDENCE),
        found: (ndr.len(), pdr.len()),
        searches: row.runs.len(),
        final_trial,
    }
}

/// One row's latency at one fraction of its PDR, over the rounds.
#[derive(Clone, Debug)]
pub struct FractionLatency {
    /// The setup's name.
    pub setup: String,
    /// The fraction of the PDR.
    pub fraction: f64,
    /// The median offered rate over the rounds, pps.
    pub offered_pps: f64,
    /// Per percentile of [`PERCENTILES`]: each round's value (µs), median and interval;
    /// `None` where a trial had too few datagrams beyond it (or none was usable).
    pub percentiles: Vec<(f64, Option<Interval>)>,
    /// Trials that counted (the generator kept the rate, at most [`PDR_LOSS`] was lost,
    /// and some latency was recorded).
    pub rounds_kept: usize,
    /// Trials the latency generator could not send at the rate (or did not try: beyond
    /// its reach).
    pub generator_short: usize,
    /// Trials run.
    pub rounds_run: usize,
    /// The fewest datagrams recorded by a trial that counted.
    pub fewest_samples: u64,
}

/// Every row's latency at each of `fractions`, from `trials` (the row's name with its
/// trials), fraction by fraction.
pub fn fraction_latency(
    trials: &[(String, Vec<PdrLatency>)],
    fractions: &[f64],
) -> Vec<FractionLatency> {
    let mut out = vec![];
    for &fraction in fractions {
        for (setup, row_trials) in trials {
            let at: Vec<&Trial> = row_trials
                .iter()
                .filter(|t| t.fraction == fraction)
                .map(|t| &t.trial)
                .collect();
            let kept: Vec<&Trial> = at
                .iter()
                .copied()
                .filter(|t| !t.generator_bound() && t.latency.samples > 0 && t.loss() <= PDR_LOSS)
                .collect();
            let generator_short = at.iter().filter(|t| t.generator_bound()).count();
            let fewest_samples = kept.iter().map(|t| t.latency.samples).min().unwrap_or(0);
            let percentiles = PERCENTILES
                .iter()
                .map(|&q| {
                    // Rounded: 100,000 samples hold 10 beyond p99.99, though 1 − 0.9999
                    // is a hair under 1e-4 in binary.
                    let beyond = (fewest_samples as f64 * (1.0 - q)).round();
                    let deep_enough = beyond >= MIN_BEYOND;
                    let values: Vec<f64> = kept.iter().map(|t| t.latency.at(q)).collect();
                    (
                        q,
                        deep_enough
                            .then(|| median_interval(&values, CONFIDENCE))
                            .flatten(),
                    )
                })
                .collect();
            let offered: Vec<f64> = at.iter().map(|t| t.offered_pps as f64).collect();
            out.push(FractionLatency {
                setup: setup.clone(),
                fraction,
                offered_pps: crate::bench::stats::median(&offered).unwrap_or(0.0),
                percentiles,
                rounds_kept: kept.len(),
                generator_short,
                rounds_run: at.len(),
                fewest_samples,
            });
        }
    }
    out
}

/// The percentile's name: p50, p99, p99.9, p99.99.
fn percentile_name(q: f64) -> String {
    let p = format!("{:.2}", q * 100.0);
    format!("p{}", p.trim_end_matches('0').trim_end_matches('.'))
}

fn label(i: Option<Interval>, digits: usize) -> String {
    i.map_or("–".into(), |i| i.label(digits))
}

fn coverage(i: Option<Interval>) -> String {
    i.map_or("–".into(), |i| format!("{:.1} %", i.confidence * 100.0))
}

/// The section: the rate table, then the latency table.
pub fn markdown(rates: &[RateRow], latency: &[FractionLatency], final_seconds: f64) -> String {
    let mut out = format!(
        "\n## The maximum rate per forwarder core, over the interleaved searches\n\nEach setup \
         searched once per round, rounds in a fresh random order; NDR (no loss) and PDR (at \
         most {:.1} % lost) per forwarder core, kpps: median [distribution-free interval \
         asking {:.0} %; its exact coverage beside it: five searches reach 93.8 % at most]. \
         Then one final trial of {final_seconds:.0} s at each row's median PDR: the found rate \
         *held* when it lost at most {:.1} % over the whole trial.\n\n\
         | setup | NDR kpps per core | PDR kpps per core | coverage | searches that found NDR / PDR | final trial at PDR: loss | held |\n\
         |---|---:|---:|---:|---:|---:|---|\n",
        PDR_LOSS * 100.0,
        CONFIDENCE * 100.0,
        PDR_LOSS * 100.0,
    );
    let kpps = |i: Option<Interval>| {
        i.map(|i| Interval {
            median: i.median / 1e3,
            low: i.low / 1e3,
            high: i.high / 1e3,
            ..i
        })
    };
    for r in rates {
        let (loss, held) = match r.final_trial {
            Some(f) => (
                format!("{:.3} %", f.trial.loss() * 100.0),
                if f.held() { "held" } else { "**not held**" }.to_string(),
            ),
            None => ("–".into(), "–".into()),
        };
        let _ = writeln!(
            out,
            "| {}{} | {} | {} | {} | {} / {} of {} | {loss} | {held} |",
            r.setup,
            if r.cores > 1 {
                format!(" ({} cores)", r.cores)
            } else {
                String::new()
            },
            label(kpps(r.ndr), 0),
            label(kpps(r.pdr), 0),
            coverage(r.pdr),
            r.found.0,
            r.found.1,
            r.searches,
        );
    }
    if latency.is_empty() {
        return out;
    }
    let names: Vec<String> = PERCENTILES.iter().map(|&q| percentile_name(q)).collect();
    let _ = write!(
        out,
        "\n## Latency at fractions of each search's PDR, in the rounds\n\nAfter each search, \
         the same setup is offered each fraction of the PDR that search found by the same \
         generator, and each sampled datagram's one-way latency, from its send stamp to the \
         kernel's receive time at the sink's socket (`SO_TIMESTAMPNS`: not when the sink's \
         thread ran), is recorded in an HDR histogram (3 significant digits). Per fraction, \
         each percentile's median over the rounds [distribution-free interval]. A percentile \
         is shown only when every trial behind it recorded at least {MIN_BEYOND:.0} datagrams \
         beyond it (\"too few\": a deeper one would rest on a handful); a trial counts when it \
         lost at most {:.1} % and its generator kept the rate (\"generator short\" counts the \
         others: a rate the tools could not offer is no latency of the setup).\n\n| setup | share of PDR | offered kpps | {} | trials kept | generator short | fewest datagrams in a trial |\n|---|---:|---:|{}---:|---:|---:|\n",
        PDR_LOSS * 100.0,
        names
            .iter()
            .map(|n| format!("{n} µs"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---:|".repeat(names.len()),
    );
    for l in latency {
        let cells: Vec<String> = l
            .percentiles
            .iter()
            .map(|(_, i)| match i {
                Some(_) => label(*i, 0),
                None if l.rounds_kept > 0 => "too few".into(),
                None => "–".into(),
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {:.0} % | {:.0} | {} | {} of {} | {} | {} |",
            l.setup,
            l.fraction * 100.0,
            l.offered_pps / 1e3,
            cells.join(" | "),
            l.rounds_kept,
            l.rounds_run,
            l.generator_short,
            l.fewest_samples,
        );
    }
    out
}

/// The section as JSON (`interval` writes one interval).
pub fn json(
    rates: &[RateRow],
    latency: &[FractionLatency],
    interval: fn(Option<Interval>) -> serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "pdr_loss": PDR_LOSS,
        "min_datagrams_beyond_a_percentile": MIN_BEYOND,
        "rates": rates.iter().map(|r| serde_json::json!({
            "setup": r.setup,
            "cores": r.cores,
            "ndr_pps_per_core": interval(r.ndr),
            "pdr_pps_per_core": interval(r.pdr),
            "searches": r.searches,
            "found_ndr": r.found.0,
            "found_pdr": r.found.1,
            "final_trial": r.final_trial.map(|f| serde_json::json!({
                "seconds": f.seconds,
                "offered_pps": f.trial.offered_pps,
                "sent_pps": f.trial.sent_pps,
                "loss": f.trial.loss(),
                "held": f.held(),
            })),
        })).collect::<Vec<_>>(),
        "latency": latency.iter().map(|l| serde_json::json!({
            "setup": l.setup,
            "fraction_of_pdr": l.fraction,
            "offered_pps": l.offered_pps,
            "percentiles_us": l.percentiles.iter().map(|(q, i)| serde_json::json!({
                "quantile": q,
                "us": interval(*i),
            })).collect::<Vec<_>>(),
            "rounds_kept": l.rounds_kept,
            "rounds_run": l.rounds_run,
            "generator_short": l.generator_short,
            "fewest_samples": l.fewest_samples,
        })).collect::<Vec<_>>(),
        "quantiles_kept_per_trial": CDF_QUANTILES,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::load::Latency;
    use crate::bench::rows::Run;
    use crate::bench::search::{Limit, SearchRun};

    fn trial(offered: u64, sent: u64, received: u64, samples: u64, p: [f64; 8]) -> Trial {
        Trial {
            offered_pps: offered,
            sent_pps: offered,
            sent,
            received,
            latency: Latency { samples, cdf_us: p },
        }
    }

    fn search(ndr: u64, pdr: u64) -> Run {
        Run {
            search: SearchRun {
                best: Some(trial(ndr, 1000, 1000, 0, [0.0; 8])),
                pdr: Some(trial(pdr, 1000, 998, 0, [0.0; 8])),
                limit: Limit::Loss,
                trials: vec![],
                discarded: None,
            },
            forwarder_us_per_packet: None,
            forwarder_busy: None,
            tools_busy: None,
            machine_us_per_packet: None,
            host_wake: None,
        }
    }

    #[test]
    fn five_searches_give_the_range_at_its_exact_coverage_per_core() {
        let row = Row {
            setup: "x".into(),
            runs: [100, 120, 110, 90, 130]
                .iter()
                .map(|k| search(k * 1000, k * 1100))
                .collect(),
            fixed: Trial::NONE,
            busy_polls: false,
        };
        let r = rate_row(&row, 2, None);
        let pdr = r.pdr.unwrap();
        assert_eq!(
            (pdr.median, pdr.low, pdr.high),
            (60_500.0, 49_500.0, 71_500.0)
        );
        assert!((pdr.confidence - 0.9375).abs() < 1e-9, "{}", pdr.confidence);
        assert_eq!(r.found, (5, 5));
        assert_eq!(r.ndr.unwrap().median, 55_000.0);
    }

    #[test]
    fn a_final_trial_holds_only_within_the_pdr_loss() {
        let held = FinalTrial {
            seconds: 10.0,
            trial: trial(1000, 10_000, 9_960, 0, [0.0; 8]),
        };
        let lost = FinalTrial {
            seconds: 10.0,
            trial: trial(1000, 10_000, 9_940, 0, [0.0; 8]),
        };
        assert!(held.held());
        assert!(!lost.held());
    }

    #[test]
    fn a_percentile_with_too_few_datagrams_beyond_it_is_not_shown() {
        // 20,000 samples: p99 has 200 beyond it, p99.9 20, p99.99 2 (too few).
        let cdf = [1.0, 2.0, 5.0, 8.0, 20.0, 40.0, 90.0, 100.0];
        let trials: Vec<PdrLatency> = (1..=5)
            .map(|round| PdrLatency {
                round,
                fraction: 0.5,
                trial: trial(50_000, 100_000, 100_000, 20_000, cdf),
            })
            .chain(std::iter::once(PdrLatency {
                round: 6,
                fraction: 0.5,
                // Lost 1 %: does not count.
                trial: trial(50_000, 100_000, 99_000, 20_000, [9e9; 8]),
            }))
            .chain(std::iter::once(PdrLatency {
                round: 7,
                fraction: 0.5,
                // The generator sent at 30k of the 50k asked: a latency at another rate.
                trial: Trial {
                    sent_pps: 30_000,
                    ..trial(50_000, 100_000, 100_000, 20_000, [9e9; 8])
                },
            }))
            .collect();
        let rows = fraction_latency(&[("x".into(), trials)], &[0.5, 0.9]);
        assert_eq!(rows.len(), 2);
        let half = &rows[0];
        assert_eq!(
            (half.rounds_kept, half.rounds_run, half.generator_short),
            (5, 7, 1)
        );
        let shown: Vec<Option<f64>> = half
            .percentiles
            .iter()
            .map(|(_, i)| i.map(|i| i.median))
            .collect();
        assert_eq!(shown, vec![Some(5.0), Some(20.0), Some(40.0), None]);
        let md = markdown(&[], &rows, 10.0);
        assert!(md.contains("| x | 50 % | 50 | 5 [5–5] | 20 [20–20] | 40 [40–40] | too few | 5 of 7 | 1 | 20000 |"), "{md}");
        // No trial at 90 %: nothing shown, not "too few".
        assert_eq!(rows[1].rounds_run, 0);
        assert!(
            md.contains("| x | 90 % | 0 | – | – | – | – | 0 of 0 | 0 | 0 |"),
            "{md}"
        );
    }

    #[test]
    fn percentile_names_read_as_written() {
        let names: Vec<String> = PERCENTILES.iter().map(|&q| percentile_name(q)).collect();
        assert_eq!(names, ["p50", "p99", "p99.9", "p99.99"]);
    }
}
