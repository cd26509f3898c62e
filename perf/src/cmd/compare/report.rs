//! `perf compare`'s report: the verdict and the cost table first (the primary metric),
//! the host gate, the anomalies, then the maximum-rate search, as Markdown for people,
//! JSON for machines (CI, a lab's tracking) and an SVG of the two.

use std::fmt::Write as _;

use super::cost::{Analysis, CONFIDENCE, RowCost, sessions_per_core};
use super::notes;
use super::options::{Direction, Options};
use super::sample::Sample;
use super::search_phase::Searched;
use super::setups::{BASELINE, Kind, NULL, Setup, bypass_keys, name_of};
use super::verdict::{
    EQUIVALENCE_ALPHA, EQUIVALENCE_MARGIN, FAMILY_CONFIDENCE, Verdict, equivalence, judge,
};
use crate::bench::stats::Interval;

/// Everything a run measured.
#[derive(Debug)]
pub struct Measured<'a> {
    /// The setups run.
    pub setups: &'a [&'static Setup],
    /// Setups left out, and why.
    pub left_out: &'a [(String, String)],
    /// The fixed-load rounds' samples.
    pub samples: &'a [Sample],
    /// Each setup's whole machine over one profiled trial (empty when not profiled).
    pub machine: &'a super::machine_profile::Profiled,
    /// The search phase.
    pub searched: &'a Searched,
    /// The rounds' seed.
    pub seed: u64,
    /// The environment record.
    pub environment: &'a serde_json::Value,
    /// Each setup's core budget on the relay host, by key ([`Setup::cores_on`]).
    pub cores: &'a [(String, String)],
    /// The workers a side the verdict weighs: relay-afxdp's RX queues, and as many
    /// relay-mio workers.
    pub cores_per_side: usize,
    /// Where the run was when this was written, if it has not finished: the report is
    /// rewritten as rounds and phases finish, so an interrupted run keeps what it measured.
    pub partial: Option<String>,
}

/// The cost table: each row's net µs per packet at each load, its marginal cost and
/// fixed cores from the per-round lines, its ratio to relay-mio's, voice sessions per
/// core, and the rounds kept with the coverage of its intervals.
/// `counted` names whose CPUs were counted (the whole machine, or a lab's relay host).
fn cost_table(rows: &[RowCost], loads: &[u64], counted: &str) -> String {
    let mut out = format!(
        "\n## CPU cost per forwarded packet at fixed loads\n\nµs of {counted} per packet, \
         the null row's subtracted; median [distribution-free interval asking {:.0} %; the \
         coverage it has is in the last column] over the rounds kept. **Marginal** is the slope \
         of the line through each round's loads (what one more packet costs: it sets sessions \
         per core); **fixed** is its intercept, the cores held at no load (busy polling shows \
         there, not in the marginal cost).\n\n| setup |",
        CONFIDENCE * 100.0
    );
    for l in loads {
        let _ = write!(out, " at {}k pps |", l / 1000);
    }
    out.push_str(
        " marginal µs per packet | fixed cores at 0 pps | ratio to relay-mio | voice sessions per core | rounds kept (coverage) |\n|---|",
    );
    out.push_str(&"---:|".repeat(loads.len() + 5));
    out.push('\n');
    let label = |i: Option<Interval>, digits: usize| i.map_or("–".into(), |i| i.label(digits));
    for r in rows {
        let _ = write!(
            out,
            "| {}{} |",
            name_of(&r.setup),
            if r.bimodal { " (two states)" } else { "" }
        );
        for l in &r.per_load {
            let _ = write!(out, " {} |", label(*l, 2));
        }
        let _ = writeln!(
            out,
            " {} | {} | {} | {} | {} of {}{} |",
            label(r.marginal, 2),
            label(r.fixed_cores, 3),
            label(r.ratio_to_baseline, 2),
            r.marginal.map_or("–".into(), |p| format!(
                "{:.0}",
                sessions_per_core(p.median)
            )),
            r.rounds_kept,
            r.rounds_run,
            r.marginal.map_or(String::new(), |m| format!(
                " ({:.1} %)",
                m.confidence * 100.0
            )),
        );
    }
    out
}

