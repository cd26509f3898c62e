//! The instruction-count gate CI runs: every hot-path bench's callgrind instruction count
//! (read from iai-callgrind's `summary.json` files) against the committed baseline, as a
//! table of bench, baseline, now and change. A bench that costs more than [`TOLERANCE`]
//! above its baseline fails the gate, and so does a bench with no baseline or a baseline
//! with no bench, so a cost can neither creep in nor disappear unseen.
//!
//! A bench cheaper by more than the tolerance fails too, until its new count is accepted:
//! a baseline that is not kept up moves the gate's threshold without anyone seeing it.
//! The baseline is a text file, one `name instructions` line per bench and the compiler
//! that counted them, so accepting a new one ([`render_baseline`]) shows up in review as
//! a diff of that file; counts from another compiler are not compared (a compiler update
//! moves every count), the gate asks for a baseline of its own.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// The one place the gate's tolerance lives: a bench may cost up to 2 % more
/// instructions than its baseline.
pub const TOLERANCE: f64 = 0.02;

/// Instruction counts by bench name.
pub type Counts = BTreeMap<String, u64>;

/// How one bench compares with its baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within the tolerance either way.
    Within,
    /// Cheaper by more than the tolerance: fails until the new count is accepted, so the
    /// baseline follows every improvement.
    Improved,
    /// Dearer by more than the tolerance: fails.
    Regressed,
    /// A bench the baseline does not have: fails until the baseline is accepted.
    NoBaseline,
    /// A baseline entry no bench produced: fails (a bench that vanished gates nothing).
    NotRun,
}

impl Verdict {
    /// Whether the gate passes with this verdict.
    pub fn passes(self) -> bool {
        self == Verdict::Within
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Within => "ok",
            Verdict::Improved => "**improved: accept it**",
            Verdict::Regressed => "**REGRESSED**",
            Verdict::NoBaseline => "**no baseline**",
            Verdict::NotRun => "**not run**",
        }
    }
}

/// One line of the gate's table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The bench: `group::function.case`.
    pub name: String,
    /// Its committed count.
    pub baseline: Option<u64>,
    /// Its count in this run.
    pub now: Option<u64>,
    /// The verdict.
    pub verdict: Verdict,
}

impl Row {
    /// The relative change from the baseline (`None` when either side is missing).
    pub fn change(&self) -> Option<f64> {
        match (self.baseline, self.now) {
            (Some(b), Some(n)) if b > 0 => Some(n as f64 / b as f64 - 1.0),
            (Some(0), Some(n)) => Some(if n == 0 { 0.0 } else { f64::INFINITY }),
            _ => None,
        }
    }
}

/// Compares `now` with `baseline`, bench by bench, in name order.
pub fn compare(baseline: &Counts, now: &Counts, tolerance: f64) -> Vec<Row> {
    let mut names: Vec<&String> = baseline.keys().chain(now.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let (b, n) = (baseline.get(name).copied(), now.get(name).copied());
            let mut row = Row {
                name: name.clone(),
                baseline: b,
                now: n,
                verdict: Verdict::Within,
            };
            // Compared as counts against the scaled baseline, so a rise of exactly the
            // tolerance passes (a ratio minus one would round it above).
            row.verdict = match (b, n) {
                (None, _) => Verdict::NoBaseline,
                (_, None) => Verdict::NotRun,
                (Some(b), Some(n)) if n as f64 > b as f64 * (1.0 + tolerance) => Verdict::Regressed,
                (Some(b), Some(n)) if (n as f64) < b as f64 * (1.0 - tolerance) => {
                    Verdict::Improved
                }
                _ => Verdict::Within,
            };
            row
        })
        .collect()
}

/// Whether every row passes.
pub fn passes(rows: &[Row]) -> bool {
    rows.iter().all(|r| r.verdict.passes())
}

