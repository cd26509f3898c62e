//! `ufrag-perf diff`: which rows of two `compare` reports (two commits, say) moved, with
//! intervals, and an exit code a CI job can gate on. It also holds the reading of a
//! report's cost section that `ufrag-perf runs` ([`super::runs`]) shares.
//!
//! A row is compared through its marginal cost per packet over the baseline row's
//! (relay-mio's) **in the same round of the same report**: whatever moved the whole host
//! between the two runs (a busier neighbour, another VM of the same kind, a new kernel)
//! moves both and cancels in the ratio, which absolute µs from two runs cannot do. The
//! change of a row is B's per-round ratios over A's, estimated by Hodges–Lehmann on the
//! logarithms with its Mann–Whitney interval ([`crate::bench::stats::shift_interval`]): no
//! distribution is assumed, and the rounds of the two reports need not pair up.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::bench::stats::{Interval, Shift, median_interval, shift_interval};

/// Exit code: nothing got costlier and the verdict's kind held.
pub const EXIT_UNCHANGED: i32 = 0;
/// Exit code: a row got costlier beyond the tolerance, or the verdict's kind changed
/// (for `runs`: the runs disagree on the verdict's kind).
pub const EXIT_MOVED: i32 = 1;
/// Exit code: a report could not be read or has no per-round data.
pub const EXIT_BAD_INPUT: i32 = 2;

/// What an old report (one written before `by_round` was recorded) is told.
pub const OLD_SCHEMA: &str = "made before per-round data was recorded; re-run compare";

/// Which rows and ratios moved between two `compare` reports (A the earlier, B the later),
/// with intervals. Exits 0 when no row got costlier and the verdict's kind held, 1 when a
/// row got costlier beyond the tolerance or the verdict's kind changed, 2 when a report
/// cannot be read or has no per-round data.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Report A (the earlier): the JSON `compare --out X.md` writes as `X.json` (`X.md` is
    /// read as `X.json`).
    pub a: PathBuf,
    /// Report B (the later).
    pub b: PathBuf,
    /// A row moved only when its change B/A lies beyond 1 ± this (a share: 0.10 is 10 %)
    /// and its interval excludes 1.
    #[arg(long, default_value_t = 0.10)]
    pub tolerance: f64,
    /// The confidence the rows' change intervals hold together: each row's is taken at
    /// 1 − (1 − this) / rows compared (Bonferroni), so that a gate over many rows does not
    /// flag one by chance.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// The row every other is taken in ratio to, in both reports: by default each
    /// report's baseline (relay-mio), which then cannot itself be seen to move, and a
    /// change shared by it and a row cancels. Name a row no commit of the project changes
    /// (`nftables`, the kernel's own forwarding) to gate relay-mio too.
    #[arg(long, value_name = "SETUP")]
    pub anchor: Option<String>,
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    if let Err(why) = check_settings(options.tolerance, options.confidence) {
        eprintln!("diff: {why}");
        return EXIT_BAD_INPUT;
    }
    let read = |path: &Path| read_json(path).map(|json| (path.display().to_string(), json));
    let (a, b) = match (read(&options.a), read(&options.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(why), _) | (_, Err(why)) => {
            eprintln!("diff: {why}");
            return EXIT_BAD_INPUT;
        }
    };
    let (code, text) = diff_values(
        (&a.0, &a.1),
        (&b.0, &b.1),
        options.tolerance,
        options.confidence,
        options.anchor.as_deref(),
    );
    if code == EXIT_BAD_INPUT {
        eprintln!("{text}");
    } else {
        print!("{text}");
    }
    code
}

/// A tolerance in [0, 1) and a confidence in (0, 1), or why not.
pub fn check_settings(tolerance: f64, confidence: f64) -> Result<(), String> {
    if !(0.0..1.0).contains(&tolerance) {
        return Err(format!(
            "--tolerance {tolerance}: a share in [0, 1) (0.10 is 10 %)"
        ));
    }
    if !(confidence > 0.0 && confidence < 1.0) {
        return Err(format!(
            "--confidence {confidence}: a probability in (0, 1)"
        ));
    }
    Ok(())
}

