//! `ufrag-perf diff` and `ufrag-perf runs` end to end: the built binary on compare reports
//! written into a temporary directory (the current JSON schema, built here rather than
//! committed), with the exit codes a CI job gates on: 0 for a copy, 1 for a copy with one
//! row made 30 % costlier in every round (the row named), 2 for a report from before
//! per-round data was recorded or a file that is not there.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

/// relay-mio's marginal µs per packet in six rounds (a host drifting by a few per cent).
const MIO: [f64; 6] = [6.24, 6.51, 6.02, 6.38, 6.11, 6.47];
/// Each row's share of relay-mio's cost in each round, a few per cent of noise around it.
const BUNDLES: [f64; 6] = [0.74, 0.77, 0.72, 0.76, 0.75, 0.73];
const AFXDP: [f64; 6] = [0.93, 0.88, 0.91, 0.95, 0.90, 0.89];

/// An interval as `compare` writes it.
fn interval(median: f64, low: f64, high: f64, samples: usize) -> Value {
    json!({"median": median, "low": low, "high": high, "confidence": 0.96875, "samples": samples})
}

/// A row of the cost table: `shares` of relay-mio's cost in each round.
fn row(setup: &str, name: &str, shares: &[f64; 6]) -> Value {
    let by_round: Vec<Value> = MIO
        .iter()
        .zip(shares)
        .enumerate()
        .map(|(i, (mio, share))| {
            json!({
                "round": i + 1,
                "marginal_us_per_packet": mio * share,
                "fixed_cores": 0.012,
                "loads": 4,
            })
        })
        .collect();
    let mut marginals: Vec<f64> = MIO.iter().zip(shares).map(|(m, s)| m * s).collect();
    marginals.sort_by(f64::total_cmp);
    let mut sorted_shares = shares.to_vec();
    sorted_shares.sort_by(f64::total_cmp);
    json!({
        "setup": setup,
        "name": name,
        "us_per_packet_by_load": [null, null, null, null],
        "marginal_us_per_packet": interval(
            (marginals[2] + marginals[3]) / 2.0, marginals[0], marginals[5], 6),
        "fixed_cores": interval(0.012, 0.010, 0.014, 6),
        "ratio_to_baseline": interval(
            (sorted_shares[2] + sorted_shares[3]) / 2.0, sorted_shares[0], sorted_shares[5], 6),
        "sessions_per_core": 1e6 / 100.0 / marginals[3],
        "bimodal": false,
        "rounds_kept": 6,
        "rounds_run": 6,
        "by_round": by_round,
    })
}

/// A compare report in the current schema: relay-mio, relay-mio with bundles and
/// relay-afxdp skb over six rounds, an inconclusive verdict.
fn report() -> Value {
    json!({
        "environment": {"cpu_model": "AMD EPYC", "kernel": "6.1.0-test", "vcpus": 2},
        "partial": null,
        "left_out": [],
        "cost": {
            "loads_pps": [10000, 20000, 35000, 50000],
            "trial_seconds": 0.3,
            "rounds": 6,
            "seed": 1,
            "null_row": "direct",
            "baseline": "mio",
            "threshold": 1.0 / 3.0,
            "family_confidence": 0.95,
            "verdict": {
                "kind": "inconclusive",
                "sentence": "**Inconclusive** on this host: …",
                "setup": "afxdp-skb-wakeup",
                "ratio": interval(1.21, 1.09, 1.30, 6),
                "threshold": 1.0 / 3.0,
                "bound": 2.0 / 3.0,
                "candidates": 1,
                "family_confidence": 0.95,
                "rounds_needed": null,
                "cheapest_socket_row": [{"setup": "mio-bundles", "rounds": 6}],
            },
            "null_outliers": [],
            "rows": [
                row("mio", "relay-mio", &[1.0; 6]),
                row("mio-bundles", "relay-mio, bundles to the transceiver", &BUNDLES),
                row("afxdp-skb-wakeup", "relay-afxdp skb wakeup", &AFXDP),
            ],
            "samples": [],
        }
    })
}

/// A fresh directory for one test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ufrag-diff-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

fn write(dir: &Path, name: &str, json: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(json).unwrap()).unwrap();
    path
}

