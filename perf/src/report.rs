//! The report: one row per setup, each measured by repeated searches, as Markdown for
//! people and JSON for machines, with a verdict computed from the rows.

use std::fmt::Write as _;

use crate::load::{CDF_QUANTILES, Trial};
use crate::search::Limit;
use crate::stats::{Spread, spread};
use crate::wake::WakeCost;

/// One search of a setup and what its cores spent at its maximum.
#[derive(Clone, Debug)]
pub struct Run {
    /// The search.
    pub search: crate::search::SearchRun,
    /// Busy time of the forwarder's core (or threads) per forwarded packet at the
    /// maximum, µs.
    pub forwarder_us_per_packet: Option<f64>,
    /// Share of the forwarder's core busy at the maximum.
    pub forwarder_busy: Option<f64>,
    /// Share of the load tools' core busy at the maximum.
    pub tools_busy: Option<f64>,
    /// Busy time of the whole machine per packet at the maximum, µs.
    pub machine_us_per_packet: Option<f64>,
    /// The host's cross-core wake-up round trip, read just before the search (see
    /// [`crate::wake`]): what each hop between cores cost then.
    pub host_wake: Option<WakeCost>,
}

/// A core this busy at the maximum was the limit.
pub const SATURATED: f64 = 0.95;

impl Run {
    /// What limited this run: the search's reason, refined by which core was saturated.
    pub fn limit(&self) -> String {
        match self.search.limit {
            Limit::Loss if self.tools_busy.is_some_and(|b| b >= SATURATED) => "tools core".into(),
            Limit::Loss if self.forwarder_busy.is_some_and(|b| b >= SATURATED) => {
                "forwarder core".into()
            }
            other => other.label().into(),
        }
    }
}

/// One measured setup.
#[derive(Clone, Debug)]
pub struct Row {
    /// Setup name.
    pub setup: String,
    /// Every repetition.
    pub runs: Vec<Run>,
    /// The trial at the fixed moderate load (latency).
    pub fixed: Trial,
    /// Busy-polling: its core is 100 % busy by construction.
    pub busy_polls: bool,
}

impl Row {
    /// Max loss-free pps over the runs that found one: (median, min, max).
    pub fn max_pps(&self) -> Option<Spread> {
        let v: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|r| r.search.best.map(|b| b.sent_pps as f64))
            .collect();
        spread(&v)
    }

    /// PDR pps over the runs that found one: (median, min, max).
    pub fn pdr_pps(&self) -> Option<Spread> {
        let v: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|r| r.search.pdr.map(|b| b.sent_pps as f64))
            .collect();
        spread(&v)
    }

    /// Forwarder µs per packet at each run's maximum: (median, min, max).
    pub fn forwarder_us(&self) -> Option<Spread> {
        let v: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|r| r.forwarder_us_per_packet)
            .collect();
        spread(&v)
    }

    fn median_of(&self, f: impl Fn(&Run) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.runs.iter().filter_map(f).collect();
        spread(&v).map(|s| s.0)
    }

    /// The limits of the runs, deduplicated, in order.
    pub fn limits(&self) -> String {
        let mut seen: Vec<String> = vec![];
        for r in &self.runs {
            let l = r.limit();
            if !seen.contains(&l) {
                seen.push(l);
            }
        }
        seen.join(", ")
    }

    /// True when every run's maximum was set by the setup, not by the tools or the
    /// search's ceiling.
    pub fn setup_limited(&self) -> bool {
        self.runs
            .iter()
            .all(|r| matches!(r.limit().as_str(), "loss" | "forwarder core"))
    }
}

fn spread_text((median, min, max): Spread, digits: usize) -> String {
    format!("{median:.digits$} [{min:.digits$}–{max:.digits$}]")
}

fn kpps(v: Spread) -> String {
    spread_text((v.0 / 1e3, v.1 / 1e3, v.2 / 1e3), 0) + "k"
}

fn pct(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{:.0} %", v * 100.0))
}

/// Renders the report under `title`; `notes` go after the table (topology, placement).
pub fn markdown(
    (title, traffic): (&str, &str),
    rows: &[Row],
    fixed_pps: u64,
    command: &str,
    notes: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {title}\n");
    let _ = writeln!(out, "Command: `{command}`  ");
    out.push_str(&body(traffic, rows, fixed_pps));
    out.push_str(notes);
    out.push_str(&appendix(rows));
    out
}