/// The JSON at `path` (a `.md` path is read as the `.json` beside it), or why it cannot be
/// read, naming the file.
pub fn read_json(path: &Path) -> Result<Value, String> {
    let path = if path.extension().is_some_and(|e| e == "md") {
        path.with_extension("json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))
}

/// Diffs two reports given as (label, JSON): the exit code and what to print (the table
/// and the closing line; for code 2, the reason).
/// `anchor` names the row the ratios are taken to, in place of each report's baseline.
pub fn diff_values(
    a: (&str, &Value),
    b: (&str, &Value),
    tolerance: f64,
    confidence: f64,
    anchor: Option<&str>,
) -> (i32, String) {
    let read = |(label, json): (&str, &Value)| {
        let mut report = Report::from_json(json).map_err(|why| format!("diff: {label}: {why}"))?;
        if let Some(anchor) = anchor {
            if report.row(anchor).is_none() {
                return Err(format!(
                    "diff: {label}: no row {anchor} to anchor the ratios to"
                ));
            }
            report.baseline = anchor.to_string();
        }
        Ok(report)
    };
    let parsed = read(a).and_then(|ra| {
        let rb = read(b)?;
        diff(&ra, &rb, tolerance, confidence).map_err(|why| format!("diff: {why}"))
    });
    match parsed {
        Ok(d) => {
            let text = d.markdown(a.0, b.0);
            let section = environment_section(&a.1["environment"], &b.1["environment"]);
            let text = match text.find("## Ratios to") {
                Some(at) => format!("{}{section}{}", &text[..at], &text[at..]),
                None => format!("{text}{section}"),
            };
            (d.exit_code(), text)
        }
        Err(why) => (EXIT_BAD_INPUT, why),
    }
}

/// What differs between the two runs' environment records (host, NICs and their
/// settings, binaries), so a change in cost is read beside a change of setting.
fn environment_section(a: &Value, b: &Value) -> String {
    let differences = crate::bench::settings::differences(a, b);
    if differences.is_empty() {
        return "## Environment\n\nB's environment record does not differ from A's (the \
                wake-up round trip and the CPU frequency, which vary by nature, aside).\n\n"
            .into();
    }
    let mut out = format!(
        "## Environment: what differs from A\n\n{} setting(s) differ between the runs; a \
         change in cost may come from one of them.\n\n",
        differences.len()
    );
    for line in differences {
        let _ = writeln!(out, "- {line}");
    }
    out.push('\n');
    out
}

/// The verdict of a report: its kind and, when judged, the headline ratio.
#[derive(Clone, Debug, PartialEq)]
pub struct Headline {
    /// `warranted`, `not_warranted`, `inconclusive` or `withheld`.
    pub kind: String,
    /// The bypass row the verdict chose.
    pub setup: Option<String>,
    /// Its per-round ratio to the best socket relay.
    pub ratio: Option<Interval>,
}

impl Headline {
    /// `kind: setup median [low–high] (coverage, rounds)`, or the kind alone.
    pub fn label(&self, name: impl Fn(&str) -> String) -> String {
        match (&self.setup, &self.ratio) {
            (Some(setup), Some(r)) => format!(
                "**{}**: {} ÷ the best socket relay {} ({:.1} %, {} rounds)",
                self.kind,
                name(setup),
                r.label(2),
                r.confidence * 100.0,
                r.samples
            ),
            _ => format!("**{}** (no headline ratio)", self.kind),
        }
    }
}

/// One row of a report's cost table, as diff and runs read it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The setup's key (`mio`, `mio-bundles`, `afxdp-native-wakeup`).
    pub setup: String,
    /// Its display name.
    pub name: String,
    /// The report's marginal µs per packet.
    pub marginal: Option<Interval>,
    /// The report's ratio to the baseline row (per round, through the loads both rows keep).
    pub ratio_to_baseline: Option<Interval>,
    /// Each kept round's marginal µs per packet, by round.
    pub by_round: Vec<(u64, f64)>,
}

/// A `compare` report's cost section.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The baseline row's key (relay-mio's).
    pub baseline: String,
    /// The verdict.
    pub verdict: Headline,
    /// The cost table's rows, in the report's order.
    pub rows: Vec<Row>,
    /// The host it ran on, as its environment record names it.
    pub host: String,
    /// The saving that warrants bypass, as a share of the socket relay's cost.
    pub threshold: Option<f64>,
    /// The fixed loads, packets per second.
    pub loads_pps: Vec<u64>,
}

/// An interval written by `compare` (`{median, low, high, confidence, samples}`); `None`
/// for `null` or anything else.
fn interval_from_json(json: &Value) -> Option<Interval> {
    Some(Interval {
        median: json["median"].as_f64()?,
        low: json["low"].as_f64()?,
        high: json["high"].as_f64()?,
        confidence: json["confidence"].as_f64().unwrap_or(0.0),
        samples: json["samples"].as_u64().unwrap_or(0) as usize,
    })
}