/// How a worker count's per-packet cost compares with one worker's, from the interval of
/// the per-round ratio: flat within ±10 %, else costlier or cheaper, unless the interval
/// reaches across a bound.
fn scaling_word(ratio: Option<Interval>) -> &'static str {
    match ratio {
        None => "not measured",
        Some(r) if r.low >= 0.9 && r.high <= 1.1 => "flat: no contention between workers",
        Some(r) if r.low > 1.1 => "costlier per packet",
        Some(r) if r.high < 0.9 => "cheaper per packet",
        Some(_) => "inconclusive",
    }
}

/// relay-mio's rows by worker count (`--workers`): cost per packet, its ratio to one
/// worker's, and the sessions a host of that many cores carries at that cost.
fn scaling_table(rows: &[RowCost], workers: &[usize]) -> String {
    let swept: Vec<(usize, &RowCost)> = rows
        .iter()
        .filter_map(|r| {
            let setup = super::setups::by_key(&r.setup)?;
            (setup.sweeps_workers() && setup.table_key() == BASELINE).then_some((setup.workers, r))
        })
        .collect();
    // The ratios are to the one-worker row: without it (a lab weighing N workers a side)
    // there is nothing to scale from.
    if swept.len() < 2 || !swept.iter().any(|(workers, _)| *workers == 1) {
        return String::new();
    }
    let cpus = crate::bench::environment::online_cpus();
    let mut out = String::from(
        "\n## Scaling across workers (relay-mio, `--workers`)\n\nThe same fixed loads with the \
         flows spread over more workers (SO_REUSEPORT), every CPU counted as above. Flat cost \
         per packet means the workers do not contend; a host of N cores then carries N times \
         the sessions of one.\n\n| workers | µs per packet | ratio to 1 worker | per packet | \
         voice sessions per core | voice sessions per host of that many cores |\n|---:|---:|---:|---|---:|---:|\n",
    );
    let label = |i: Option<Interval>, digits: usize| i.map_or("–".into(), |i| i.label(digits));
    for (n, r) in &swept {
        let per_core = r.marginal.map(|p| sessions_per_core(p.median));
        let _ = writeln!(
            out,
            "| {n} | {} | {} | {} | {} | {} |",
            label(r.marginal, 2),
            label(r.ratio_to_baseline, 2),
            if *n == 1 {
                "the baseline"
            } else {
                scaling_word(r.ratio_to_baseline)
            },
            per_core.map_or("–".into(), |s| format!("{s:.0}")),
            per_core.map_or("–".into(), |s| format!("{:.0}", s * *n as f64)),
        );
    }
    let most = workers.iter().copied().max().unwrap_or(1);
    if most >= cpus {
        let _ = writeln!(
            out,
            "\nThis host has {cpus} CPUs, so {most} workers share a core with the load tools (every \
             CPU's busy time is counted, so the cost per packet stays comparable), the maximum \
             rate cannot show scaling (the generator competes with the workers), and more than \
             {cpus} workers cannot run. What it shows is whether the cost per packet stays flat \
             when the flows are spread over the workers."
        );
    }
    out
}