/// The maximum-rate table, its verdict and the latency section.
pub fn body(traffic: &str, rows: &[Row], fixed_pps: u64) -> String {
    let mut out = String::new();
    let runs = rows.first().map_or(0, |r| r.runs.len());
    let _ = writeln!(
        out,
        "{traffic}. Each setup is searched {runs} time(s), CSIT-style: short trials, each rate \
         judged by the median loss of several trials, the first trial of a search discarded; \
         NDR is the highest rate with no loss, PDR the highest with at most {:.1} % (their gap, \
         as a share of PDR, is the search's noise figure); figures are median [min–max] over \
         the searches, at the achieved send rate. \"limit\" says what stopped each search: \
         `loss` (the setup dropped above it), `forwarder core` / `tools core` (that core was \
         ≥ {:.0} % busy at NDR), `generator` (the generator fell short of the offered rate), \
         `search ceiling`, or `no loss-free rate`. \"forwarder µs/pkt\" is the forwarder \
         core's busy time per packet at NDR.\n",
        crate::search::PDR_LOSS * 100.0,
        SATURATED * 100.0
    );
    let direct_p99 = rows
        .iter()
        .find(|r| r.setup.starts_with("direct"))
        .map(|r| (r.fixed.latency.p99(), r.fixed.latency.p999()));
    let _ = writeln!(
        out,
        "| setup | NDR pps | PDR pps | NDR–PDR gap | limit | forwarder µs/pkt | forwarder core busy | tools core busy | machine µs/pkt | p50 / p99 / p99.9 µs at {fixed_pps} pps | added p99 / p99.9 µs |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|---:|---:|---:|---:|---|---|");
    for r in rows {
        let added = match direct_p99 {
            Some((p99, p999))
                if !r.setup.starts_with("direct")
                    && r.fixed.received > 0
                    && r.fixed.latency.samples > 0 =>
            {
                format!(
                    "{:+.0} / {:+.0}",
                    r.fixed.latency.p99() - p99,
                    r.fixed.latency.p999() - p999
                )
            }
            _ => "–".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {}{} | {} | {} | {} | {} | {added} |",
            r.setup,
            r.max_pps().map_or("none".into(), kpps),
            r.pdr_pps().map_or("none".into(), kpps),
            pct(r.median_of(|x| x.search.noise())),
            r.limits(),
            r.forwarder_us().map_or("–".into(), |v| spread_text(v, 2)),
            if r.busy_polls { " (busy poll)" } else { "" },
            pct(r.median_of(|x| x.forwarder_busy)),
            pct(r.median_of(|x| x.tools_busy)),
            r.median_of(|x| x.machine_us_per_packet)
                .map_or("–".into(), |v| format!("{v:.2}")),
            if r.fixed.received > 0 && r.fixed.latency.samples > 0 {
                let l = &r.fixed.latency;
                format!("{:.0} / {:.0} / {:.0}", l.p50(), l.p99(), l.p999())
            } else {
                "–".into()
            },
        );
    }
    let _ = writeln!(out, "\n{}", verdict(rows));
    out.push_str(&latency_section(rows, fixed_pps));
    out
}

/// The host's state at each search and every search trial.
pub fn appendix(rows: &[Row]) -> String {
    let mut out = host_state_section(rows);
    let _ = writeln!(out, "\n## Search trials\n");
    let _ = writeln!(
        out,
        "| setup | search | offered pps | achieved pps | sent | received | loss |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        for (i, run) in r.runs.iter().enumerate() {
            for t in &run.search.trials {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {:.3} % |",
                    r.setup,
                    i + 1,
                    t.offered_pps,
                    t.sent_pps,
                    t.sent,
                    t.received,
                    t.loss() * 100.0
                );
            }
        }
    }
    out
}

/// The latency trial in full: each row's CDF and sample count, and what a wake-up costs,
/// computed from rows measured both sleeping and busy-polling.
pub fn latency_section(rows: &[Row], fixed_pps: u64) -> String {
    let measured: Vec<&Row> = rows
        .iter()
        .filter(|r| r.fixed.latency.samples > 0)
        .collect();
    if measured.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n## Latency at {fixed_pps} pps\n\nOne-way, sender's socket to the sink's socket, of the \
         datagrams the sink sampled, in µs at each quantile (\"max\" is the worst sample; a tail \
         quantile from few samples is a handful of datagrams).\n\n| setup | samples |"
    );
    for q in CDF_QUANTILES {
        out.push_str(&format!(" {} |", quantile_name(q)));
    }
    out.push_str(&format!(
        "\n|---|---:|{}\n",
        "---:|".repeat(CDF_QUANTILES.len())
    ));
    for r in &measured {
        let _ = write!(out, "| {} | {} |", r.setup, r.fixed.latency.samples);
        for us in r.fixed.latency.cdf_us {
            let _ = write!(out, " {us:.0} |");
        }
        out.push('\n');
    }
    let pairs = wake_up_costs(rows);
    if !pairs.is_empty() {
        out.push_str(
            "\nWhere the latency comes from: the same forwarder sleeping between datagrams and \
             busy-polling. A sleeping worker is woken for each datagram that finds it idle (at this \
             rate, most): an inter-processor interrupt to its core and, on a VM, the hypervisor \
             scheduling that vCPU again. ",
        );
        let said: Vec<String> = pairs
            .iter()
            .map(|(sleeping, busy)| {
                let (a, b) = (sleeping.fixed.latency, busy.fixed.latency);
                format!(
                    "{}: median {:.0} µs sleeping, {:.0} µs busy-polling (a wake-up costs about {:.0} µs), \
                     p99 {:.0} against {:.0}",
                    sleeping.setup,
                    a.p50(),
                    b.p50(),
                    a.p50() - b.p50(),
                    a.p99(),
                    b.p99()
                )
            })
            .collect();
        out.push_str(&said.join("; "));
        out.push_str(".\n");
    }
    out
}