/// The table CI prints (Markdown).
pub fn table(rows: &[Row], tolerance: f64) -> String {
    let count = |v: Option<u64>| v.map_or_else(|| "–".to_string(), |v| v.to_string());
    let mut out = format!(
        "| bench | baseline | now | change | verdict (tolerance +{:.0} %) |\n|---|---:|---:|---:|---|\n",
        tolerance * 100.0
    );
    for r in rows {
        let change = r
            .change()
            .map_or_else(|| "–".to_string(), |c| format!("{:+.2} %", c * 100.0));
        out.push_str(&format!(
            "| {} | {} | {} | {change} | {} |\n",
            r.name,
            count(r.baseline),
            count(r.now),
            r.verdict.label()
        ));
    }
    out
}

/// The comment line that records the compiler.
const COMPILER: &str = "# compiler: ";

/// A baseline: the counts, and the compiler that counted them (if recorded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Baseline {
    /// Instruction counts by bench.
    pub counts: Counts,
    /// `rustc --version` of the run that counted them.
    pub compiler: Option<String>,
}

/// Parses a baseline file: `name instructions` per line; `#` starts a comment line, and
/// `# compiler: …` names the compiler.
pub fn parse_baseline(text: &str) -> Result<Baseline, String> {
    let mut baseline = Baseline::default();
    let counts = &mut baseline.counts;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(compiler) = line.strip_prefix(COMPILER) {
            baseline.compiler = Some(compiler.trim().to_string());
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(value), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("line {}: want `name instructions`: {line}", i + 1));
        };
        let value = value
            .parse()
            .map_err(|e| format!("line {}: {value}: {e}", i + 1))?;
        if counts.insert(name.to_string(), value).is_some() {
            return Err(format!("line {}: {name} twice", i + 1));
        }
    }
    Ok(baseline)
}

/// Writes `counts`, counted by `compiler`, as a baseline file.
pub fn render_baseline(counts: &Counts, compiler: &str) -> String {
    let mut out = format!(
        "# Callgrind instruction counts of the hot-path benches (scripts/instructions.sh).\n\
         # Accept new counts with `scripts/instructions.sh --accept`; review this diff.\n\
         {COMPILER}{compiler}\n",
    );
    for (name, value) in counts {
        out.push_str(&format!("{name} {value}\n"));
    }
    out
}

/// Why counts by compiler `now` cannot be compared with `baseline`'s, if they cannot.
pub fn compiler_mismatch(baseline: &Baseline, now: &str) -> Option<String> {
    match baseline.compiler.as_deref() {
        Some(recorded) if recorded == now => None,
        Some(recorded) => Some(format!(
            "the baseline was counted by {recorded}, this run by {now}: counts from two \
             compilers are not compared; accept a baseline for this one in a commit of its own"
        )),
        None => Some(format!(
            "the baseline names no compiler; accept one counted by {now}"
        )),
    }
}

/// Reads every iai-callgrind `summary.json` under `dir` (written with
/// `--save-summary=json`): the bench's name and its total instruction count (`Ir`).
pub fn read_summaries(dir: &Path) -> io::Result<Counts> {
    let mut counts = Counts::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "summary.json") {
                let text = std::fs::read_to_string(&path)?;
                let (name, ir) = summary_count(&text).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: {e}", path.display()),
                    )
                })?;
                counts.insert(name, ir);
            }
        }
    }
    Ok(counts)
}