impl Report {
    /// Reads the cost section of a report's JSON, or says why it cannot: no cost section,
    /// or rows without per-round data (an old report).
    pub fn from_json(json: &Value) -> Result<Report, String> {
        let cost = json
            .get("cost")
            .filter(|c| c.is_object())
            .ok_or("no cost section: not a `ufrag-perf compare` report")?;
        let rows_json = cost["rows"]
            .as_array()
            .ok_or("the cost section has no rows")?;
        if rows_json.is_empty() {
            return Err("the cost section has no rows (no fixed-load rounds ran)".into());
        }
        let mut rows = vec![];
        for row in rows_json {
            let setup = row["setup"]
                .as_str()
                .ok_or("a cost row without a setup key")?
                .to_string();
            let Some(by_round_json) = row.get("by_round") else {
                return Err(OLD_SCHEMA.into());
            };
            let by_round_json = by_round_json
                .as_array()
                .ok_or_else(|| format!("row {setup}: by_round is not a list"))?;
            let mut by_round = vec![];
            for entry in by_round_json {
                let round = entry["round"]
                    .as_u64()
                    .ok_or_else(|| format!("row {setup}: a by_round entry without a round"))?;
                // serde_json writes a NaN as null: such a round has no usable cost.
                if let Some(us) = entry["marginal_us_per_packet"].as_f64() {
                    by_round.push((round, us));
                }
            }
            rows.push(Row {
                name: row["name"].as_str().unwrap_or(&setup).to_string(),
                setup,
                marginal: interval_from_json(&row["marginal_us_per_packet"]),
                ratio_to_baseline: interval_from_json(&row["ratio_to_baseline"]),
                by_round,
            });
        }
        let baseline = cost["baseline"]
            .as_str()
            .ok_or("the cost section names no baseline row")?
            .to_string();
        let verdict = &cost["verdict"];
        let kind = verdict["kind"]
            .as_str()
            .ok_or("the cost section has no verdict kind")?
            .to_string();
        let environment = &json["environment"];
        let text = |v: &Value| v.as_str().unwrap_or("unknown").trim().to_string();
        Ok(Report {
            baseline,
            verdict: Headline {
                kind,
                setup: verdict["setup"].as_str().map(str::to_string),
                ratio: interval_from_json(&verdict["ratio"]),
            },
            rows,
            host: format!(
                "{}, {} vCPUs, Linux {}",
                text(&environment["cpu_model"]),
                environment["vcpus"],
                text(&environment["kernel"])
            ),
            threshold: cost["threshold"]
                .as_f64()
                .or_else(|| verdict["threshold"].as_f64()),
            loads_pps: cost["loads_pps"]
                .as_array()
                .map(|l| l.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default(),
        })
    }

    /// The row of `setup`.
    pub fn row(&self, setup: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.setup == setup)
    }

    /// The display name of `setup` (its key when the report has no such row).
    pub fn name_of(&self, setup: &str) -> String {
        self.row(setup)
            .map_or_else(|| setup.to_string(), |r| r.name.clone())
    }

    /// `setup`'s marginal cost over the baseline row's in each round both were kept, and
    /// how many such rounds were left out for a ratio that is not positive (a row as cheap
    /// as the null row can come out at or below zero; a logarithm needs it above).
    pub fn ratios_to_baseline(&self, setup: &str) -> (Vec<f64>, usize) {
        let (Some(row), Some(baseline)) = (self.row(setup), self.row(&self.baseline)) else {
            return (vec![], 0);
        };
        let mut ratios = vec![];
        let mut left_out = 0;
        for (round, us) in &row.by_round {
            let Some((_, base)) = baseline.by_round.iter().find(|(r, _)| r == round) else {
                continue;
            };
            let ratio = us / base;
            if ratio.is_finite() && ratio > 0.0 {
                ratios.push(ratio);
            } else {
                left_out += 1;
            }
        }
        (ratios, left_out)
    }
}

/// Whether a row moved between the reports.
#[derive(Clone, Debug, PartialEq)]
pub enum Movement {
    /// Its change's interval lies above 1 and the estimate beyond 1 + tolerance.
    Costlier,
    /// Its change's interval lies below 1 and the estimate below 1 − tolerance.
    Cheaper,
    /// Neither.
    Held,
    /// Its rounds cannot give an interval at the confidence asked; why.
    TooFewRounds(String),
}

/// One row compared between the reports.
#[derive(Clone, Debug, PartialEq)]
pub struct RowDiff {
    /// The setup's key.
    pub setup: String,
    /// Its display name (B's).
    pub name: String,
    /// Its per-round ratio to the baseline in A, and in B.
    pub ratio: (Option<Interval>, Option<Interval>),
    /// B's per-round ratios over A's, as a multiplicative change (the exponential of the
    /// log shift, so `estimate`, `low` and `high` are ratios).
    pub change: Option<Shift>,
    /// Whether it moved.
    pub movement: Movement,
    /// Its per-round marginal µs per packet in A, and in B.
    pub marginal: (Option<Interval>, Option<Interval>),
    /// B's per-round marginal µs over A's as a difference (µs, B − A).
    pub marginal_shift: Option<Shift>,
    /// Rounds left out of its ratios for a ratio not above zero, in A and in B.
    pub left_out: (usize, usize),
}