/// A quantile's column name: p50, p99.9, max.
fn quantile_name(q: f64) -> String {
    if q >= 1.0 {
        "max".into()
    } else {
        format!("p{}", q * 100.0)
    }
}

/// Rows measured both ways: (sleeping, busy-polling) pairs of the same forwarder, by name
/// ("relay-mio" and "relay-mio busy"; "… wakeup" and "… busy"), both with latency.
fn wake_up_costs(rows: &[Row]) -> Vec<(&Row, &Row)> {
    let with_latency = |r: &&Row| r.fixed.latency.samples > 0;
    rows.iter()
        .filter(|r| r.busy_polls)
        .filter(with_latency)
        .filter_map(|busy| {
            let sleeping_names = [
                busy.setup.replace(" busy", ""),
                busy.setup.replace(" busy", " wakeup"),
            ];
            rows.iter()
                .filter(with_latency)
                .find(|r| !r.busy_polls && sleeping_names.contains(&r.setup))
                .map(|sleeping| (sleeping, busy))
        })
        .collect()
}

/// Audio packets per second one voice session costs a relay: 50 each way.
pub const VOICE_SESSION_PPS: f64 = 100.0;

/// The name prefix of the rows that run relay-afxdp's worker on the `xdp` crate's AF_XDP
/// layer instead of ours (`--xsk-layer xdp-crate`).
pub const ON_XDP_CRATE: &str = "relay-afxdp on the xdp crate ";

/// One line per AF_XDP layer comparison: each row on the `xdp` crate against the row with
/// the same worker and modes on ours. Whether to adopt the crate is read from here.
fn layer_verdicts(rows: &[Row]) -> String {
    let mut out = String::new();
    for theirs in rows.iter().filter(|r| r.setup.starts_with(ON_XDP_CRATE)) {
        let modes = &theirs.setup[ON_XDP_CRATE.len()..];
        let ours_name = format!("relay-afxdp {modes}");
        let Some(ours) = rows.iter().find(|r| r.setup == ours_name) else {
            continue;
        };
        let (Some((them, them_min, them_max)), Some((us, us_min, us_max))) =
            (theirs.forwarder_us(), ours.forwarder_us())
        else {
            let _ = writeln!(
                out,
                "- AF_XDP layer ({modes}): one of the two rows had no loss-free trial: no comparison."
            );
            continue;
        };
        let reading = if them_max >= us_min && us_max >= them_min {
            "the ranges overlap: no measurable difference on this host".to_string()
        } else if them < us {
            format!(
                "the crate is **{:.0} %** cheaper",
                (1.0 - them / us) * 100.0
            )
        } else {
            format!("ours is **{:.0} %** cheaper", (1.0 - us / them) * 100.0)
        };
        let _ = writeln!(
            out,
            "- AF_XDP layer ({modes}): the `xdp` crate costs **{them:.2} µs** [{them_min:.2}–{them_max:.2}] per packet under the same worker, ours **{us:.2} µs** [{us_min:.2}–{us_max:.2}]: {reading}."
        );
    }
    out
}

/// The verdict, computed from the rows: relay-mio against the best relay-afxdp row (by
/// forwarder µs per packet), and each against the alternatives a user would pick.
pub fn verdict(rows: &[Row]) -> String {
    let mut out = String::from("## At the maximum rate\n\n");
    verdict_against_relay_mio(rows, &mut out);
    out.push_str(&layer_verdicts(rows));
    out
}