/// Every kept round's marginal cost, per row: the raw material of every median above.
fn per_round_table(rows: &[RowCost], rounds: usize) -> String {
    let mut out = String::from("\n### Marginal µs per packet in each round\n\n| setup |");
    for round in 1..=rounds {
        let _ = write!(out, " {round} |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(rounds));
    out.push('\n');
    for r in rows {
        let _ = write!(out, "| {} |", name_of(&r.setup));
        for round in 1..=rounds {
            let cell = r
                .marginal_in(round)
                .map_or("–".into(), |us| format!("{us:.2}"));
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out
}

/// `--versus`: each pair's marginal cost ratio, per round both kept.
fn pairs_table(analysis: &Analysis<'_>, pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n### Pairs, per round\n\nThe first row's marginal cost over the second's in each \
         round both were kept, through the loads both rows' sets keep: median [interval, its coverage].\n\n\
         | setup | against | ratio | coverage | rounds |\n|---|---|---:|---:|---:|\n",
    );
    for (a, b) in pairs {
        let ratio = analysis.pair_ratio(a, b);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            name_of(a),
            name_of(b),
            ratio.map_or("–".into(), |i| i.label(2)),
            ratio.map_or("–".into(), |i| format!("{:.1} %", i.confidence * 100.0)),
            ratio.map_or(0, |i| i.samples)
        );
    }
    out
}

/// Each bypass row against each socket row, per round: the ratio with its interval, and
/// whether two one-sided tests show them as cheap as each other.
fn bypass_against_sockets(analysis: &Analysis<'_>, bypass: &[&str], sockets: &[&str]) -> String {
    if bypass.is_empty() || sockets.is_empty() {
        return String::new();
    }
    let alpha = EQUIVALENCE_ALPHA;
    let mut out = format!(
        "\n### Each bypass row against each socket relay\n\nMarginal cost ratio per round \
         (median [interval, its coverage]). *As cheap as* is claimed only when two one-sided \
         tests at {:.1} % each put the whole {:.0} % interval within 1 ± {:.0} %; overlapping \
         intervals do not show it.\n\n| bypass row | socket row | ratio | coverage | rounds | \
         within ±{:.0} % |\n|---|---|---:|---:|---:|---|\n",
        alpha * 100.0,
        (1.0 - 2.0 * alpha) * 100.0,
        EQUIVALENCE_MARGIN * 100.0,
        EQUIVALENCE_MARGIN * 100.0,
    );
    for &b in bypass {
        for &socket in sockets {
            let ratios: Vec<f64> = analysis.ratios(b, socket).iter().map(|r| r.1).collect();
            let ratio = analysis.pair_ratio(b, socket);
            let tost = equivalence(&ratios, EQUIVALENCE_MARGIN, alpha);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                name_of(b),
                name_of(socket),
                ratio.map_or("–".into(), |i| i.label(2)),
                ratio.map_or("–".into(), |i| format!("{:.1} %", i.confidence * 100.0)),
                ratios.len(),
                match tost {
                    Some(t) if t.equivalent =>
                        format!("as cheap as ({:.2}–{:.2})", t.ratio.low, t.ratio.high),
                    Some(t) => format!("not shown ({:.2}–{:.2})", t.ratio.low, t.ratio.high),
                    None => "–".into(),
                }
            );
        }
    }
    out
}

/// Each fast-path row against the in-kernel reference it imitates, per round: the
/// issue a fast path answers is whether it comes close to what the kernel alone costs.
fn fast_path_against_reference(
    analysis: &Analysis<'_>,
    setups: &[&Setup],
    profiled: bool,
) -> String {
    const REFERENCE: &str = "xdp-relay";
    if !setups.iter().any(|s| s.key == REFERENCE) {
        return String::new();
    }
    let fast: Vec<&str> = setups
        .iter()
        .filter(|s| super::fast_path::has_fast_path(s))
        .map(|s| s.key)
        .collect();
    if fast.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n### The fast path against the in-kernel reference\n\nMarginal cost over the \
         in-kernel XDP rewrite relay's, per round (median [interval, its coverage]). A \
         fast path within 1.2× of it does what the kernel alone does{}.\n\n| fast-path row | \
         ratio to the reference | coverage | rounds | within 1.2× |\n|---|---:|---:|---:|---|\n",
        if profiled {
            "; past that, *Where the whole machine's time goes* shows on which CPU and in \
             which functions each row's cost at one load lands"
        } else {
            " (no machine profile in this run to say where a gap lands)"
        }
    );
    for row in fast {
        let ratio = analysis.pair_ratio(row, REFERENCE);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            name_of(row),
            ratio.map_or("–".into(), |i| i.label(2)),
            ratio.map_or("–".into(), |i| format!("{:.1} %", i.confidence * 100.0)),
            ratio.map_or(0, |i| i.samples),
            match ratio {
                Some(i) if i.high <= 1.2 => "yes",
                Some(i) if i.low > 1.2 => "no",
                Some(_) => "inconclusive",
                None => "–",
            }
        );
    }
    out
}

