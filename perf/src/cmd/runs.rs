//! `ufrag-perf runs`: several `compare` reports of the same command as a level of
//! repetition. Each report's intervals say how sure one run is of itself; the spread
//! between runs says whether another run would agree (runs made 15 minutes apart have
//! given intervals that did not overlap). This puts the two side by side for the
//! verdict's headline ratio and each row's ratio to the baseline, says where they
//! disagree, and checks that the headline medians lie within ±10 % of their median and
//! each run's interval holds the others' medians.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::Value;

use super::diff::{EXIT_BAD_INPUT, EXIT_MOVED, EXIT_UNCHANGED, Report, read_json};
use crate::bench::stats::{Interval, median};

/// Several `compare` reports of the same command, as repeated runs: the between-run spread
/// of the headline ratio and of each row's ratio to relay-mio beside each run's own
/// interval, where they disagree, and whether the runs pass the check (headline
/// medians within ±10 % of their median, each run's interval holding the others'
/// medians). Exits 0 when all runs agree on the verdict's kind and pass both checks, 1
/// when they do not, 2 when a report cannot be read or has no per-round data.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// The reports' JSON (`compare --out X.md` writes `X.json`; `X.md` is read as `X.json`),
    /// at least two.
    #[arg(required = true, num_args = 2..)]
    pub reports: Vec<PathBuf>,
    /// The headline ratio's medians must lie within ± this share of their median (0.10 is
    /// 10 %).
    #[arg(long, default_value_t = 0.10)]
    pub tolerance: f64,
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    if let Err(why) = super::diff::check_settings(options.tolerance, 0.95) {
        eprintln!("runs: {why}");
        return EXIT_BAD_INPUT;
    }
    let mut reports = vec![];
    for path in &options.reports {
        match read_json(path) {
            Ok(json) => reports.push((path.display().to_string(), json)),
            Err(why) => {
                eprintln!("runs: {why}");
                return EXIT_BAD_INPUT;
            }
        }
    }
    let labelled: Vec<(&str, &Value)> = reports.iter().map(|(l, j)| (l.as_str(), j)).collect();
    let (code, text) = runs_values(&labelled, options.tolerance);
    if code == EXIT_BAD_INPUT {
        eprintln!("{text}");
    } else {
        print!("{text}");
    }
    code
}

/// The runs given as (label, JSON): the exit code and what to print (for code 2, why).
pub fn runs_values(reports: &[(&str, &Value)], tolerance: f64) -> (i32, String) {
    if reports.len() < 2 {
        return (
            EXIT_BAD_INPUT,
            "runs: at least two reports are needed to speak of a spread between runs".into(),
        );
    }
    let mut parsed = vec![];
    for (label, json) in reports {
        match Report::from_json(json) {
            Ok(r) => parsed.push((label.to_string(), r)),
            Err(why) => return (EXIT_BAD_INPUT, format!("runs: {label}: {why}")),
        }
    }
    let runs = Runs::new(parsed, tolerance);
    (runs.exit_code(), runs.markdown())
}

/// One figure (a ratio) across the runs: each run's median and interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Across {
    /// Each run's interval (`None`: not measured in that run).
    pub by_run: Vec<Option<Interval>>,
}

impl Across {
    /// The medians of the runs that measured it.
    fn medians(&self) -> Vec<f64> {
        self.by_run.iter().flatten().map(|i| i.median).collect()
    }

    /// The median of the runs' medians, and their lowest and highest.
    pub fn spread(&self) -> Option<(f64, f64, f64)> {
        let medians = self.medians();
        let centre = median(&medians)?;
        let low = medians.iter().copied().fold(f64::INFINITY, f64::min);
        let high = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some((centre, low, high))
    }

    /// Each run whose interval misses another run's median: (run, other run), 1-based.
    pub fn misses(&self) -> Vec<(usize, usize)> {
        let mut out = vec![];
        for (i, own) in self.by_run.iter().enumerate() {
            let Some(own) = own else { continue };
            for (j, other) in self.by_run.iter().enumerate() {
                if let Some(other) = other
                    && i != j
                    && !(own.low <= other.median && other.median <= own.high)
                {
                    out.push((i + 1, j + 1));
                }
            }
        }
        out
    }