fn perf(args: &[&Path]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ufrag-perf"))
        .args(args)
        .output()
        .expect("run ufrag-perf")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_copy_passes_and_a_row_made_costlier_fails_the_gate_by_name() {
    let dir = scratch("gate");
    let a = write(&dir, "a.json", &report());
    let same = write(&dir, "same.json", &report());
    let mut costlier = report();
    for round in costlier["cost"]["rows"][1]["by_round"]
        .as_array_mut()
        .unwrap()
    {
        let us = round["marginal_us_per_packet"].as_f64().unwrap();
        round["marginal_us_per_packet"] = json!(us * 1.3);
    }
    let b = write(&dir, "b.json", &costlier);

    let out = perf(&[Path::new("diff"), &a, &same]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.ends_with(
            "diff: 2 rows compared, 0 costlier, 0 cheaper; verdict inconclusive → inconclusive\n"
        ),
        "{stdout}"
    );

    let out = perf(&[Path::new("diff"), &a, &b]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("costlier beyond 10 %: relay-mio, bundles to the transceiver (1.30"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with(
            "diff: 2 rows compared, 1 costlier, 0 cheaper; verdict inconclusive → inconclusive\n"
        ),
        "{stdout}"
    );
    let afxdp = stdout
        .lines()
        .find(|l| l.starts_with("| relay-afxdp skb wakeup |"))
        .expect(&stdout);
    assert!(afxdp.ends_with("| no |"), "{afxdp}");

    // The Markdown report's path is read as the JSON beside it.
    let md = dir.join("b.md");
    std::fs::write(&md, "# the Markdown report").unwrap();
    let out = perf(&[Path::new("diff"), &a, &md]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
}

#[test]
fn an_old_report_or_a_missing_file_exits_two() {
    let dir = scratch("bad");
    let a = write(&dir, "a.json", &report());
    let mut old = report();
    for row in old["cost"]["rows"].as_array_mut().unwrap() {
        row.as_object_mut().unwrap().remove("by_round");
    }
    let old = write(&dir, "old.json", &old);
    let out = perf(&[Path::new("diff"), &old, &a]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("old.json: made before per-round data was recorded; re-run compare"),
        "{stderr}"
    );
    let missing = dir.join("missing.json");
    let out = perf(&[Path::new("diff"), &a, &missing]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing.json"));
    let out = perf(&[Path::new("runs"), &a, &old]);
    assert_eq!(out.status.code(), Some(2));
}

/// The committed report's JSON.
fn committed_report() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/results/compare.json")
}

/// The report at `path` with row `setup` made `factor` times costlier in every round.
fn with_row_costlier(path: &Path, setup: &str, factor: f64) -> Value {
    let mut json: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the committed report"))
            .expect("JSON");
    let rows = json["cost"]["rows"].as_array_mut().expect("rows");
    let row = rows
        .iter_mut()
        .find(|r| r["setup"] == setup)
        .unwrap_or_else(|| panic!("{} has a row {setup}", path.display()));
    for round in row["by_round"].as_array_mut().expect("by_round") {
        let us = round["marginal_us_per_packet"].as_f64().unwrap();
        round["marginal_us_per_packet"] = serde_json::json!(us * factor);
    }
    json
}

/// The committed reports: diffed against themselves they must show no change, unless they
/// were made before per-round data was recorded, which diff must then say.
#[test]
fn the_committed_report_against_itself_is_no_change_and_with_a_row_made_costlier_fails() {
    let committed = committed_report();
    let out = perf(&[Path::new("diff"), &committed, &committed]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(" 0 costlier, 0 cheaper;"));
    // relay-mio with bundles made 30 % costlier in every round of a copy.
    let costlier = with_row_costlier(&committed, "mio-bundles", 1.3);
    let dir = scratch("committed");
    let changed = write(&dir, "costlier.json", &costlier);
    let out = perf(&[Path::new("diff"), &committed, &changed]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("costlier beyond 10 %: relay-mio, bundles to the transceiver"),
        "{}",
        text(&out.stdout)
    );
}

/// Two committed runs of the same command on the same host, made back to back: diff
/// must not call that a change.
#[test]
fn two_committed_runs_of_one_command_are_no_change() {
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/results");
    let out = perf(&[
        Path::new("diff"),
        &results.join("compare.json"),
        &results.join("compare-run2.json"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains(" 0 costlier,"),
        "{}",
        text(&out.stdout)
    );
}

/// relay-mio made 50 % costlier in every round: against itself (the default anchor) no
/// row can show it, and every other row looks cheaper; anchored on nftables (the
/// kernel's forwarding, which no commit of ours changes) it is flagged.
#[test]
fn a_costlier_relay_mio_shows_only_against_an_anchor_it_does_not_move() {
    let committed = committed_report();
    let costlier = with_row_costlier(&committed, "mio", 1.5);
    let dir = scratch("anchor");
    let changed = write(&dir, "mio-costlier.json", &costlier);
    let blind = perf(&[Path::new("diff"), &committed, &changed]);
    assert_eq!(blind.status.code(), Some(0), "{}", text(&blind.stdout));
    assert!(
        text(&blind.stdout).contains(" 0 costlier,"),
        "{}",
        text(&blind.stdout)
    );
    let anchored = perf(&[
        Path::new("diff"),
        &committed,
        &changed,
        Path::new("--anchor"),
        Path::new("nftables"),
    ]);
    let said = text(&anchored.stdout);
    assert_eq!(anchored.status.code(), Some(1), "{said}");
    assert!(
        said.contains("## Ratios to nftables DNAT+SNAT (kernel)"),
        "{said}"
    );
    assert!(said.contains("costlier beyond 10 %: relay-mio"), "{said}");
    let missing = perf(&[
        Path::new("diff"),
        &committed,
        &changed,
        Path::new("--anchor"),
        Path::new("no-such-row"),
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("no row no-such-row to anchor the ratios to"));
}

#[test]
fn runs_that_agree_exit_zero_and_a_changed_verdict_exits_one() {
    let dir = scratch("runs");
    let first = write(&dir, "run1.json", &report());
    let mut drifted = report();
    drifted["cost"]["verdict"]["ratio"] = interval(1.25, 1.12, 1.33, 6);
    let second = write(&dir, "run2.json", &drifted);
    let out = perf(&[Path::new("runs"), &first, &second]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.ends_with(
            "runs: 2 runs; verdict inconclusive in 2 of 2; medians within ±10 %: PASS; intervals hold the others' medians: PASS\n"
        ),
        "{stdout}"
    );
    let mut warranted = report();
    warranted["cost"]["verdict"]["kind"] = json!("not_warranted");
    let third = write(&dir, "run3.json", &warranted);
    let out = perf(&[Path::new("runs"), &first, &second, &third]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("inconclusive in 2 of 3, not_warranted in 1 of 3"),
        "{stdout}"
    );
}