/// The verdict's lines that price each row against relay-mio (none without it).
fn verdict_against_relay_mio(rows: &[Row], out: &mut String) {
    let find = |name: &str| rows.iter().find(|r| r.setup == name);
    let cost = |r: &Row| r.forwarder_us().map(|v| v.0);
    // relay-mio's row (on loopback: its first, one-worker row).
    let Some(mio) = rows
        .iter()
        .find(|r| r.setup == "relay-mio" || r.setup.starts_with("relay-mio,"))
    else {
        out.push_str("relay-mio was not measured: no verdict against it.\n");
        return;
    };
    let Some(mio_us) = cost(mio) else {
        out.push_str("relay-mio had no loss-free trial: no verdict against it.\n");
        return;
    };
    let sessions = |us: f64| 1e6 / us / VOICE_SESSION_PPS;
    let _ = writeln!(
        out,
        "- relay-mio costs **{mio_us:.2} µs** of its core per packet: about **{:.0} voice sessions per core** at {VOICE_SESSION_PPS:.0} packets per second each (50 each way).",
        sessions(mio_us)
    );
    let is_fast_path = |r: &Row| r.setup.starts_with("relay-afxdp fast path");
    let on_crate = |r: &Row| r.setup.starts_with(ON_XDP_CRATE);
    let afxdp = rows
        .iter()
        .filter(|r| {
            r.setup.starts_with("relay-afxdp") && !r.busy_polls && !is_fast_path(r) && !on_crate(r)
        })
        .filter_map(|r| r.forwarder_us().map(|c| (r, c)))
        .min_by(|a, b| a.1.0.total_cmp(&b.1.0));
    match afxdp {
        Some((row, (us, _, us_max))) => {
            let saving = 1.0 - us / mio_us;
            let mio_min = mio.forwarder_us().map_or(mio_us, |v| v.1);
            let overlap = if us_max >= mio_min {
                ", but the two ranges overlap: these searches cannot tell them apart"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "- {} costs **{us:.2} µs** of its core per packet at its maximum: **{:.0} %** {} than relay-mio ({:.0} sessions per core){overlap}. Whether that warrants kernel bypass is the fixed-load verdict's to say, not one search's.",
                row.setup,
                saving.abs() * 100.0,
                if saving >= 0.0 { "less" } else { "more" },
                sessions(us),
            );
        }
        None => out
            .push_str("- relay-afxdp (wakeup mode) was not measured or had no loss-free trial.\n"),
    }
    // The fast path is not kernel bypass but the kernel doing the relay's work: priced
    // against the in-kernel reference relay (goal ≤ 1.2× its cost) and relay-mio (≥ 2×).
    let reference_us = find("in-kernel XDP rewrite relay").and_then(cost);
    for row in rows.iter().filter(|r| is_fast_path(r)) {
        let Some(us) = cost(row) else {
            let _ = writeln!(out, "- {} had no loss-free trial.", row.setup);
            continue;
        };
        let against_reference = reference_us.map_or(String::new(), |reference| {
            let ratio = us / reference;
            format!(
                "{ratio:.2}× the in-kernel reference relay's {reference:.2} µs (goal ≤ 1.2×: {}), ",
                if ratio <= 1.2 { "met" } else { "not met" }
            )
        });
        let per_core = mio_us / us;
        let _ = writeln!(
            out,
            "- {} costs **{us:.2} µs** per packet: {against_reference}relay-mio spends {per_core:.2}× that (goal ≥ 2×: {}); {:.0} sessions per core.",
            row.setup,
            if per_core >= 2.0 { "met" } else { "not met" },
            sessions(us),
        );
    }
    let mio_pps = mio.max_pps().map(|v| v.0);
    for (alt, goal) in [
        ("nginx stream proxy, 1 worker", 2.5),
        ("naive recv_from/send_to relay", 1.2),
    ] {
        if let (Some(row), Some(mio_pps)) = (find(alt), mio_pps)
            && let Some((alt_pps, _, _)) = row.max_pps()
        {
            let ratio = mio_pps / alt_pps;
            let _ = writeln!(
                out,
                "- relay-mio carries **{ratio:.2}×** the {alt} (goal ≥ {goal}×: {}).",
                if ratio >= goal { "met" } else { "not met" }
            );
        }
    }
    for reference in ["nftables DNAT+SNAT (kernel)", "in-kernel XDP rewrite relay"] {
        if let (Some(row), Some(us)) = (find(reference), find(reference).and_then(cost)) {
            if us < 0.5 {
                let _ = writeln!(
                    out,
                    "- {} ran in the kernel's softirq on the tools' core (its work was not steered to the forwarder core: run without `--no-steer`), so its cost is not comparable here.",
                    row.setup
                );
                continue;
            }
            let _ = writeln!(
                out,
                "- {} costs {us:.2} µs per packet: relay-mio spends {:.1}× that.",
                row.setup,
                mio_us / us
            );
        }
    }
    let fastest = rows
        .iter()
        .filter(|r| !r.setup.starts_with("direct"))
        .filter_map(|r| r.max_pps().map(|v| v.0))
        .fold(0.0, f64::max);
    if let Some(direct) = find("direct path (no relay)").and_then(Row::max_pps) {
        let _ = writeln!(
            out,
            "- The direct path carried {:.0}k pps, {:.1}× the fastest forwarder row ({:.0}k): {}.",
            direct.0 / 1e3,
            direct.0 / fastest.max(1.0),
            fastest / 1e3,
            if direct.0 >= 2.0 * fastest {
                "the tools were not the limit of any row"
            } else {
                "the tools may limit the fastest rows (see each row's limit)"
            }
        );
    }
    let tool_limited: Vec<&str> = rows
        .iter()
        .filter(|r| !r.setup.starts_with("direct") && !r.setup_limited())
        .map(|r| r.setup.as_str())
        .collect();
    if !tool_limited.is_empty() {
        let _ = writeln!(
            out,
            "- Not limited by the setup itself in every search (see \"limit\"): {}.",
            tool_limited.join(", ")
        );
    }
}