/// Two reports compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// The baseline row's key and display name.
    pub baseline: (String, String),
    /// The rows in both reports (the baseline's absolute cost included), A's order.
    pub rows: Vec<RowDiff>,
    /// Rows only A has, only B has.
    pub only_in: (Vec<String>, Vec<String>),
    /// A's verdict and B's.
    pub verdict: (Headline, Headline),
    /// The hosts named by A and B.
    pub hosts: (String, String),
    /// A row moved only beyond 1 ± this.
    pub tolerance: f64,
    /// The confidence the change intervals hold together, and each row's.
    pub confidence: (f64, f64),
}

/// Compares `b` with `a`: each row's per-round ratio to the baseline, and the verdict.
/// Fails when the reports have different baselines or the baseline row has no kept
/// round in one of them (nothing to take ratios against).
pub fn diff(a: &Report, b: &Report, tolerance: f64, confidence: f64) -> Result<Diff, String> {
    if a.baseline != b.baseline {
        return Err(format!(
            "the reports have different baseline rows ({} and {}): their ratios do not compare",
            a.baseline, b.baseline
        ));
    }
    let baseline = &a.baseline;
    for (which, report) in [("A", a), ("B", b)] {
        if report.row(baseline).is_none_or(|r| r.by_round.is_empty()) {
            return Err(format!(
                "report {which}: the baseline row ({baseline}) has no kept round, so no ratio \
                 can be taken (the host gate's table in its Markdown says why)"
            ));
        }
    }
    let compared: Vec<&Row> = a
        .rows
        .iter()
        .filter(|r| &r.setup != baseline && b.row(&r.setup).is_some())
        .collect();
    // Bonferroni: the rows' intervals hold together at `confidence`.
    let each = 1.0 - (1.0 - confidence) / compared.len().max(1) as f64;
    let per_round = |report: &Report, setup: &str| -> Vec<f64> {
        report
            .row(setup)
            .map(|r| r.by_round.iter().map(|(_, us)| *us).collect())
            .unwrap_or_default()
    };
    let absolute = |setup: &str| {
        let (ma, mb) = (per_round(a, setup), per_round(b, setup));
        (
            (
                median_interval(&ma, confidence),
                median_interval(&mb, confidence),
            ),
            shift_interval(&ma, &mb, confidence),
        )
    };
    let mut rows = vec![];
    // The baseline's own ratio is 1 in every round; only its absolute cost is shown.
    let (marginal, marginal_shift) = absolute(baseline);
    rows.push(RowDiff {
        setup: baseline.clone(),
        name: b.name_of(baseline),
        ratio: (None, None),
        change: None,
        movement: Movement::Held,
        marginal,
        marginal_shift,
        left_out: (0, 0),
    });
    for row in compared {
        let (ra, left_a) = a.ratios_to_baseline(&row.setup);
        let (rb, left_b) = b.ratios_to_baseline(&row.setup);
        let logs = |v: &[f64]| v.iter().map(|r| r.ln()).collect::<Vec<_>>();
        let change = shift_interval(&logs(&ra), &logs(&rb), each).map(|s| Shift {
            estimate: s.estimate.exp(),
            low: s.low.exp(),
            high: s.high.exp(),
            ..s
        });
        let (marginal, marginal_shift) = absolute(&row.setup);
        rows.push(RowDiff {
            setup: row.setup.clone(),
            name: b.name_of(&row.setup),
            ratio: (
                median_interval(&ra, confidence),
                median_interval(&rb, confidence),
            ),
            movement: movement(change.as_ref(), (ra.len(), rb.len()), tolerance, each),
            change,
            marginal,
            marginal_shift,
            left_out: (left_a, left_b),
        });
    }
    let only = |x: &Report, y: &Report| -> Vec<String> {
        x.rows
            .iter()
            .filter(|r| y.row(&r.setup).is_none())
            .map(|r| r.name.clone())
            .collect()
    };
    Ok(Diff {
        baseline: (baseline.clone(), b.name_of(baseline)),
        rows,
        only_in: (only(a, b), only(b, a)),
        verdict: (a.verdict.clone(), b.verdict.clone()),
        hosts: (a.host.clone(), b.host.clone()),
        tolerance,
        confidence: (confidence, each),
    })
}