    /// Each run's median as a signed share off the median of medians.
    pub fn deviations(&self) -> Vec<Option<f64>> {
        let Some((centre, _, _)) = self.spread() else {
            return vec![None; self.by_run.len()];
        };
        self.by_run
            .iter()
            .map(|i| i.map(|i| i.median / centre - 1.0))
            .collect()
    }
}

/// A check of whether the runs repeat, with the numbers behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// Whether it passed.
    pub pass: bool,
    /// What it found.
    pub detail: String,
}

/// The runs compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Runs {
    /// Each run's label (its path) and report.
    pub reports: Vec<(String, Report)>,
    /// The headline ratio across the runs.
    pub headline: Across,
    /// Each row's ratio to the baseline across the runs: key, display name, figures.
    pub rows: Vec<(String, String, Across)>,
    /// The headline medians within ±tolerance of their median.
    pub medians_close: Check,
    /// Each run's headline interval holding the other runs' medians.
    pub intervals_hold: Check,
    /// The share the medians must stay within.
    pub tolerance: f64,
}

impl Runs {
    /// Compares the runs' headline ratios and rows.
    pub fn new(reports: Vec<(String, Report)>, tolerance: f64) -> Runs {
        let headline = Across {
            by_run: reports.iter().map(|(_, r)| r.verdict.ratio).collect(),
        };
        let baseline = reports
            .first()
            .map_or_else(String::new, |(_, r)| r.baseline.clone());
        let mut keys: Vec<(String, String)> = vec![];
        for (_, report) in &reports {
            for row in &report.rows {
                if row.setup != baseline && !keys.iter().any(|(k, _)| k == &row.setup) {
                    keys.push((row.setup.clone(), row.name.clone()));
                }
            }
        }
        let rows = keys
            .into_iter()
            .map(|(key, name)| {
                let by_run = reports
                    .iter()
                    .map(|(_, r)| r.row(&key).and_then(|row| row.ratio_to_baseline))
                    .collect();
                (key, name, Across { by_run })
            })
            .collect();
        let withheld: Vec<String> = headline
            .by_run
            .iter()
            .enumerate()
            .filter(|(_, i)| i.is_none())
            .map(|(n, _)| format!("run {}", n + 1))
            .collect();
        let (medians_close, intervals_hold) = if withheld.is_empty() {
            (
                medians_check(&headline, tolerance),
                intervals_check(&headline),
            )
        } else {
            let missing = Check {
                pass: false,
                detail: format!(
                    "no headline ratio in {} (verdict withheld)",
                    withheld.join(", ")
                ),
            };
            (missing.clone(), missing)
        };
        Runs {
            reports,
            headline,
            rows,
            medians_close,
            intervals_hold,
            tolerance,
        }
    }

    /// The verdict kinds with how many runs gave each, most first.
    pub fn outcomes(&self) -> Vec<(String, usize)> {
        let mut counted: Vec<(String, usize)> = vec![];
        for (_, r) in &self.reports {
            match counted.iter_mut().find(|(k, _)| k == &r.verdict.kind) {
                Some((_, n)) => *n += 1,
                None => counted.push((r.verdict.kind.clone(), 1)),
            }
        }
        counted.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        counted
    }

    /// 0 when every run gave the same verdict kind, the headline medians lie within the
    /// tolerance and each run's interval holds the others' medians; else 1.
    pub fn exit_code(&self) -> i32 {
        if self.outcomes().len() == 1 && self.medians_close.pass && self.intervals_hold.pass {
            EXIT_UNCHANGED
        } else {
            EXIT_MOVED
        }
    }

    /// The display name of `setup` in the first run that has it.
    fn name_of(&self, setup: &str) -> String {
        self.reports
            .iter()
            .find_map(|(_, r)| r.row(setup).map(|row| row.name.clone()))
            .unwrap_or_else(|| setup.to_string())
    }