/// Each search beside the host's cross-core wake-up round trip read just before it: on a
/// VM that price moves from minute to minute, and every hop of a forwarder's path pays it,
/// so a search that found less while the host woke slower says why. Empty when no
/// search has a reading.
fn host_state_section(rows: &[Row]) -> String {
    if rows
        .iter()
        .all(|r| r.runs.iter().all(|run| run.host_wake.is_none()))
    {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## The host's state at each search\n\nBefore each search, two threads pinned to \
         the tools' and the forwarder's cores wake each other {} times (a datagram each way on a \
         socket pair, as a forwarder asleep on its socket is woken): the median and \
         p99 round trip (two wake-ups). On bare metal this is a few µs and steady; on a VM each \
         wake-up is an interrupt through the hypervisor, and its price moves with the host's \
         load. Compare a setup's searches with each other through it: a slow search with a \
         slow host is the host.\n",
        crate::wake::ROUND_TRIPS
    );
    let _ = writeln!(
        out,
        "| setup | search | max loss-free pps | forwarder µs/pkt | wake-up round trip before it |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|");
    for r in rows {
        for (i, run) in r.runs.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                r.setup,
                i + 1,
                run.search.best.map_or("none".into(), |b| format!(
                    "{:.0}k",
                    b.sent_pps as f64 / 1e3
                )),
                run.forwarder_us_per_packet
                    .map_or("–".into(), |us| format!("{us:.2}")),
                run.host_wake.map_or("not read".into(), |w| w.label()),
            );
        }
    }
    out
}