/// Whether a change (multiplicative, with `rounds` ratios from A and from B behind it)
/// moved: its interval must reach the confidence asked, exclude 1, and its estimate lie
/// beyond 1 ± `tolerance`.
fn movement(
    change: Option<&Shift>,
    rounds: (usize, usize),
    tolerance: f64,
    confidence: f64,
) -> Movement {
    let Some(c) = change else {
        return Movement::TooFewRounds(format!(
            "{} rounds with a ratio in A, {} in B",
            rounds.0, rounds.1
        ));
    };
    // The discrete law of U cannot reach every confidence: a row with few rounds may be
    // unable to, and then its interval is too short to gate on.
    if c.confidence + 1e-12 < confidence {
        return Movement::TooFewRounds(format!(
            "{} and {} rounds reach only {:.1} % of the {:.1} % asked",
            c.before,
            c.after,
            c.confidence * 100.0,
            confidence * 100.0
        ));
    }
    if c.low > 1.0 && c.estimate > 1.0 + tolerance {
        Movement::Costlier
    } else if c.high < 1.0 && c.estimate < 1.0 - tolerance {
        Movement::Cheaper
    } else {
        Movement::Held
    }
}

impl Diff {
    /// The rows (besides the baseline) that moved `which` way.
    pub fn moved(&self, which: &Movement) -> Vec<&RowDiff> {
        self.rows.iter().filter(|r| &r.movement == which).collect()
    }

    /// Whether the verdict's kind differs between the reports.
    pub fn verdict_changed(&self) -> bool {
        self.verdict.0.kind != self.verdict.1.kind
    }

    /// Whether some row had too few rounds in either report to say whether it moved: a
    /// gate passes nothing it could not judge.
    pub fn undecided(&self) -> bool {
        self.compared()
            .any(|r| matches!(r.movement, Movement::TooFewRounds(_)))
    }

    /// 1 when a row got costlier, a row could not be judged, or the verdict's kind
    /// changed; else 0.
    pub fn exit_code(&self) -> i32 {
        if !self.moved(&Movement::Costlier).is_empty() || self.verdict_changed() || self.undecided()
        {
            EXIT_MOVED
        } else {
            EXIT_UNCHANGED
        }
    }

    /// The rows compared (the baseline is not: its ratio is 1 by construction).
    fn compared(&self) -> impl Iterator<Item = &RowDiff> {
        self.rows.iter().filter(|r| r.setup != self.baseline.0)
    }

