//! Which span of fixed loads gives the steadiest per-round ratio: re-fits the rounds of
//! one `ufrag-perf compare` report, run with many loads, through subsets of those loads
//! (the same trials each time) and prints, per pair of rows, the median per-round ratio
//! and its spread. The evidence behind the default `--loads`:
//!
//! ```sh
//! cargo run --release -p ufrag-perf --example load_range -- docs/results/compare-load-range.json
//! ```

#![forbid(unsafe_code)]

use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use ufrag_perf::bench::stats::median;
use ufrag_perf::cmd::compare::marginal::{MIN_LOADS, ratio_in_round};
use ufrag_perf::cmd::compare::sample::{LoadTrial, Sample};

/// The pairs whose ratio the verdict reads on the testbed: the best bypass rows against
/// the cheapest socket relay, and that relay against plain relay-mio.
const PAIRS: [(&str, &str); 3] = [
    ("afxdp-fast-native", "mio-bundles"),
    ("afxdp-fast-skb", "mio-bundles"),
    ("mio-bundles", "mio"),
];

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!(
            "usage: load_range REPORT.json (a `ufrag-perf compare` report with 8 or more loads)"
        );
        std::process::exit(2);
    };
    if let Err(why) = run(&path) {
        eprintln!("load_range: {path}: {why}");
        std::process::exit(1);
    }
}