    /// The report: each run's verdict, the headline and the rows across runs, the checks,
    /// and a closing line.
    pub fn markdown(&self) -> String {
        let n = self.reports.len();
        let label = |i: &Option<Interval>| {
            i.map_or("–".to_string(), |i| {
                format!(
                    "{} ({:.1} %, {})",
                    i.label(2),
                    i.confidence * 100.0,
                    i.samples
                )
            })
        };
        let mut out = format!(
            "# ufrag-perf runs: {n} runs as a level of repetition\n\nEach run's own interval \
             (median [interval] (its coverage, rounds)) beside the spread between the runs \
             (the median of their medians [lowest–highest median]). The runs disagree where a \
             run's interval misses another run's median: the within-run interval then \
             understates what a new run would find.\n\n\
             | run | report | host | verdict | bypass row | headline ratio |\n\
             |---:|---|---|---|---|---|\n"
        );
        for (i, (path, r)) in self.reports.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {} | `{path}` | {} | {} | {} | {} |",
                i + 1,
                r.host,
                r.verdict.kind,
                r.verdict
                    .setup
                    .as_deref()
                    .map_or("–".into(), |s| self.name_of(s)),
                label(&r.verdict.ratio)
            );
        }
        let mut setups: Vec<&str> = self
            .reports
            .iter()
            .filter_map(|(_, r)| r.verdict.setup.as_deref())
            .collect();
        setups.sort_unstable();
        setups.dedup();
        if setups.len() > 1 {
            out.push_str(
                "\nThe runs chose different bypass rows for the headline, so their headline \
                 ratios are not of one row.\n",
            );
        }
        let differs = |what: &str, values: Vec<String>| {
            let mut distinct = values.clone();
            distinct.sort();
            distinct.dedup();
            (distinct.len() > 1).then(|| format!("{what} ({})", values.join(" / ")))
        };
        let settings: Vec<String> = [
            differs(
                "threshold",
                self.reports
                    .iter()
                    .map(|(_, r)| r.threshold.map_or("–".into(), |t| format!("{t:.3}")))
                    .collect(),
            ),
            differs(
                "loads",
                self.reports
                    .iter()
                    .map(|(_, r)| format!("{:?}", r.loads_pps))
                    .collect(),
            ),
            differs(
                "baseline row",
                self.reports
                    .iter()
                    .map(|(_, r)| r.baseline.clone())
                    .collect(),
            ),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !settings.is_empty() {
            let _ = writeln!(
                out,
                "\n**The runs were not made with the same settings**: {}. They are not \
                 repetitions of one command, and their outcomes need not agree.",
                settings.join("; ")
            );
        }
        let _ = writeln!(
            out,
            "\n## Across the runs\n\n| figure | {} | median of medians [range] | spread | runs disagree? |\n|---|{}---:|---:|---|",
            (1..=n)
                .map(|i| format!("run {i}"))
                .collect::<Vec<_>>()
                .join(" | "),
            "---:|".repeat(n)
        );
        let baseline = self
            .reports
            .first()
            .map_or_else(String::new, |(_, r)| r.baseline.clone());
        let figures = std::iter::once(("headline ratio".to_string(), &self.headline)).chain(
            self.rows
                .iter()
                .map(|(_, name, across)| (format!("{name} ÷ {}", self.name_of(&baseline)), across)),
        );
        for (figure, across) in figures {
            let cells: Vec<String> = across.by_run.iter().map(label).collect();
            let (spread, width) = across.spread().map_or(("–".into(), "–".into()), |s| {
                (
                    format!("{:.2} [{:.2}–{:.2}]", s.0, s.1, s.2),
                    format!(
                        "{:+.0} % / {:+.0} %",
                        (s.1 / s.0 - 1.0) * 100.0,
                        (s.2 / s.0 - 1.0) * 100.0
                    ),
                )
            });
            let misses = across.misses();
            let disagree = if across.medians().len() < 2 {
                "–".to_string()
            } else if misses.is_empty() {
                "no".to_string()
            } else {
                format!("**yes**: {}", misses_label(&misses))
            };
            let _ = writeln!(
                out,
                "| {figure} | {} | {spread} | {width} | {disagree} |",
                cells.join(" | ")
            );
        }
        let outcomes = self.outcomes();
        let outcome_line = outcomes
            .iter()
            .map(|(kind, k)| format!("{kind} in {k} of {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let pass = |c: &Check| if c.pass { "PASS" } else { "FAIL" };
        let _ = writeln!(
            out,
            "\n## Do the runs repeat?\n\n\
             - Outcome: {outcome_line}{}.\n\
             - Headline medians within ±{:.0} % of their median: **{}**: {}.\n\
             - Each run's headline interval holds the other runs' medians: **{}**: {}.\n",
            if outcomes.len() == 1 {
                ": the runs agree"
            } else {
                ": **the runs disagree on the verdict**"
            },
            self.tolerance * 100.0,
            pass(&self.medians_close),
            self.medians_close.detail,
            pass(&self.intervals_hold),
            self.intervals_hold.detail,
        );
        let _ = writeln!(
            out,
            "runs: {n} runs; verdict {outcome_line}; medians within ±{:.0} %: {}; intervals hold the others' medians: {}",
            self.tolerance * 100.0,
            pass(&self.medians_close),
            pass(&self.intervals_hold),
        );
        out
    }
}

/// "run 2's interval misses run 3's median, …".
fn misses_label(misses: &[(usize, usize)]) -> String {
    misses
        .iter()
        .map(|(own, other)| format!("run {own}'s interval misses run {other}'s median"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether every run's median lies within ±`tolerance` of the median of medians.
fn medians_check(headline: &Across, tolerance: f64) -> Check {
    let Some((centre, _, _)) = headline.spread() else {
        return Check {
            pass: false,
            detail: "no headline ratio".into(),
        };
    };
    let deviations = headline.deviations();
    let listed: Vec<String> = deviations
        .iter()
        .zip(&headline.by_run)
        .enumerate()
        .filter_map(|(i, (d, r))| {
            Some(format!(
                "run {} {:.2} ({:+.1} %)",
                i + 1,
                r.as_ref()?.median,
                (*d)? * 100.0
            ))
        })
        .collect();
    Check {
        // A hair of slack so that a median exactly on the bound, written through decimal
        // JSON, is not failed by rounding.
        pass: deviations
            .iter()
            .flatten()
            .all(|d| d.abs() <= tolerance + 1e-9),
        detail: format!("median of medians {centre:.3}; {}", listed.join(", ")),
    }
}

/// Whether every run's interval holds every other run's median.
fn intervals_check(headline: &Across) -> Check {
    let misses = headline.misses();
    let intervals: Vec<String> = headline
        .by_run
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let r = r.as_ref()?;
            Some(format!("run {} {:.2}–{:.2}", i + 1, r.low, r.high))
        })
        .collect();
    Check {
        pass: misses.is_empty(),
        detail: if misses.is_empty() {
            format!(
                "every interval holds every median ({})",
                intervals.join(", ")
            )
        } else {
            format!("{} ({})", misses_label(&misses), intervals.join(", "))
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::diff::tests::report;
    use serde_json::json;

    const ROWS: [(&str, f64); 2] = [("mio-bundles", 0.75), ("afxdp-skb-wakeup", 0.9)];
    const NOISE: [f64; 8] = [1.02, 0.97, 1.01, 0.99, 1.03, 0.98, 1.00, 1.02];

    fn runs_of(reports: &[Value]) -> (i32, String) {
        let labels: Vec<String> = (1..=reports.len()).map(|i| format!("r{i}.json")).collect();
        let given: Vec<(&str, &Value)> = labels
            .iter()
            .map(String::as_str)
            .zip(reports.iter())
            .collect();
        runs_values(&given, 0.10)
    }

    #[test]
    fn three_runs_that_agree_pass_both_checks() {
        let runs = [
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.82, 0.63, 0.93)),
            report(1.1, &ROWS, &NOISE, "inconclusive", (0.87, 0.72, 0.92)),
            report(0.9, &ROWS, &NOISE, "inconclusive", (0.85, 0.70, 0.95)),
        ];
        let (code, text) = runs_of(&runs);
        assert_eq!(code, EXIT_UNCHANGED, "{text}");
        assert!(
            text.contains("Outcome: inconclusive in 3 of 3: the runs agree"),
            "{text}"
        );
        assert!(
            text.contains("within ±10 % of their median: **PASS**: median of medians 0.850"),
            "{text}"
        );
        assert!(text.contains("run 1 0.82 (-3.5 %)"), "{text}");
        assert!(text.contains("other runs' medians: **PASS**"), "{text}");
        assert!(
            text.ends_with(
                "runs: 3 runs; verdict inconclusive in 3 of 3; medians within ±10 %: PASS; intervals hold the others' medians: PASS\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_run_whose_interval_misses_the_others_is_named_and_fails_the_check() {
        let runs = [
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.82, 0.63, 0.93)),
            // Close in median, but so narrow it holds neither other median.
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.90, 0.89, 0.91)),
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.85, 0.70, 0.95)),
        ];
        let (code, text) = runs_of(&runs);
        // The kinds agree, but the runs do not repeat: the check fails the exit code and
        // says where the spread is.
        assert_eq!(code, EXIT_MOVED, "{text}");
        assert!(text.contains("other runs' medians: **FAIL**"), "{text}");
        assert!(
            text.contains(
                "run 2's interval misses run 1's median, run 2's interval misses run 3's median"
            ),
            "{text}"
        );
        let medians_far = [
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.60, 0.50, 0.95)),
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.85, 0.55, 0.95)),
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.86, 0.55, 0.95)),
        ];
        let (code, text) = runs_of(&medians_far);
        assert_eq!(code, EXIT_MOVED, "{text}");
        assert!(
            text.contains("within ±10 % of their median: **FAIL**"),
            "{text}"
        );
        assert!(text.contains("run 1 0.60 (-29.4 %)"), "{text}");
    }

    #[test]
    fn runs_that_disagree_on_the_verdict_exit_one_and_count_the_outcomes() {
        let runs = [
            report(1.0, &ROWS, &NOISE, "warranted", (0.60, 0.55, 0.65)),
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.82, 0.63, 0.93)),
            report(1.0, &ROWS, &NOISE, "warranted", (0.62, 0.57, 0.66)),
        ];
        let (code, text) = runs_of(&runs);
        assert_eq!(code, EXIT_MOVED, "{text}");
        assert!(
            text.contains(
                "Outcome: warranted in 2 of 3, inconclusive in 1 of 3: **the runs disagree"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_row_whose_runs_disagree_is_flagged_in_its_line() {
        let runs = [
            report(1.0, &ROWS, &NOISE, "inconclusive", (0.82, 0.63, 0.93)),
            report(
                1.0,
                &[("mio-bundles", 0.5), ROWS[1]],
                &NOISE,
                "inconclusive",
                (0.82, 0.63, 0.93),
            ),
        ];
        let (_, text) = runs_of(&runs);
        let line = text
            .lines()
            .find(|l| l.starts_with("| row mio-bundles ÷"))
            .expect(&text);
        assert!(
            line.contains("**yes**: run 1's interval misses run 2's median"),
            "{line}"
        );
        let line = text
            .lines()
            .find(|l| l.starts_with("| row afxdp-skb-wakeup ÷"))
            .expect(&text);
        assert!(line.ends_with("| no |"), "{line}");
    }

    #[test]
    fn a_withheld_verdict_fails_the_checks_and_bad_input_exits_two() {
        let mut withheld = report(1.0, &ROWS, &NOISE, "withheld", (0.0, 0.0, 0.0));
        withheld["cost"]["verdict"] = json!({"kind": "withheld", "sentence": "…"});
        let judged = report(1.0, &ROWS, &NOISE, "inconclusive", (0.82, 0.63, 0.93));
        let (code, text) = runs_of(&[judged.clone(), withheld]);
        assert_eq!(code, EXIT_MOVED, "{text}");
        assert!(
            text.contains("**FAIL**: no headline ratio in run 2 (verdict withheld)"),
            "{text}"
        );
        let mut old = judged.clone();
        old["cost"]["rows"][0]
            .as_object_mut()
            .unwrap()
            .remove("by_round");
        let (code, text) = runs_of(&[judged.clone(), old]);
        assert_eq!(code, EXIT_BAD_INPUT);
        assert!(
            text.contains("r2.json: made before per-round data"),
            "{text}"
        );
        let (code, _) = runs_of(std::slice::from_ref(&judged));
        assert_eq!(code, EXIT_BAD_INPUT, "one run has no spread");
    }
}