/// The rows as one JSON document.
pub fn json(rows: &[Row], environment: &serde_json::Value) -> serde_json::Value {
    let verdict_text = verdict(rows);
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let s = |v: Option<Spread>| {
                v.map(|(m, lo, hi)| serde_json::json!({"median": m, "min": lo, "max": hi}))
            };
            serde_json::json!({
                "setup": r.setup,
                "max_loss_free_pps": s(r.max_pps()),
                "pdr_pps": s(r.pdr_pps()),
                "forwarder_us_per_packet": s(r.forwarder_us()),
                "busy_polls": r.busy_polls,
                "limits": r.runs.iter().map(Run::limit).collect::<Vec<_>>(),
                "runs": r.runs.iter().map(|run| serde_json::json!({
                    "max_loss_free_pps": run.search.best.map(|b| b.sent_pps),
                    "pdr_pps": run.search.pdr.map(|b| b.sent_pps),
                    "ndr_pdr_gap": run.search.noise(),
                    "limit": run.limit(),
                    "forwarder_us_per_packet": run.forwarder_us_per_packet,
                    "forwarder_busy": run.forwarder_busy,
                    "tools_busy": run.tools_busy,
                    "machine_us_per_packet": run.machine_us_per_packet,
                    "host_wake_round_trip": run.host_wake.map(|w| w.json()),
                    "trials": run.search.trials.iter().map(|t| serde_json::json!({
                        "offered_pps": t.offered_pps, "sent_pps": t.sent_pps,
                        "sent": t.sent, "received": t.received,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "fixed": {
                    "offered_pps": r.fixed.offered_pps,
                    "received": r.fixed.received,
                    "p50_us": r.fixed.latency.p50(),
                    "p99_us": r.fixed.latency.p99(),
                    "p999_us": r.fixed.latency.p999(),
                    "latency_samples": r.fixed.latency.samples,
                    "latency_cdf_us": CDF_QUANTILES.iter().zip(r.fixed.latency.cdf_us)
                        .map(|(q, us)| serde_json::json!({"quantile": q, "us": us}))
                        .collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    serde_json::json!({
        "environment": environment,
        "rows": rows,
        "verdict": verdict_text,
    })
}

/// One horizontal bar chart of `(label, (median, min, max))`: a bar to the median and a
/// whisker from min to max; `None` values get a "none" label and no bar.
fn svg_bars(
    out: &mut String,
    top: f64,
    title: &str,
    unit: &str,
    bars: &[(String, Option<Spread>)],
) -> f64 {
    const LABEL_W: f64 = 260.0;
    const PLOT_W: f64 = 420.0;
    const ROW_H: f64 = 22.0;
    let scale_max = bars
        .iter()
        .filter_map(|(_, v)| v.map(|v| v.2))
        .fold(0.0, f64::max)
        .max(1e-9);
    let _ = writeln!(
        out,
        r#"<text x="10" y="{:.0}" font-weight="bold">{title}</text>"#,
        top + 16.0
    );
    let mut y = top + 28.0;
    for (label, value) in bars {
        let _ = writeln!(
            out,
            r#"<text x="{:.0}" y="{:.0}" text-anchor="end">{label}</text>"#,
            LABEL_W - 8.0,
            y + 14.0
        );
        match value {
            Some((median, min, max)) => {
                let x = |v: f64| LABEL_W + PLOT_W * v / scale_max;
                let _ = writeln!(
                    out,
                    r##"<rect x="{LABEL_W}" y="{:.0}" width="{:.1}" height="16" fill="#4a7fb5"/>"##,
                    y + 2.0,
                    x(*median) - LABEL_W
                );
                let _ = writeln!(
                    out,
                    r#"<line x1="{:.1}" x2="{:.1}" y1="{:.0}" y2="{:.0}" stroke="black"/>"#,
                    x(*min),
                    x(*max),
                    y + 10.0,
                    y + 10.0
                );
                let _ = writeln!(
                    out,
                    r#"<text x="{:.1}" y="{:.0}">{} {unit}</text>"#,
                    x(*max) + 6.0,
                    y + 14.0,
                    if *median >= 1000.0 {
                        format!("{:.0}k", median / 1e3)
                    } else {
                        format!("{median:.2}")
                    }
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    r#"<text x="{LABEL_W}" y="{:.0}" fill="gray">none</text>"#,
                    y + 14.0
                );
            }
        }
        y += ROW_H;
    }
    y + 10.0
}

/// The latency CDF of every row with samples: latency on a log scale across, the
/// quantile on a "nines" scale up (p90 is 1, p99 2, p99.9 3, …), one line per setup.
fn svg_cdf(out: &mut String, top: f64, fixed_pps: u64, rows: &[Row]) -> f64 {
    const LEFT: f64 = 60.0;
    const PLOT_W: f64 = 560.0;
    const PLOT_H: f64 = 220.0;
    const COLOURS: [&str; 8] = [
        "#222222", "#4a7fb5", "#d9822b", "#3a9a5b", "#b54a4a", "#7a5cb5", "#8c6d31", "#2bb5b0",
    ];
    let measured: Vec<&Row> = rows
        .iter()
        .filter(|r| r.fixed.latency.samples > 0)
        .collect();
    if measured.is_empty() {
        return top;
    }
    // The worst sample is drawn at the last nines the samples can show.
    let nines = |q: f64, samples: u64| {
        let floor = 1.0 / samples.max(10) as f64;
        -(1.0 - q).max(floor).log10()
    };
    let max_nines = measured
        .iter()
        .map(|r| nines(1.0, r.fixed.latency.samples))
        .fold(1.0, f64::max)
        .ceil();
    let max_us = measured
        .iter()
        .map(|r| r.fixed.latency.cdf_us[CDF_QUANTILES.len() - 1])
        .fold(10.0, f64::max);
    let decades = max_us.log10().ceil().max(1.0);
    let x = |us: f64| LEFT + PLOT_W * us.max(1.0).log10() / decades;
    let plot_top = top + 28.0;
    let y = |n: f64| plot_top + PLOT_H * (1.0 - n / max_nines);
    let _ = writeln!(
        out,
        r#"<text x="10" y="{:.0}" font-weight="bold">one-way latency at {fixed_pps} pps: quantile against µs (log)</text>"#,
        top + 16.0
    );
    for d in 0..=decades as u32 {
        let us = 10f64.powi(d as i32);
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.0}" y2="{2:.0}" stroke="#dddddd"/><text x="{0:.1}" y="{3:.0}" text-anchor="middle">{us}</text>"##,
            x(us),
            plot_top,
            plot_top + PLOT_H,
            plot_top + PLOT_H + 14.0
        );
    }
    for n in 0..=max_nines as u32 {
        let label = match n {
            0 => "p0".to_string(),
            n => format!("p{}", 100.0 - 100.0 / 10f64.powi(n as i32)),
        };
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{:.0}" y1="{1:.1}" y2="{1:.1}" stroke="#dddddd"/><text x="{2:.0}" y="{3:.1}" text-anchor="end">{label}</text>"##,
            LEFT + PLOT_W,
            y(f64::from(n)),
            LEFT - 4.0,
            y(f64::from(n)) + 4.0
        );
    }
    for (i, r) in measured.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = CDF_QUANTILES
            .iter()
            .zip(r.fixed.latency.cdf_us)
            .map(|(&q, us)| format!("{:.1},{:.1}", x(us), y(nines(q, r.fixed.latency.samples))))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let legend_y = plot_top + 14.0 + 16.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<rect x="{:.0}" y="{:.0}" width="12" height="4" fill="{colour}"/><text x="{:.0}" y="{:.0}">{}</text>"#,
            LEFT + PLOT_W + 10.0,
            legend_y - 6.0,
            LEFT + PLOT_W + 26.0,
            legend_y,
            r.setup
        );
    }
    plot_top + PLOT_H + 30.0
}

/// The report's charts as one SVG: max loss-free pps and forwarder µs per packet, each
/// a median bar with a min–max whisker per setup, and the latency CDF at the fixed rate.
pub fn svg(rows: &[Row], fixed_pps: u64) -> String {
    svg_with(&[], rows, fixed_pps)
}

/// One bar chart: its title, its unit, and a (label, median and range) per bar.
pub type BarChart<'a> = (&'a str, &'a str, Vec<(String, Option<Spread>)>);

/// [`svg`] with `first` bar charts above its own.
pub fn svg_with(first: &[BarChart<'_>], rows: &[Row], fixed_pps: u64) -> String {
    let mut body = String::new();
    let mut y = 0.0;
    for (title, unit, bars) in first {
        y = svg_bars(&mut body, y, title, unit, bars);
    }
    let pps: Vec<_> = rows
        .iter()
        .map(|r| (r.setup.clone(), r.max_pps()))
        .collect();
    let cost: Vec<_> = rows
        .iter()
        .filter(|r| !r.setup.starts_with("direct"))
        .map(|r| (r.setup.clone(), r.forwarder_us()))
        .collect();
    let y = svg_bars(
        &mut body,
        y,
        "NDR: highest packets per second with no loss",
        "pps",
        &pps,
    );
    let y = svg_bars(
        &mut body,
        y,
        "forwarder core µs per packet (lower is better)",
        "µs",
        &cost,
    );
    let y = svg_cdf(&mut body, y, fixed_pps, rows);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{y:.0}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}</svg>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CDF whose median is `p50` and every other quantile in proportion.
    fn latency(p50: f64) -> crate::load::Latency {
        crate::load::Latency {
            samples: 1_000,
            cdf_us: [0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0].map(|k| k * p50),
        }
    }

    fn row(setup: &str, pps: u64, us: f64, busy_polls: bool) -> Row {
        let best = Trial {
            offered_pps: pps,
            sent_pps: pps,
            sent: pps,
            received: pps,
            latency: latency(10.0),
        };
        let run = |us: f64| Run {
            search: crate::search::SearchRun {
                best: Some(best),
                pdr: Some(best),
                limit: Limit::Loss,
                trials: vec![best],
                discarded: None,
            },
            forwarder_us_per_packet: Some(us),
            forwarder_busy: Some(0.5),
            tools_busy: None,
            machine_us_per_packet: Some(us * 2.0),
            host_wake: None,
        };
        Row {
            setup: setup.into(),
            runs: vec![run(us * 0.9), run(us), run(us * 1.1)],
            fixed: best,
            busy_polls,
        }
    }

    fn with_p50(mut r: Row, p50: f64) -> Row {
        r.fixed.latency = latency(p50);
        r
    }

    #[test]
    fn each_search_is_listed_beside_the_host_wake_up_read_before_it() {
        let mut mio = row("relay-mio", 200_000, 4.0, false);
        assert_eq!(
            host_state_section(std::slice::from_ref(&mio)),
            "",
            "no reading, no section"
        );
        mio.runs[0].host_wake = Some(WakeCost {
            cpus: (0, 1),
            round_trips: 2_000,
            p50_us: 55.2,
            p99_us: 98.4,
        });
        let section = host_state_section(std::slice::from_ref(&mio));
        assert!(
            section.contains("| relay-mio | 1 | 200k | 3.60 | 55 µs (p99 98) |"),
            "{section}"
        );
        assert!(
            section.contains("| relay-mio | 2 | 200k | 4.00 | not read |"),
            "{section}"
        );
        let json: serde_json::Value = json(&[mio], &serde_json::json!({}));
        assert_eq!(
            json["rows"][0]["runs"][0]["host_wake_round_trip"]["p50_us"],
            55.2
        );
        assert!(json["rows"][0]["runs"][1]["host_wake_round_trip"].is_null());
    }

    #[test]
    fn a_wake_up_is_priced_from_the_same_forwarder_sleeping_and_busy_polling() {
        let rows = [
            with_p50(row("direct path (no relay)", 800_000, 0.01, false), 10.0),
            with_p50(row("relay-mio", 150_000, 6.0, false), 100.0),
            with_p50(row("relay-mio busy", 200_000, 5.0, true), 40.0),
            with_p50(row("relay-afxdp skb wakeup", 250_000, 3.0, false), 90.0),
            // Busy-polling with no sleeping partner: not paired.
            with_p50(row("relay-afxdp native busy", 300_000, 1.0, true), 30.0),
        ];
        let text = latency_section(&rows, 20_000);
        assert!(
            text.contains("relay-mio: median 100 µs sleeping, 40 µs busy-polling (a wake-up costs about 60 µs), p99 200 against 80"),
            "{text}"
        );
        assert!(!text.contains("relay-afxdp skb wakeup: median"), "{text}");
        assert!(
            text.contains("| relay-mio busy | 1000 | 20 | 32 | 40 | 60 | 80 | 120 | 160 | 200 |"),
            "{text}"
        );
        assert_eq!(svg(&rows, 20_000).matches("<polyline").count(), rows.len());
        // Without samples there is no latency section and no CDF line.
        let mut silent = rows[1].clone();
        silent.fixed.latency = crate::load::Latency::default();
        assert_eq!(latency_section(&[silent.clone()], 20_000), "");
        assert_eq!(svg(&[silent], 20_000).matches("<polyline").count(), 0);
    }

    #[test]
    fn the_verdict_is_computed_from_the_rows() {
        let rows = [
            row("direct path (no relay)", 800_000, 0.01, false),
            row("naive recv_from/send_to relay", 100_000, 12.0, false),
            row("nginx stream proxy, 1 worker", 20_000, 30.0, false),
            row("relay-mio", 150_000, 6.0, false),
            row("relay-afxdp native wakeup", 250_000, 3.0, false),
            row("relay-afxdp native busy", 300_000, 1.0, true),
        ];
        let v = verdict(&rows);
        assert!(v.contains("relay-mio costs **6.00 µs**"), "{v}");
        assert!(v.contains("about **1667 voice sessions per core**"), "{v}");
        // The busy-polling row is not the comparison: its core is busy by construction.
        assert!(
            v.contains("relay-afxdp native wakeup costs **3.00 µs**"),
            "{v}"
        );
        assert!(v.contains("**50 %** less than relay-mio"), "{v}");
        assert!(v.contains("**7.50×** the nginx"), "{v}");
        assert!(
            v.contains("**1.50×** the naive") && v.contains("met"),
            "{v}"
        );
        assert!(v.contains("the tools were not the limit of any row"), "{v}");
    }

    #[test]
    fn the_fast_path_is_priced_against_the_in_kernel_reference_not_as_bypass() {
        let rows = [
            row("in-kernel XDP rewrite relay", 900_000, 1.0, false),
            row("relay-mio", 150_000, 6.0, false),
            row("relay-afxdp native wakeup", 250_000, 4.0, false),
            row("relay-afxdp fast path native", 700_000, 1.1, false),
            row("relay-afxdp fast path skb", 400_000, 3.5, false),
        ];
        let v = verdict(&rows);
        // Kernel bypass is still the AF_XDP row, even though the fast path is cheaper.
        assert!(
            v.contains("relay-afxdp native wakeup costs **4.00 µs**"),
            "{v}"
        );
        assert!(
            v.contains("relay-afxdp fast path native costs **1.10 µs** per packet: 1.10× the in-kernel reference relay's 1.00 µs (goal ≤ 1.2×: met), relay-mio spends 5.45× that (goal ≥ 2×: met)"),
            "{v}"
        );
        assert!(
            v.contains("relay-afxdp fast path skb costs **3.50 µs** per packet: 3.50× the in-kernel reference relay's 1.00 µs (goal ≤ 1.2×: not met), relay-mio spends 1.71× that (goal ≥ 2×: not met)"),
            "{v}"
        );
    }

    #[test]
    fn the_xdp_crate_rows_are_compared_with_their_twins_not_taken_as_the_bypass_row() {
        let rows = [
            row("relay-mio", 150_000, 6.0, false),
            row("relay-afxdp native wakeup", 250_000, 4.0, false),
            row(
                "relay-afxdp on the xdp crate native wakeup",
                250_000,
                2.0,
                false,
            ),
            row("relay-afxdp native busy", 300_000, 1.0, true),
            row(
                "relay-afxdp on the xdp crate native busy",
                300_000,
                1.02,
                true,
            ),
        ];
        let v = verdict(&rows);
        assert!(
            v.contains("relay-afxdp native wakeup costs **4.00 µs**"),
            "{v}"
        );
        assert!(
            v.contains("AF_XDP layer (native wakeup): the `xdp` crate costs **2.00 µs** [1.80–2.20] per packet under the same worker, ours **4.00 µs** [3.60–4.40]: the crate is **50 %** cheaper."),
            "{v}"
        );
        assert!(
            v.contains("AF_XDP layer (native busy): the `xdp` crate costs **1.02 µs** [0.92–1.12] per packet under the same worker, ours **1.00 µs** [0.90–1.10]: the ranges overlap"),
            "{v}"
        );
    }

    #[test]
    fn overlapping_ranges_are_called_indistinguishable() {
        let rows = [
            row("relay-mio", 150_000, 6.0, false),
            row("relay-afxdp skb wakeup", 160_000, 5.6, false),
        ];
        let v = verdict(&rows);
        assert!(v.contains("cannot tell them apart"), "{v}");
    }

    #[test]
    fn without_relay_mio_there_is_no_verdict() {
        let v = verdict(&[row("bare mmsg forwarder", 100_000, 5.0, false)]);
        assert!(v.contains("relay-mio was not measured"), "{v}");
    }
}