fn run(path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let report: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let cost = &report["cost"];
    let loads: Vec<u64> = cost["loads_pps"]
        .as_array()
        .ok_or("no cost.loads_pps")?
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    if loads.len() < 2 * MIN_LOADS || loads.len() % 2 == 1 {
        return Err(format!(
            "{} loads: an even number, at least {}, is needed to split them in halves",
            loads.len(),
            2 * MIN_LOADS
        ));
    }
    let null = cost["null_row"].as_str().ok_or("no cost.null_row")?;
    let null_outliers: BTreeSet<u64> = cost["null_outliers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["round"].as_u64())
        .collect();
    let trials = passed_trials(cost, &loads, &null_outliers)?;
    if !trials
        .values()
        .flat_map(|s| &s.loads)
        .all(|t| t.sent_pps.is_some())
    {
        eprintln!(
            "load_range: this report does not record the generator's rate (sent_pps): its \
             trials are judged on loss alone"
        );
    }
    println!(
        "| pair | loads (pps) | rounds | rounds without a ratio | median ratio | interquartile range | MAD ÷ median (unscaled) |"
    );
    println!("|---|---|---:|---:|---:|---|---:|");
    for (row, other) in PAIRS {
        for (name, which) in subsets(&loads) {
            let (ratios, without) = ratios(&trials, row, other, null, &which);
            let Some(centre) = median(&ratios) else {
                continue;
            };
            let deviations: Vec<f64> = ratios.iter().map(|r| (r - centre).abs()).collect();
            let mad = median(&deviations).unwrap_or(f64::NAN);
            let (low, high) = quartiles(&ratios);
            println!(
                "| {row} ÷ {other} | {name} | {} | {without} | {centre:.3} | {low:.3}–{high:.3} | {:.2} |",
                ratios.len(),
                mad / centre
            );
        }
    }
    Ok(())
}

/// Every sample the host gate passed, by (round, setup), leaving out the rounds whose
/// null row was an outlier at any load (the report leaves them out of every ratio too,
/// whichever loads a ratio goes through). A sample's trials must be the report's loads,
/// in order.
fn passed_trials(
    cost: &Value,
    loads: &[u64],
    null_outliers: &BTreeSet<u64>,
) -> Result<HashMap<(u64, String), Sample>, String> {
    let samples = cost["samples"].as_array().ok_or("no cost.samples")?;
    let mut trials = HashMap::new();
    for sample in samples {
        let disturbed = sample["disturbances"]
            .as_array()
            .is_some_and(|d| !d.is_empty());
        let round = sample["round"].as_u64().ok_or("a sample without a round")?;
        if disturbed || null_outliers.contains(&round) {
            continue;
        }
        let setup = sample["setup"].as_str().ok_or("a sample without a setup")?;
        let sample_loads = sample["loads"].as_array().ok_or("a sample without loads")?;
        let load_trials: Vec<LoadTrial> = sample_loads
            .iter()
            .map(load_trial)
            .collect::<Option<_>>()
            .ok_or_else(|| format!("round {round}, {setup}: a trial without its counts"))?;
        let offered: Vec<u64> = load_trials.iter().map(|t| t.offered_pps).collect();
        if offered != loads {
            return Err(format!(
                "round {round}, {setup}: trials at {offered:?} pps, not the report's {loads:?}"
            ));
        }
        let sample = Sample {
            setup: setup.to_string(),
            round: round as usize,
            position: sample["position"].as_u64().unwrap_or(0) as usize,
            loads: load_trials,
            latency: vec![],
            disturbances: vec![],
            reading: None,
            fast_path: None,
            outside: None,
            queues: None,
            steering_changed: vec![],
            host_busy: None,
            elsewhere: vec![],
        };
        trials.insert((round, setup.to_string()), sample);
    }
    Ok(trials)
}

/// A trial as the report's JSON records it (`sent_pps` absent in reports made before it
/// was recorded).
fn load_trial(trial: &Value) -> Option<LoadTrial> {
    Some(LoadTrial {
        offered_pps: trial["offered_pps"].as_u64()?,
        sent: trial["sent"].as_u64()?,
        received: trial["received"].as_u64()?,
        busy: trial["busy_seconds"].as_f64()?,
        wall: trial["wall_seconds"].as_f64()?,
        sent_pps: trial["sent_pps"].as_u64(),
    })
}

/// The subsets compared, each as a name and the indices of its loads: the lower half,
/// the upper half (the same spread, higher), every other load up to the top (as many
/// loads as a half, over nearly twice its spread) and all of them.
fn subsets(loads: &[u64]) -> Vec<(String, Vec<usize>)> {
    let n = loads.len();
    let half = n / 2;
    let named = |which: Vec<usize>| {
        let pps: Vec<String> = which.iter().map(|&i| loads[i].to_string()).collect();
        (pps.join(", "), which)
    };
    let mut every_other: Vec<usize> = (0..n).rev().step_by(2).collect();
    every_other.reverse();
    vec![
        named((0..half).collect()),
        named((n - half..n).collect()),
        named(every_other),
        named((0..n).collect()),
    ]
}

/// `row`'s marginal cost over `other`'s, both net of `null`, in every round where all
/// three passed, through exactly the loads of `which` (the crate's
/// [`ratio_in_round`]); and how many of those rounds gave no ratio (one of the three did
/// not carry one of the loads, or `other` was no dearer than the null row).
fn ratios(
    trials: &HashMap<(u64, String), Sample>,
    row: &str,
    other: &str,
    null: &str,
    which: &[usize],
) -> (Vec<f64>, usize) {
    let loads = trials.values().map(|s| s.loads.len()).max().unwrap_or(0);
    let mask: Vec<bool> = (0..loads).map(|i| which.contains(&i)).collect();
    let rounds: BTreeSet<u64> = trials.keys().map(|k| k.0).collect();
    let (mut found, mut without) = (vec![], 0);
    for round in rounds {
        let get = |setup: &str| trials.get(&(round, setup.to_string()));
        let (Some(a), Some(b), Some(n)) = (get(row), get(other), get(null)) else {
            continue;
        };
        match ratio_in_round(a, b, n, &mask) {
            Some(ratio) => found.push(ratio),
            None => without += 1,
        }
    }
    (found, without)
}

/// The first and third quartiles (linear between order statistics).
fn quartiles(values: &[f64]) -> (f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let x = q * (sorted.len() - 1) as f64;
        let (i, frac) = (x.floor() as usize, x.fract());
        let next = sorted[(i + 1).min(sorted.len() - 1)];
        sorted[i] + frac * (next - sorted[i])
    };
    (at(0.25), at(0.75))
}