/// Each row's core budget on the relay host, one line, and (when the verdict weighs
/// `equal_cores`, more than one a side) what that means for it.
fn core_budgets(cores: &[(String, String)], equal_cores: Option<usize>) -> String {
    if cores.is_empty() {
        return String::new();
    }
    let listed: Vec<String> = cores
        .iter()
        .map(|(key, budget)| format!("{}: {budget}", name_of(key)))
        .collect();
    let mut out = format!("\nEach row's cores: {}.\n", listed.join("; "));
    if let Some(cores_per_side) = equal_cores {
        let _ = writeln!(
            out,
            "relay-afxdp runs one worker on each of {cores_per_side} RX queues, and the verdict \
             weighs it against relay-mio on as many workers: the same cores on each side. Run \
             once per `--queues N` for the verdict at another N."
        );
    }
    out
}

/// The measured rows the verdict weighs: the bypass rows (relay-afxdp on our own AF_XDP
/// layer, with and without its fast path, one worker per RX queue) and the socket rows
/// (relay-mio with as many workers, `cores_per_side`, in each mode measured), each in the
/// report's order.
fn verdict_rows<'a>(setups: &[&'a Setup], cores_per_side: usize) -> (Vec<&'a str>, Vec<&'a str>) {
    let bypass_all = bypass_keys();
    let bypass = setups
        .iter()
        .map(|s| s.key)
        .filter(|k| bypass_all.contains(k))
        .collect();
    let sockets = setups
        .iter()
        .filter(|s| {
            s.workers == cores_per_side
                && matches!(
                    s.kind,
                    Kind::Relay {
                        binary: "relay-mio",
                        ..
                    }
                )
        })
        .map(|s| s.key)
        .collect();
    (bypass, sockets)
}

/// The row the others' ratios are to: relay-mio with one worker, or where a lab weighs
/// it on as many workers as relay-afxdp's queues ([`Measured::cores_per_side`]), that row.
fn baseline_of(setups: &[&Setup], cores_per_side: usize) -> &'static str {
    let mio = |workers: usize| {
        setups
            .iter()
            .find(|s| s.sweeps_workers() && s.table_key() == BASELINE && s.workers == workers)
    };
    mio(1)
        .or_else(|| mio(cores_per_side))
        .map_or(BASELINE, |s| s.key)
}

/// The verdict `analysis` gives, by `options`' threshold and planned looks.
pub fn verdict_of(
    options: &Options,
    setups: &[&Setup],
    cores_per_side: usize,
    analysis: &Analysis<'_>,
) -> Verdict {
    let (bypass, sockets) = verdict_rows(setups, cores_per_side);
    judge(
        &analysis.candidates(&bypass, &sockets),
        options.threshold,
        analysis.rounds().len(),
        options.looks(),
    )
}

/// The host a run measured, as the verdict names it: CPU model, vCPUs, kernel and the
/// cross-core wake-up round trip.
fn host_named(environment: &serde_json::Value) -> String {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("unknown").trim().to_string();
    let wake = &environment["wake_up_round_trip"]["cross_core"];
    format!(
        "this host ({}, {} vCPUs, Linux {}{})",
        text(&environment["cpu_model"]),
        environment["vcpus"],
        text(&environment["kernel"]),
        wake["p50_us"].as_f64().map_or(String::new(), |p50| format!(
            ", cross-core wake-up p50 {p50:.0} µs"
        ))
    )
}

/// How many client addresses `flows` flows came from: on the testbed one per 40,000; in
/// a lab the agent's (`tools_host.client_addresses`), the flows dealt round them.
fn client_addresses(flows: u32, environment: &serde_json::Value) -> u32 {
    match environment["tools_host"]["client_addresses"].as_u64() {
        // No more than the flows, so it fits.
        Some(agents) => crate::cmd::lab::agent::addresses_used(agents, flows) as u32,
        None => flows.div_ceil(super::bench::PORTS_PER_CLIENT_ADDR),
    }
}

fn interval_json(i: Option<Interval>) -> serde_json::Value {
    i.map_or(serde_json::Value::Null, |i| {
        super::verdict::interval_json(&i)
    })
}

