//! `ufrag-perf model` end to end on loopback, small: the built-in echo, the bridge to
//! `model-echo`, and a baseline build (this same transceiver binary, standing in for
//! another build) in the same rounds; every section of the report is there and every
//! step held; a missing baseline is named before anything starts. And `--bundles`: the
//! built-in echo behind relay-mio, single frames against bundles both ways, with the
//! relays' own counts showing which pair bundled.

use std::process::Command;

use ufrag_testkit::cargo_build::{bin, package_bin};

fn ufrag_perf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ufrag-perf"))
}

#[test]
fn a_small_model_run_prices_the_bridge_and_a_baseline_in_the_same_rounds() {
    // `ufrag-perf model` runs the transceiver and model-echo found next to it: `cargo
    // test` builds neither as a binary, so build them (in this test's profile) first.
    let transceiver = bin("transceiver");
    package_bin("ufrag-model-servers", "model-echo");
    let dir = std::env::temp_dir().join(format!("ufrag-model-report-{}", std::process::id()));
    let out = dir.join("model.md");
    let status = ufrag_perf()
        .args(["model", "--rounds", "2", "--sessions-per-round", "2"])
        .args([
            "--cost-rounds",
            "2",
            "--cost-sessions",
            "10",
            "--steps",
            "20",
        ])
        .args(["--talk", "1s", "--profile-at", "10", "--baseline"])
        .arg(&transceiver)
        .arg("--out")
        .arg(&out)
        .status()
        .expect("ufrag-perf runs");
    assert!(status.success(), "{status}");
    let report = std::fs::read_to_string(&out).expect("report written");
    let json = std::fs::read_to_string(out.with_extension("json")).expect("json beside it");
    let _ = std::fs::remove_dir_all(&dir);
    for section in [
        "## Round trip of an `events` message",
        "## Sessions per core",
        "## The largest load one worker holds",
    ] {
        assert!(report.contains(section), "{section} missing:\n{report}");
    }
    for comparison in [
        "the bridge against the built-in",
        "the baseline's bridge against the built-in",
        "this build's bridge against the baseline's",
    ] {
        assert!(
            report.contains(comparison),
            "{comparison} missing:\n{report}"
        );
    }
    // Every cost row of the three setups, in both rounds, connected all ten sessions.
    let cost_rows = report.lines().filter(|l| l.contains("| 10/10 |")).count();
    assert_eq!(cost_rows, 6, "{report}");
    // Each setup held the one ladder step (20 sessions on loopback is far from a limit).
    for setup in [
        "- built-in echo: **20**",
        "- echo over the WebSocket bridge: **20**",
    ] {
        assert!(report.contains(setup), "{setup} missing:\n{report}");
    }
    assert!(report.contains("baseline `"), "{report}");
    // The worker's core by leg, at the profile's ten sessions: each takes the media in
    // and does its own work there. (The bridge's thread is not pinned: where its sends
    // to the model run is the scheduler's choice, so no figure of it is asserted.)
    let part = |setup: &str, name: &str| {
        ufrag_perf::bench::legs::read_part(&report, &format!("{setup}: the worker's core"), name)
            .unwrap_or_else(|| panic!("no {name:?} in {setup}'s split: {report}"))
    };
    for setup in ["built-in echo", "echo over the WebSocket bridge"] {
        assert!(
            part(setup, "receive from clients (media)") > 0.0,
            "{report}"
        );
        assert!(part(setup, "send to clients (media)") > 0.0, "{report}");
        assert!(part(setup, "its own work") > 0.0, "{report}");
    }
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert!(
        parsed["tables"].as_array().is_some_and(|t| t.len() >= 5),
        "{json}"
    );
}

#[test]
fn a_small_model_run_prices_bundles_behind_relay_mio() {
    let _ = bin("transceiver");
    let _ = bin("relay-mio");
    package_bin("ufrag-model-servers", "model-echo");
    let dir = std::env::temp_dir().join(format!("ufrag-model-bundles-{}", std::process::id()));
    let out = dir.join("model.md");
    let status = ufrag_perf()
        .args([
            "model",
            "--bundles",
            "--rounds",
            "2",
            "--sessions-per-round",
            "2",
        ])
        .args([
            "--cost-rounds",
            "2",
            "--cost-sessions",
            "10",
            "--steps",
            "0",
        ])
        .args(["--talk", "1s", "--profile-at", "0", "--out"])
        .arg(&out)
        .status()
        .expect("ufrag-perf runs");
    assert!(status.success(), "{status}");
    let report = std::fs::read_to_string(&out).expect("report written");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        report.starts_with("# The internal leg: single frames against bundles both ways"),
        "{report}"
    );
    assert!(
        report.contains("| **difference: bundles against single frames** (per round) | 2 |"),
        "{report}"
    );
    assert!(
        report.contains("| bundles against single frames | 2 |"),
        "{report}"
    );
    // Both setups, both rounds, every session connected.
    let cost_rows = report.lines().filter(|l| l.contains("| 10/10 |")).count();
    assert_eq!(cost_rows, 4, "{report}");
    // The relays' own counts: one pair bundled, the other sent and received none.
    let counts = |setup: &str| -> Vec<f64> {
        let line = report
            .lines()
            .find(|l| {
                l.starts_with(&format!("| behind relay-mio, {setup} |"))
                    && l.matches('|').count() == 6
            })
            .unwrap_or_else(|| panic!("no relay counts for {setup}: {report}"));
        line.split('|')
            .skip(2)
            .filter_map(|cell| cell.trim().parse().ok())
            .collect()
    };
    let (single, bundled) = (counts("single frames"), counts("bundles both ways"));
    assert_eq!(single.len(), 4, "{report}");
    assert!(
        single[0] > 0.0 && single[1] > 0.0,
        "media both ways: {report}"
    );
    assert_eq!((single[2], single[3]), (0.0, 0.0), "{report}");
    assert!(
        bundled[2] > 0.0 && bundled[3] > 0.0,
        "bundles both ways: {report}"
    );
}

#[test]
fn a_missing_baseline_is_named_before_anything_starts() {
    let output = ufrag_perf()
        .args(["model", "--baseline", "/nonexistent/transceiver"])
        .output()
        .expect("ufrag-perf runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--baseline /nonexistent/transceiver does not exist"),
        "{stderr}"
    );
}