/// The bench name (`file::group::function`, then `.id` for a case) and its total `Ir`
/// from one summary.
fn summary_count(text: &str) -> Result<(String, u64), String> {
    let summary: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let module = summary["module_path"].as_str().ok_or("no module_path")?;
    let name = match summary["id"].as_str() {
        Some(id) => format!("{module}.{id}"),
        None => module.to_string(),
    };
    let profile = summary["profiles"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["tool"] == "Callgrind"))
        .ok_or("no callgrind profile")?;
    let metrics = &profile["summaries"]["total"]["summary"]["Callgrind"]["Ir"]["metrics"];
    // `Left` is this run alone; `Both` is [this run, the previous one].
    let now = metrics
        .get("Left")
        .or_else(|| metrics.get("Both").and_then(|b| b.get(0)))
        .and_then(|m| m["Int"].as_u64())
        .ok_or("no Ir")?;
    Ok((name, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> Counts {
        pairs.iter().map(|&(n, v)| (n.to_string(), v)).collect()
    }

    #[test]
    fn a_rise_above_the_tolerance_fails_and_one_within_passes() {
        let baseline = counts(&[("a", 1000), ("b", 1000), ("c", 1000)]);
        let now = counts(&[("a", 1020), ("b", 1021), ("c", 900)]);
        let rows = compare(&baseline, &now, TOLERANCE);
        let verdicts: Vec<Verdict> = rows.iter().map(|r| r.verdict).collect();
        assert_eq!(
            verdicts,
            [Verdict::Within, Verdict::Regressed, Verdict::Improved]
        );
        assert!(!passes(&rows));
        assert!(passes(&rows[..1]));
        assert!(!passes(&rows[2..]), "an improvement not accepted fails");
    }

    #[test]
    fn a_bench_without_baseline_and_a_baseline_without_bench_both_fail() {
        let rows = compare(&counts(&[("gone", 5)]), &counts(&[("new", 5)]), TOLERANCE);
        assert_eq!(rows[0].verdict, Verdict::NotRun);
        assert_eq!(rows[1].verdict, Verdict::NoBaseline);
        assert!(rows.iter().all(|r| !r.verdict.passes()));
    }

    #[test]
    fn the_baseline_file_round_trips_and_rejects_bad_lines() {
        let c = counts(&[
            ("parse::classify", 12),
            ("flow_table::hit.flows_1k", 99_000),
        ]);
        let back =
            parse_baseline(&render_baseline(&c, "rustc 1.95.0 (59807616e 2026-04-14)")).unwrap();
        assert_eq!(back.counts, c);
        assert_eq!(
            back.compiler.as_deref(),
            Some("rustc 1.95.0 (59807616e 2026-04-14)")
        );
        assert_eq!(
            compiler_mismatch(&back, "rustc 1.95.0 (59807616e 2026-04-14)"),
            None
        );
        assert!(
            compiler_mismatch(&back, "rustc 1.96.0 (0 2026-05-28)")
                .is_some_and(|why| why.contains("1.95.0") && why.contains("1.96.0"))
        );
        assert!(compiler_mismatch(&parse_baseline("a 1").unwrap(), "rustc 1.95.0").is_some());
        assert!(parse_baseline("a 1 2").is_err());
        assert!(parse_baseline("a x").is_err());
        assert!(parse_baseline("a 1\na 2").is_err());
    }

    #[test]
    fn the_table_shows_every_bench_with_its_change() {
        let rows = compare(&counts(&[("a", 1000)]), &counts(&[("a", 1100)]), TOLERANCE);
        let t = table(&rows, TOLERANCE);
        assert!(
            t.contains("| a | 1000 | 1100 | +10.00 % | **REGRESSED** |"),
            "{t}"
        );
    }

    #[test]
    fn a_summary_gives_its_name_and_instruction_count() {
        let text = r#"{"module_path": "hot_path_instructions::flow_table::hit", "id": "flows_1k",
            "profiles": [{"tool": "Callgrind", "summaries": {"total": {"summary": {"Callgrind":
            {"Ir": {"metrics": {"Both": [{"Int": 120}, {"Int": 100}]}}}}}}}]}"#;
        assert_eq!(
            summary_count(text).unwrap(),
            (
                "hot_path_instructions::flow_table::hit.flows_1k".to_string(),
                120
            )
        );
        let no_case = text.replace(r#""id": "flows_1k","#, r#""id": null,"#);
        assert_eq!(
            summary_count(&no_case).unwrap().0,
            "hot_path_instructions::flow_table::hit"
        );
    }
}