    /// The report: the ratio table, the verdicts, the absolute costs (secondary), and the
    /// closing line a CI log shows.
    pub fn markdown(&self, a: &str, b: &str) -> String {
        // Every interval with the coverage it has: few rounds cannot reach the one asked.
        let label = |i: &Option<Interval>, digits: usize| {
            i.map_or("–".to_string(), |i| {
                format!("{} ({:.1} %)", i.label(digits), i.confidence * 100.0)
            })
        };
        let pct = |x: f64| format!("{:.1} %", x * 100.0);
        let law = |s: &Shift| if s.exact { "exact" } else { "normal approx." };
        let baseline = &self.baseline.1;
        let mut out = format!(
            "# ufrag-perf diff\n\n- A: `{a}` ({})\n- B: `{b}` ({})\n\n## Ratios to {baseline}\n\n\
             Each row's marginal µs per packet over {baseline}'s in the same round of the \
             same report (host drift between the runs cancels in it): median [interval asking \
             {}] (the coverage it has) of the per-round ratios, each round's from the two \
             rows' own lines (`by_round`; the report's own ratio refits both over the loads \
             both carried, so it can differ a little where a row lost a load). The change is \
             B's per-round ratios over A's: the Hodges–Lehmann estimate of the shift of their \
             logarithms with its Mann–Whitney (Wilcoxon rank-sum) interval, taken back to a \
             factor; the law of the rank sum is exact up to 2,500 pairs of rounds, else its \
             normal approximation (the coverage column says which). Each row's interval asks \
             {} so that the rows hold together at {}. A row moved when its interval excludes \
             1 and the estimate lies beyond 1 ± {:.0} %.\n\n\
             | row | A: ratio to {baseline} | B: ratio to {baseline} | change B/A [interval] | coverage | moved? |\n\
             |---|---:|---:|---:|---:|---|\n",
            self.hosts.0,
            self.hosts.1,
            pct(self.confidence.0),
            pct(self.confidence.1),
            pct(self.confidence.0),
            self.tolerance * 100.0,
        );
        for r in self.compared() {
            let moved = match &r.movement {
                Movement::Costlier => "**costlier**".to_string(),
                Movement::Cheaper => "**cheaper**".to_string(),
                Movement::Held => "no".to_string(),
                Movement::TooFewRounds(why) => format!("cannot say ({why})"),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {moved} |",
                r.name,
                label(&r.ratio.0, 2),
                label(&r.ratio.1, 2),
                r.change.map_or("–".into(), |c| format!(
                    "{:.2} [{:.2}–{:.2}]",
                    c.estimate, c.low, c.high
                )),
                r.change.map_or("–".into(), |c| format!(
                    "{} ({}, {}+{} rounds)",
                    pct(c.confidence),
                    law(&c),
                    c.before,
                    c.after
                )),
            );
        }
        let left_out: Vec<String> = self
            .compared()
            .filter(|r| r.left_out != (0, 0))
            .map(|r| format!("{}: {} in A, {} in B", r.name, r.left_out.0, r.left_out.1))
            .collect();
        if !left_out.is_empty() {
            let _ = writeln!(
                out,
                "\nRounds left out of a row's ratios for a marginal cost at or below zero (as \
                 cheap as the null row, where a ratio has no logarithm): {}.",
                left_out.join("; ")
            );
        }
        let (va, vb) = &self.verdict;
        let name = |setup: &str| {
            self.rows
                .iter()
                .find(|r| r.setup == setup)
                .map_or(setup.to_string(), |r| r.name.clone())
        };
        let _ = writeln!(
            out,
            "\n## Verdict\n\n- A: {}\n- B: {}\n\nThe verdict's kind {}.",
            va.label(name),
            vb.label(name),
            if self.verdict_changed() {
                format!("**changed**: {} → {}", va.kind, vb.kind)
            } else {
                format!("held: {}", va.kind)
            }
        );
        let _ = writeln!(
            out,
            "\n## Absolute marginal cost (secondary)\n\nµs per packet of each row, median \
             [interval asking {}] (its coverage) over its kept rounds, and B − A \
             (Hodges–Lehmann, Mann–Whitney interval asking {}). Absolute µs from different runs also carry host drift (another \
             host or neighbour, a busier moment, another kernel): a change here with none in \
             the ratio above is the host, not the code. The gate reads only the ratios.\n\n\
             | row | A: µs per packet | B: µs per packet | B − A µs [interval] | coverage |\n\
             |---|---:|---:|---:|---:|",
            pct(self.confidence.0),
            pct(self.confidence.0),
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                r.name,
                label(&r.marginal.0, 2),
                label(&r.marginal.1, 2),
                r.marginal_shift.map_or("–".into(), |s| format!(
                    "{:+.2} [{:+.2} – {:+.2}]",
                    s.estimate, s.low, s.high
                )),
                r.marginal_shift.map_or("–".into(), |s| format!(
                    "{} ({})",
                    pct(s.confidence),
                    law(&s)
                )),
            );
        }
        let (only_a, only_b) = &self.only_in;
        if !only_a.is_empty() || !only_b.is_empty() {
            let list = |v: &[String]| {
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.join(", ")
                }
            };
            let _ = writeln!(
                out,
                "\nNot compared: only in A: {}; only in B: {}.",
                list(only_a),
                list(only_b)
            );
        }
        out.push('\n');
        let costlier = self.moved(&Movement::Costlier);
        let cheaper = self.moved(&Movement::Cheaper);
        let named = |rows: &[&RowDiff]| {
            rows.iter()
                .map(|r| match r.change {
                    Some(c) => format!(
                        "{} ({:.2} [{:.2}–{:.2}])",
                        r.name, c.estimate, c.low, c.high
                    ),
                    None => r.name.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !costlier.is_empty() {
            let _ = writeln!(
                out,
                "costlier beyond {:.0} %: {}",
                self.tolerance * 100.0,
                named(&costlier)
            );
        }
        if !cheaper.is_empty() {
            let _ = writeln!(
                out,
                "cheaper beyond {:.0} %: {}",
                self.tolerance * 100.0,
                named(&cheaper)
            );
        }
        let _ = writeln!(
            out,
            "diff: {} rows compared, {} costlier, {} cheaper; verdict {} → {}",
            self.compared().count(),
            costlier.len(),
            cheaper.len(),
            va.kind,
            vb.kind
        );
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// Host drift over eight rounds: relay-mio's marginal µs per packet in each.
    pub(crate) const MIO: [f64; 8] = [6.1, 6.4, 5.9, 6.3, 6.0, 6.2, 6.5, 5.8];
    /// Round-to-round noise of a row against relay-mio (±3 %).
    const NOISE: [f64; 8] = [1.02, 0.97, 1.01, 0.99, 1.03, 0.98, 1.00, 1.02];
    /// Other noise, for a second run.
    const OTHER_NOISE: [f64; 8] = [0.99, 1.02, 0.98, 1.01, 1.00, 1.03, 0.97, 1.01];

    /// A report in the current schema: relay-mio costing `mio × drift` in each round, and
    /// each `(setup, share)` row `share` of that times `noise`; the verdict's `kind` with
    /// a headline ratio `headline` (median, low, high).
    pub(crate) fn report(
        drift: f64,
        rows: &[(&str, f64)],
        noise: &[f64; 8],
        kind: &str,
        headline: (f64, f64, f64),
    ) -> Value {
        let interval = |(median, low, high): (f64, f64, f64)| json!({"median": median, "low": low, "high": high, "confidence": 0.992, "samples": 8});
        let row = |setup: &str, per_round: Vec<f64>, share: f64| {
            json!({
                "setup": setup,
                "name": format!("row {setup}"),
                "marginal_us_per_packet": interval((6.2 * share, 5.9 * share, 6.4 * share)),
                "fixed_cores": null,
                "ratio_to_baseline": interval((share, share * 0.97, share * 1.03)),
                "rounds_kept": per_round.len(),
                "rounds_run": 8,
                "by_round": per_round.iter().enumerate().map(|(i, us)| json!({
                    "round": i + 1, "marginal_us_per_packet": us, "fixed_cores": 0.01, "loads": 4,
                })).collect::<Vec<_>>(),
            })
        };
        let mio: Vec<f64> = MIO.iter().map(|us| us * drift).collect();
        let mut all = vec![row("mio", mio.clone(), 1.0)];
        for (setup, share) in rows {
            let per_round = mio
                .iter()
                .zip(noise)
                .map(|(us, n)| us * share * n)
                .collect();
            all.push(row(setup, per_round, *share));
        }
        json!({
            "environment": {"cpu_model": "AMD EPYC", "kernel": "6.1.0", "vcpus": 2},
            "cost": {
                "baseline": "mio",
                "null_row": "direct",
                "threshold": 1.0 / 3.0,
                "loads_pps": [10000, 20000, 35000, 50000],
                "verdict": {
                    "kind": kind,
                    "sentence": "…",
                    "setup": "afxdp-skb-wakeup",
                    "ratio": interval(headline),
                },
                "rows": all,
                "samples": [],
            }
        })
    }

    const ROWS: [(&str, f64); 2] = [("mio-bundles", 0.75), ("afxdp-skb-wakeup", 0.9)];

    fn diffed(a: &Value, b: &Value) -> (i32, String) {
        diff_values(("a.json", a), ("b.json", b), 0.10, 0.95, None)
    }

    #[test]
    fn the_same_ratios_on_a_host_a_fifth_slower_move_nothing() {
        let a = report(1.0, &ROWS, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        // Every absolute cost 20 % higher (host drift), other noise: the ratios hold.
        let b = report(1.2, &ROWS, &OTHER_NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let (code, text) = diffed(&a, &b);
        assert_eq!(code, EXIT_UNCHANGED, "{text}");
        assert!(
            text.ends_with(
                "diff: 2 rows compared, 0 costlier, 0 cheaper; verdict inconclusive → inconclusive\n"
            ),
            "{text}"
        );
        let d = diff(
            &Report::from_json(&a).unwrap(),
            &Report::from_json(&b).unwrap(),
            0.10,
            0.95,
        )
        .unwrap();
        for r in d.compared() {
            let c = r.change.unwrap();
            assert!(c.low < 1.0 && c.high > 1.0, "{}: {c:?}", r.setup);
            assert_eq!(r.movement, Movement::Held);
        }
        // The absolute cost shows the drift, and is not what the gate reads.
        let mio = d.rows.iter().find(|r| r.setup == "mio").unwrap();
        assert!(mio.marginal_shift.unwrap().low > 0.5, "{mio:?}");
        // Two rows compared: each interval asks 97.5 %.
        assert!((d.confidence.1 - 0.975).abs() < 1e-12);
    }

    #[test]
    fn a_diff_names_what_differs_in_the_environment_and_says_when_nothing_does() {
        let a = report(1.0, &ROWS, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let (_, same) = diffed(&a, &a);
        assert!(same.contains("does not differ from A's"), "{same}");
        let mut b = a.clone();
        b["environment"]["kernel"] = json!("6.12.0");
        b["environment"]["nic"] = json!({"settings": {"irq_affinity": {"eth2-TxRx-0": "0"}}});
        let (_, text) = diffed(&a, &b);
        let section = &text[text.find("## Environment").unwrap()..text.find("## Ratios").unwrap()];
        assert!(section.contains("- kernel: 6.1.0 → 6.12.0"), "{section}");
        assert!(
            section.contains("- nic.settings.irq_affinity.eth2-TxRx-0: (not recorded) → 0"),
            "{section}"
        );
    }

    #[test]
    fn a_row_made_thirty_percent_costlier_in_every_round_is_flagged_and_named() {
        let a = report(1.0, &ROWS, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let costlier = [("mio-bundles", 0.75 * 1.3), ("afxdp-skb-wakeup", 0.9)];
        let b = report(1.0, &costlier, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let (code, text) = diffed(&a, &b);
        assert_eq!(code, EXIT_MOVED, "{text}");
        assert!(
            text.contains("costlier beyond 10 %: row mio-bundles (1.30"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "diff: 2 rows compared, 1 costlier, 0 cheaper; verdict inconclusive → inconclusive\n"
            ),
            "{text}"
        );
        // The other way round it is cheaper, which does not fail the gate.
        let (code, text) = diffed(&b, &a);
        assert_eq!(code, EXIT_UNCHANGED, "{text}");
        assert!(text.contains("1 cheaper"), "{text}");
    }

    #[test]
    fn a_change_within_the_tolerance_is_not_a_move_even_when_its_interval_excludes_one() {
        let a = report(1.0, &ROWS, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let b_rows = [("mio-bundles", 0.75 * 1.05), ("afxdp-skb-wakeup", 0.9)];
        let b = report(1.0, &b_rows, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let d = diff(
            &Report::from_json(&a).unwrap(),
            &Report::from_json(&b).unwrap(),
            0.10,
            0.95,
        )
        .unwrap();
        let bundles = d.rows.iter().find(|r| r.setup == "mio-bundles").unwrap();
        assert!(bundles.change.unwrap().low > 1.0, "{bundles:?}");
        assert_eq!(bundles.movement, Movement::Held);
        assert_eq!(d.exit_code(), EXIT_UNCHANGED);
    }

    #[test]
    fn a_change_of_the_verdicts_kind_fails_the_gate() {
        let a = report(1.0, &ROWS, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let b = report(1.0, &ROWS, &NOISE, "warranted", (0.6, 0.55, 0.65));
        let (code, text) = diffed(&a, &b);
        assert_eq!(code, EXIT_MOVED, "{text}");
        assert!(
            text.contains("**changed**: inconclusive → warranted"),
            "{text}"
        );
        assert!(
            text.contains("0.60 [0.55–0.65]"),
            "the headline ratio: {text}"
        );
        assert!(
            text.ends_with("verdict inconclusive → warranted\n"),
            "{text}"
        );
    }

    #[test]
    fn an_old_report_or_no_report_is_bad_input() {
        let a = report(1.0, &ROWS, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let mut old = a.clone();
        for row in old["cost"]["rows"].as_array_mut().unwrap() {
            row.as_object_mut().unwrap().remove("by_round");
        }
        let (code, text) = diffed(&a, &old);
        assert_eq!(code, EXIT_BAD_INPUT);
        assert!(
            text.contains("b.json: made before per-round data was recorded; re-run compare"),
            "{text}"
        );
        let (code, text) = diffed(&json!({"rows": []}), &a);
        assert_eq!(code, EXIT_BAD_INPUT);
        assert!(text.contains("a.json: no cost section"), "{text}");
        // A baseline the host gate left with no round: nothing to take ratios against.
        let mut empty = a.clone();
        empty["cost"]["rows"][0]["by_round"] = json!([]);
        let (code, text) = diffed(&empty, &a);
        assert_eq!(code, EXIT_BAD_INPUT);
        assert!(text.contains("has no kept round"), "{text}");
    }

    #[test]
    fn a_row_with_too_few_rounds_cannot_move_and_fails_the_gate() {
        let a = report(1.0, &ROWS, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let costlier = [("mio-bundles", 0.75 * 1.3), ("afxdp-skb-wakeup", 0.9)];
        let mut b = report(1.0, &costlier, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        // Two rounds of B kept: 8 and 2 values reach at most 1 − 2/45 = 95.6 % < 97.5 %.
        b["cost"]["rows"][1]["by_round"]
            .as_array_mut()
            .unwrap()
            .truncate(2);
        let (code, text) = diffed(&a, &b);
        assert_eq!(
            code, EXIT_MOVED,
            "what it cannot judge it does not pass: {text}"
        );
        assert!(
            text.contains("cannot say (8 and 2 rounds reach only"),
            "{text}"
        );
    }

    #[test]
    fn a_ratio_not_above_zero_is_left_out_and_counted() {
        let a = report(1.0, &ROWS, &NOISE, "inconclusive", (0.9, 0.8, 1.0));
        let mut b = a.clone();
        b["cost"]["rows"][2]["by_round"][0]["marginal_us_per_packet"] = json!(-0.2);
        let (a, b) = (
            Report::from_json(&a).unwrap(),
            Report::from_json(&b).unwrap(),
        );
        assert_eq!(b.ratios_to_baseline("afxdp-skb-wakeup").1, 1);
        assert_eq!(b.ratios_to_baseline("afxdp-skb-wakeup").0.len(), 7);
        let text = diff(&a, &b, 0.1, 0.95).unwrap().markdown("a", "b");
        assert!(
            text.contains("row afxdp-skb-wakeup: 0 in A, 1 in B"),
            "{text}"
        );
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        assert!(check_settings(0.1, 0.95).is_ok());
        assert!(check_settings(-0.1, 0.95).is_err());
        assert!(check_settings(f64::NAN, 0.95).is_err());
        assert!(check_settings(0.1, 1.0).is_err());
    }
}
