//! `perf gate`: the CI's instruction-count gate over [`crate::cmd::gate::counts`].

pub mod counts;

/// The CI gate: the hot-path benches' callgrind instruction counts (iai-callgrind
/// summaries) against the committed baseline; exits 1 when one rose or fell more than 2 %
/// (an improvement is accepted, not passed), or when another compiler counted them.
/// Run through `scripts/instructions.sh`, which runs the benches first.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Where the benches wrote their `summary.json` files.
    #[arg(long, default_value = "target/iai")]
    pub summaries: std::path::PathBuf,
    /// The committed baseline.
    #[arg(long, default_value = "common/benches/instructions.baseline")]
    pub baseline: std::path::PathBuf,
    /// Write this run's counts as the new baseline instead of gating.
    #[arg(long)]
    pub accept: bool,
}

/// Runs it; the process's exit code.
pub fn run(options: Options) -> i32 {
    let Options {
        summaries,
        baseline,
        accept,
    } = options;
    gate(&summaries, &baseline, accept)
}

/// `perf gate`: prints the table and returns the exit code (0: passed or accepted).
pub fn gate(summaries: &std::path::Path, baseline: &std::path::Path, accept: bool) -> i32 {
    use crate::cmd::gate::counts::{
        TOLERANCE, compare, parse_baseline, passes, read_summaries, table,
    };
    let now = match read_summaries(summaries) {
        Ok(now) if !now.is_empty() => now,
        Ok(_) => {
            eprintln!("gate: no summary.json under {}", summaries.display());
            return 2;
        }
        Err(e) => {
            eprintln!("gate: {}: {e}", summaries.display());
            return 2;
        }
    };
    let compiler = match compiler() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gate: rustc --version: {e}");
            return 2;
        }
    };
    if accept {
        std::fs::write(
            baseline,
            crate::cmd::gate::counts::render_baseline(&now, &compiler),
        )
        .expect("write the baseline");
        println!(
            "gate: {} benches written to {}",
            now.len(),
            baseline.display()
        );
        return 0;
    }
    let committed = match std::fs::read_to_string(baseline)
        .map_err(|e| e.to_string())
        .and_then(|text| parse_baseline(&text))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gate: {}: {e}", baseline.display());
            return 2;
        }
    };
    let rows = compare(&committed.counts, &now, TOLERANCE);
    print!("{}", table(&rows, TOLERANCE));
    if let Some(why) = crate::cmd::gate::counts::compiler_mismatch(&committed, &compiler) {
        println!("gate: FAILED: {why} (`scripts/instructions.sh --accept`)");
        return 1;
    }
    if passes(&rows) {
        println!("gate: passed ({} benches)", rows.len());
        0
    } else {
        println!(
            "gate: FAILED: a bench rose or fell more than {:.0} %, or has no baseline, or did \
             not run; if the change is intended, accept it with `scripts/instructions.sh \
             --accept` and commit the baseline diff",
            TOLERANCE * 100.0
        );
        1
    }
}

/// The compiler that built the benches: `rustc --version`.
fn compiler() -> std::io::Result<String> {
    let out = std::process::Command::new("rustc")
        .arg("--version")
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
