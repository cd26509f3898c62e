//! The maximum-rate rows: one row per setup, each measured by repeated searches, as
//! Markdown for people and JSON for machines, with the verdict at the maximum rate
//! ([`verdict`]) and the latency section computed from them. `perf compare`'s search phase
//! and `perf loopback` write them; the cost rounds' verdict is `perf compare`'s own.

use std::fmt::Write as _;

mod latency_section;
mod max_rate_verdict;
mod svg;

pub use latency_section::latency_section;
pub use max_rate_verdict::{ON_XDP_CRATE, VOICE_SESSION_PPS, verdict};
pub use svg::{BarChart, svg, svg_with};

use crate::bench::load::{CDF_QUANTILES, Trial};
use crate::bench::search::Limit;
use crate::bench::stats::{Spread, spread};
use crate::bench::wake::WakeCost;

/// One search of a setup and what its cores spent at its maximum.
#[derive(Clone, Debug)]
pub struct Run {
    /// The search.
    pub search: crate::bench::search::SearchRun,
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
    /// [`crate::bench::wake`]): what each hop between cores cost then.
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
         judged by the median loss of its trials (`--trials-per-rate`), the first trial of a search discarded; \
         NDR is the highest rate with no loss, PDR the highest with at most {:.1} % (their gap, \
         as a share of PDR, is the search's noise figure); figures are median [min–max] over \
         the searches, at the achieved send rate. \"limit\" says what stopped each search: \
         `loss` (the setup dropped above it), `forwarder core` / `tools core` (that core was \
         ≥ {:.0} % busy at NDR), `generator` (the generator fell short of the offered rate), \
         `search ceiling`, or `no loss-free rate`. \"forwarder µs/pkt\" is the forwarder \
         core's busy time per packet at NDR.\n",
        crate::bench::search::PDR_LOSS * 100.0,
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
        crate::bench::wake::ROUND_TRIPS
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A CDF whose median is `p50` and every other quantile in proportion.
    fn latency(p50: f64) -> crate::bench::load::Latency {
        crate::bench::load::Latency {
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
            search: crate::bench::search::SearchRun {
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
        silent.fixed.latency = crate::bench::load::Latency::default();
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

    #[test]
    fn without_a_search_it_says_none_ran_not_that_relay_mio_was_missing() {
        let v = verdict(&[]);
        assert!(v.contains("No maximum-rate search ran"), "{v}");
        assert!(!v.contains("relay-mio was not measured"), "{v}");
    }
}