/// The primary phase as JSON.
fn cost_json(
    verdict: &Verdict,
    analysis: &Analysis<'_>,
    rows: &[RowCost],
    samples: &[Sample],
    options: &Options,
    (seed, host): (u64, &str),
    (baseline, cores): (&str, &[(String, String)]),
) -> serde_json::Value {
    serde_json::json!({
        "loads_pps": options.loads,
        "trial_seconds": options.trial.as_secs_f64(),
        "rounds": options.rounds,
        "seed": seed,
        "null_row": NULL,
        "baseline": baseline,
        "verdict": verdict.json(name_of, host),
        "null_outliers": analysis.null_outliers.iter().map(|(round, why)| serde_json::json!({
            "round": round, "why": why,
        })).collect::<Vec<_>>(),
        "rows": rows.iter().map(|r| serde_json::json!({
            "setup": r.setup,
            "name": name_of(&r.setup),
            "cores": cores.iter().find(|(k, _)| *k == r.setup).map(|(_, b)| b),
            "us_per_packet_by_load": r.per_load.iter().map(|i| interval_json(*i)).collect::<Vec<_>>(),
            "marginal_us_per_packet": interval_json(r.marginal),
            "fixed_cores": interval_json(r.fixed_cores),
            "ratio_to_baseline": interval_json(r.ratio_to_baseline),
            "sessions_per_core": r.marginal.map(|p| sessions_per_core(p.median)),
            "bimodal": r.bimodal,
            "rounds_kept": r.rounds_kept,
            "rounds_run": r.rounds_run,
            "by_round": r.by_round.iter().map(|(round, line)| serde_json::json!({
                "round": round,
                "marginal_us_per_packet": line.us_per_packet,
                "fixed_cores": line.fixed_cores,
                "loads": line.loads,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "samples": samples.iter().map(|s| serde_json::json!({
            "round": s.round,
            "position": s.position,
            "setup": s.setup,
            "kept": s.clean(),
            "disturbances": s.disturbances.iter().map(|d| d.label()).collect::<Vec<_>>(),
            "host": s.reading.map(|r| serde_json::json!({
                "busy_at_rest": r.at_rest.busy_share(),
                "steal_at_rest": r.at_rest.steal_share(),
                "pressure_at_rest": r.at_rest.pressure,
                "calibration_us": r.calibration_us,
                "wake_round_trip": r.wake.map(|w| w.json()),
            })),
            "loads": s.loads.iter().map(|t| serde_json::json!({
                "offered_pps": t.offered_pps, "sent": t.sent, "received": t.received,
                "busy_seconds": t.busy, "wall_seconds": t.wall, "sent_pps": t.sent_pps,
                "not_carried": t.not_carried().map(super::sample::NotCarried::label),
            })).collect::<Vec<_>>(),
            "latency": s.latency.iter().map(crate::cmd::lab::protocol::trial_json).collect::<Vec<_>>(),
            "fast_path": super::fast_path::json(s),
            "queues": s.queues.as_ref().map(|q| {
                q.to_json(crate::bench::spread::sending_flows(options.flows))
            }),
            "steering_changed": s.steering_changed,
            "host_busy_seconds": s.host_busy,
            "network_elsewhere": s.elsewhere.iter().map(|e| serde_json::json!({
                "cpu": e.cpu, "receive_softirqs": e.softirqs, "interrupts": e.interrupts,
            })).collect::<Vec<_>>(),
            "outside": s.outside.as_ref().map(|o| serde_json::json!({
                "seconds": o.seconds,
                "busiest": o.busiest.iter().take(5).map(|(name, seconds)| serde_json::json!({
                    "thread": name, "seconds": seconds,
                })).collect::<Vec<_>>(),
            })),
        })).collect::<Vec<_>>(),
    })
}

/// Writes the report (Markdown, with JSON and SVG beside it) to `options.out`.
pub fn write(options: &Options, m: &Measured<'_>) -> std::io::Result<()> {
    let keys: Vec<&str> = m.setups.iter().map(|s| s.key).collect();
    let analysis = Analysis::new(m.samples, NULL);
    let baseline = baseline_of(m.setups, m.cores_per_side);
    let rows = analysis.rows(&keys, baseline);
    let (bypass, sockets) = verdict_rows(m.setups, m.cores_per_side);
    let rounds_run = analysis.rounds().len();
    let verdict = verdict_of(options, m.setups, m.cores_per_side, &analysis);
    let host = host_named(m.environment);
    let latency_rows =
        super::latency::latency_rows(m.samples, baseline, &keys, &options.latency_loads);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let way = match options.direction {
        Direction::Up => "uplink",
        Direction::Down => "downlink",
        Direction::Both => "both directions",
    };
    let lab = options.lab.lab.is_some();
    let mut md = format!(
        "# Side by side on {} ({way}, {} flows{}): is kernel bypass warranted?\n\nCommand: `{command}`\n\n",
        if lab {
            "the lab's hosts"
        } else {
            "the netns testbed"
        },
        options.flows,
        if options.ipv6 { ", IPv6" } else { "" }
    );
    if let Some(progress) = &m.partial {
        let _ = writeln!(
            md,
            "> **Partial report**: {progress}. The run is still going or was interrupted; \
             this file is rewritten as rounds and phases finish.\n"
        );
    }
    if m.samples.is_empty() {
        md.push_str(
            "No fixed-load rounds ran (`--rounds 0`, or a direction other than up): no cost verdict; \
             the maximum-rate search below is the only result.\n",
        );
    } else {
        md.push_str(&super::verdict::markdown(&verdict, name_of, &host));
        md.push_str(&notes::row_summary(&rows, baseline));
        let keys: Vec<&str> = rows.iter().map(|r| r.setup.as_str()).collect();
        md.push_str(&notes::loads_not_carried(&analysis, &keys));
        md.push_str(&cost_table(
            &rows,
            &options.loads,
            if lab {
                "the relay host's CPUs"
            } else {
                "the whole machine"
            },
        ));
        let equal_cores = m.cores_per_side > 1 && !bypass.is_empty() && !sockets.is_empty();
        md.push_str(&core_budgets(
            m.cores,
            equal_cores.then_some(m.cores_per_side),
        ));
        md.push_str(&notes::counted_cpus(m.samples, m.environment));
        md.push_str(&notes::queue_spread(
            m.samples,
            m.cores_per_side,
            crate::bench::spread::sending_flows(options.flows),
        ));
        md.push_str(&scaling_table(&rows, &options.workers));
        md.push_str(&bypass_against_sockets(&analysis, &bypass, &sockets));
        md.push_str(&fast_path_against_reference(
            &analysis,
            m.setups,
            !m.machine.rows.is_empty(),
        ));
        md.push_str(&super::machine_profile::markdown(m.machine));
        md.push_str(&per_round_table(&rows, rounds_run));
        md.push_str(&pairs_table(&analysis, &options.versus));
        md.push_str(&super::fast_path::markdown(m.samples, options.flows));
        if !latency_rows.is_empty() {
            md.push_str(&super::latency::markdown(
                &latency_rows,
                options.search.latency_trial.as_secs_f64(),
                name_of,
            ));
        }
        md.push_str(&notes::rounds_method(
            options,
            m.seed,
            m.samples,
            // A lab's own words for what sent them (the testbed's are the default).
            options
                .lab
                .lab
                .as_ref()
                .and(m.environment["tools"]["fixed_loads"].as_str()),
        ));
        md.push_str(&notes::host_gate_method());
        md.push_str(&notes::host_gate_table(m.samples));
        md.push_str(&notes::null_outliers(&analysis.null_outliers));
        md.push_str(&notes::outside_threads(m.samples));
        md.push_str(&notes::anomalies(&rows));
    }
    md.push_str(if lab {
        notes::LAB_MODE
    } else {
        notes::VETH_LIMITS
    });
    if !m.left_out.is_empty() {
        let listed: Vec<String> = m
            .left_out
            .iter()
            .map(|(n, why)| format!("{n} ({why})"))
            .collect();
        let _ = writeln!(md, "\nNot measured in this run: {}.", listed.join("; "));
    }
    let searched = m.searched;
    let rates = searched.rates();
    let fraction_latency =
        super::max_rate::fraction_latency(&searched.pdr_latency(), &options.pdr_fractions);
    let calibration = super::calibration::Calibration::of(
        &rates,
        m.environment,
        options.search.size,
        options.ipv6,
    );
    if !searched.rows.is_empty() {
        md.push_str("\n# The maximum rate and the latency under it\n");
        md.push_str(&super::max_rate::markdown(
            &rates,
            &fraction_latency,
            options.final_trial.as_secs_f64(),
        ));
        md.push_str(&calibration.markdown(&rates));
        md.push_str("\n## Each search\n\n");
        let traffic = format!("{}-byte datagrams, {way}", options.search.size);
        md.push_str(&crate::bench::rows::body(
            &traffic,
            &searched.rows,
            options.search.fixed_pps,
        ));
        md.push_str(&notes::search_method(
            options,
            client_addresses(options.flows, m.environment),
            &m.environment["vcpus"],
        ));
        let drops: Vec<String> = searched
            .receive_buffer_drops
            .iter()
            .map(|(n, d)| format!("{n}: {d}"))
            .collect();
        let _ = writeln!(
            md,
            "\nDatagrams the relay host's kernel dropped for a full socket receive buffer \
             (`Udp: RcvbufErrors`) over each setup's searches: {}.",
            drops.join("; ")
        );
        if let Some(q) = &searched.quilkin_drops {
            let listed: Vec<String> = q.iter().map(|(r, n)| format!("{r}: {n}")).collect();
            let _ = writeln!(
                md,
                "\nQuilkin's own drop counters over its row: {}.",
                listed.join(", ")
            );
        }
    }
    md.push_str(&crate::bench::environment::markdown(m.environment));
    if !searched.rows.is_empty() && options.no_profile {
        md.push_str("\n## Where the time goes\n\nNot profiled in this run (`--no-profile`).\n");
        md.push_str(&crate::bench::rows::appendix(&searched.rows));
    } else if !searched.rows.is_empty() {
        let _ = writeln!(
            md,
            "\n## Where the time goes\n\nCPU {} (the forwarder's core) sampled by Linux perf over one \
             more trial per setup at 70 % of its maximum: how busy the core was, and the busiest \
             functions in percent of its busy samples (the idle loop left out). `native_write_msr` is RPS's inter-processor interrupt, a \
             hypervisor exit on this VM. Then, for each setup that forwards in a process of \
             its own, the same core traced (system calls, context switches, softirqs) over a \
             trial at 50k pps, its time split by leg: each system call charged to the side its \
             socket faces (the setup's client port: clients; any other: the internal side). On veth a send runs the receiver's stack on the sender's \
             core (softirq inside the calls); a NIC would not.",
            options.forwarder_cpu
        );
        md.push_str(&searched.profiles);
        md.push_str(&crate::bench::rows::appendix(&searched.rows));
    }
    let svg_name = options.out.with_extension("svg");
    if let Some(name) = svg_name.file_name().and_then(|n| n.to_str()) {
        md = md.replacen(
            "\n\n",
            &format!("\n\n![cost per packet and maximum rate]({name})\n\n"),
            1,
        );
    }
    let mut json = crate::bench::rows::json(&searched.rows, m.environment);
    json["cost"] = cost_json(
        &verdict,
        &analysis,
        &rows,
        m.samples,
        options,
        (m.seed, &host),
        (baseline, m.cores),
    );
    json["cost"]["threshold"] = serde_json::json!(options.threshold);
    json["cost"]["family_confidence"] = serde_json::json!(FAMILY_CONFIDENCE);
    json["cost"]["pairs_with_sockets"] = bypass
        .iter()
        .flat_map(|b| sockets.iter().map(move |s| (*b, *s)))
        .map(|(b, socket)| {
            let ratios: Vec<f64> = analysis.ratios(b, socket).iter().map(|r| r.1).collect();
            let tost = equivalence(&ratios, EQUIVALENCE_MARGIN, EQUIVALENCE_ALPHA);
            serde_json::json!({
                "setup": b,
                "against": socket,
                "ratio": interval_json(analysis.pair_ratio(b, socket)),
                "equivalence_margin": EQUIVALENCE_MARGIN,
                "equivalent": tost.map(|t| t.equivalent),
            })
        })
        .collect();
    json["max_rate"] = super::max_rate::json(&rates, &fraction_latency, interval_json);
    json["calibration"] = calibration.json(&rates);
    json["cost"]["latency_loads_pps"] = serde_json::json!(options.latency_loads);
    json["cost"]["latency"] = super::latency::json(&latency_rows, interval_json);
    json["cost"]["machine_profiles"] = super::machine_profile::json(m.machine);
    json["cost"]["pairs"] = options
        .versus
        .iter()
        .map(|(a, b)| serde_json::json!({ "setup": a, "against": b, "ratio": interval_json(analysis.pair_ratio(a, b)) }))
        .collect();
    json["partial"] = serde_json::json!(m.partial);
    json["left_out"] = m
        .left_out
        .iter()
        .map(|(setup, why)| serde_json::json!({ "setup": setup, "why": why }))
        .collect();
    let cost_bars: Vec<(String, Option<crate::bench::stats::Spread>)> = rows
        .iter()
        .map(|r| {
            (
                name_of(&r.setup),
                r.marginal.map(|p| (p.median, p.low, p.high)),
            )
        })
        .collect();
    let svg = crate::bench::rows::svg_with(
        &[(
            "marginal µs of the machine per packet, null row subtracted (lower is better)",
            "µs",
            cost_bars,
        )],
        &searched.rows,
        options.search.fixed_pps,
    );
    if let Some(dir) = options.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if m.partial.is_none() {
        print!("{md}");
    }
    write_whole(&options.out, md.as_bytes())?;
    write_whole(
        &options.out.with_extension("json"),
        serde_json::to_string_pretty(&json)
            .expect("JSON")
            .as_bytes(),
    )?;
    write_whole(&svg_name, svg.as_bytes())?;
    let what = if m.partial.is_some() {
        "partial report"
    } else {
        "report"
    };
    eprintln!("{what}: {}", options.out.display());
    Ok(())
}

/// Writes `bytes` to `path` whole or not at all (a file beside it, then renamed over it):
/// a run interrupted while writing leaves the last complete report.
fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".writing");
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::compare::setups::by_key;

    #[test]
    fn the_client_addresses_are_the_testbeds_or_the_agents() {
        let testbed = serde_json::json!({});
        assert_eq!(client_addresses(1_000, &testbed), 1);
        assert_eq!(client_addresses(100_000, &testbed), 3);
        let lab = serde_json::json!({"tools_host": {"client_addresses": 4}});
        assert_eq!(client_addresses(1_000, &lab), 4);
        // Fewer flows than addresses: one flow on each of as many.
        assert_eq!(client_addresses(3, &lab), 3);
        assert_eq!(client_addresses(1, &lab), 1);
    }

    #[test]
    fn the_verdict_weighs_relay_mio_on_as_many_workers_as_relay_afxdp_has_queues() {
        let mio = by_key("mio").unwrap();
        let afxdp = by_key("afxdp-native-wakeup").unwrap();
        let two = mio.with_workers(2);
        // The testbed: one queue, one worker a side.
        let setups = [by_key("direct").unwrap(), mio, two, afxdp];
        assert_eq!(
            verdict_rows(&setups, 1),
            (vec!["afxdp-native-wakeup"], vec!["mio"])
        );
        assert_eq!(baseline_of(&setups, 1), "mio");
        // A lab's two queues: relay-mio's two-worker row, the one-worker row kept for
        // ratios when asked for.
        assert_eq!(
            verdict_rows(&setups, 2),
            (vec!["afxdp-native-wakeup"], vec!["mio-w2"])
        );
        assert_eq!(baseline_of(&setups, 2), "mio");
        assert_eq!(baseline_of(&[two, afxdp], 2), "mio-w2");
    }

    #[test]
    fn the_budget_line_says_equal_cores_only_when_the_verdict_weighs_them() {
        let two = by_key("mio").unwrap().with_workers(2);
        let cores = vec![(two.key.to_string(), "2 (CPU 1,0)".to_string())];
        let weighed = core_budgets(&cores, Some(2));
        assert!(
            weighed.contains("Each row's cores: relay-mio, 2 workers: 2 (CPU 1,0)."),
            "{weighed}"
        );
        assert!(
            weighed.contains("one worker on each of 2 RX queues"),
            "{weighed}"
        );
        let not_weighed = core_budgets(&cores, None);
        assert!(!not_weighed.contains("RX queues"), "{not_weighed}");
        assert!(core_budgets(&[], Some(2)).is_empty());
    }
}
