//! The verdict a perf lab acts on: does kernel bypass (relay-afxdp's best mode) save
//! enough of a core per packet against relay-mio to warrant its operational cost? Said
//! only when the confidence interval of the per-round ratio clears the answer; otherwise
//! "inconclusive on this host", and "withheld" when the host gate left out too many
//! rounds to judge.

use std::fmt::Write as _;

use super::cost::{CONFIDENCE, RowCost, sessions_per_core};
use crate::stats::Interval;

/// A median saving of at least this share of a core per packet warrants kernel bypass's
/// operational cost (a dedicated NIC queue, CAP_NET_RAW/BPF, no kernel firewall on the
/// path). The sentence judges the median against it, and says so: the interval's lower
/// end is the saving claimed, the median the one a lab plans with.
pub const WORTH_IT: f64 = 1.0 / 3.0;

/// The rounds the verdict needs kept, as a share of those run.
pub const KEPT_NEEDED: f64 = 0.6;

/// What the rounds say.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The whole interval of the ratio lies below 1: bypass saves at least `1 - high`.
    Saves {
        /// The bypass row.
        setup: String,
        /// Its cost over relay-mio's, per round.
        ratio: Interval,
    },
    /// The whole interval lies above 1: bypass costs more.
    Costs {
        /// The bypass row.
        setup: String,
        /// Its cost over relay-mio's, per round.
        ratio: Interval,
    },
    /// The interval holds 1.
    Inconclusive {
        /// The bypass row.
        setup: String,
        /// Its cost over relay-mio's, per round.
        ratio: Interval,
    },
    /// Too few rounds passed the host gate, or a row is missing.
    Withheld(String),
}

/// Judges `rows`: `baseline` is relay-mio's key; the bypass row is the one among
/// `bypass` with the lowest median ratio.
pub fn judge(rows: &[RowCost], baseline: &str, bypass: &[&str]) -> Verdict {
    let Some(mio) = rows.iter().find(|r| r.setup == baseline) else {
        return Verdict::Withheld(format!("{baseline} was not measured"));
    };
    let candidates: Vec<&RowCost> = rows
        .iter()
        .filter(|r| bypass.contains(&r.setup.as_str()))
        .collect();
    if candidates.is_empty() {
        return Verdict::Withheld("no relay-afxdp row was measured".into());
    }
    let Some((row, ratio)) = candidates
        .iter()
        .filter_map(|r| r.ratio_to_baseline.map(|i| (*r, i)))
        .min_by(|a, b| a.1.median.total_cmp(&b.1.median))
    else {
        return Verdict::Withheld(format!(
            "no round kept both {baseline} and a relay-afxdp row (host gate or loss)"
        ));
    };
    let needed = (KEPT_NEEDED * mio.rounds_run as f64).ceil() as usize;
    if ratio.samples < needed.max(3) {
        return Verdict::Withheld(format!(
            "{} of {} rounds kept for {baseline} and {}, at least {} needed (the host gate's record below says why any were left out)",
            ratio.samples,
            mio.rounds_run,
            row.setup,
            needed.max(3)
        ));
    }
    let setup = row.setup.clone();
    if ratio.high < 1.0 {
        Verdict::Saves { setup, ratio }
    } else if ratio.low > 1.0 {
        Verdict::Costs { setup, ratio }
    } else {
        Verdict::Inconclusive { setup, ratio }
    }
}

impl Verdict {
    /// The headline ratio (bypass cost over relay-mio's, per round), if there is one.
    pub fn ratio(&self) -> Option<Interval> {
        match self {
            Verdict::Saves { ratio, .. }
            | Verdict::Costs { ratio, .. }
            | Verdict::Inconclusive { ratio, .. } => Some(*ratio),
            Verdict::Withheld(_) => None,
        }
    }

    /// A short word for machines: `saves`, `costs`, `inconclusive` or `withheld`.
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::Saves { .. } => "saves",
            Verdict::Costs { .. } => "costs",
            Verdict::Inconclusive { .. } => "inconclusive",
            Verdict::Withheld(_) => "withheld",
        }
    }

    /// The sentence, with `name` turning a setup key into its display name.
    pub fn sentence(&self, name: impl Fn(&str) -> String) -> String {
        let pct = |x: f64| format!("{:.0} %", x * 100.0);
        let conf = |r: &Interval| {
            format!(
                "{:.0} % interval of the per-round ratio {:.2}–{:.2}, median {:.2}, {} rounds",
                r.confidence * 100.0,
                r.low,
                r.high,
                r.median,
                r.samples
            )
        };
        match self {
            Verdict::Saves { setup, ratio } => {
                let median_saving = 1.0 - ratio.median;
                let worth = if median_saving >= WORTH_IT {
                    "above"
                } else {
                    "below"
                };
                format!(
                    "Kernel bypass saves at least **{}** of a core per packet ({} against relay-mio; {}). Its median saving, {}, is {worth} the {} that warrants kernel bypass's operational cost.",
                    pct(1.0 - ratio.high),
                    name(setup),
                    conf(ratio),
                    pct(median_saving),
                    pct(WORTH_IT)
                )
            }
            Verdict::Costs { setup, ratio } => format!(
                "Kernel bypass costs at least **{}** more per packet than relay-mio ({}; {}): not warranted on this host.",
                pct(ratio.low - 1.0),
                name(setup),
                conf(ratio)
            ),
            Verdict::Inconclusive { setup, ratio } => format!(
                "**Inconclusive on this host**: {} against relay-mio, {} — the interval holds 1 (no difference).",
                name(setup),
                conf(ratio)
            ),
            Verdict::Withheld(why) => format!("**Verdict withheld**: {why}."),
        }
    }
}

/// The verdict section: the sentence, and each row's cost and sessions per core.
pub fn markdown(
    verdict: &Verdict,
    rows: &[RowCost],
    baseline: &str,
    name: impl Fn(&str) -> String,
) -> String {
    let mut out = String::from("## Verdict\n\n");
    let _ = writeln!(out, "{}\n", verdict.sentence(&name));
    for r in rows {
        let Some(pooled) = r.pooled else {
            let _ = writeln!(
                out,
                "- {}: no round kept (host gate or loss at every load).",
                name(&r.setup)
            );
            continue;
        };
        let _ = writeln!(
            out,
            "- {} costs **{:.2} µs** per packet [{:.2}–{:.2}]: about **{:.0} voice sessions per core**{}.",
            name(&r.setup),
            pooled.median,
            pooled.low,
            pooled.high,
            sessions_per_core(pooled.median),
            r.ratio_to_baseline
                .filter(|_| r.setup != baseline)
                .map_or(String::new(), |x| format!(", {:.2}× relay-mio's", x.median)),
        );
    }
    let _ = writeln!(
        out,
        "\nIntervals (in brackets) are distribution-free intervals of the median, of at least {:.0} % confidence, over the rounds the host gate kept.",
        CONFIDENCE * 100.0
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(median: f64, low: f64, high: f64, samples: usize) -> Interval {
        Interval {
            median,
            low,
            high,
            confidence: 0.98,
            samples,
        }
    }

    fn row(setup: &str, ratio: Option<Interval>, rounds_run: usize) -> RowCost {
        RowCost {
            setup: setup.into(),
            per_load: vec![],
            pooled: Some(interval(5.0, 4.0, 6.0, 10)),
            ratio_to_baseline: ratio,
            bimodal: false,
            rounds_kept: ratio.map_or(0, |r| r.samples),
            rounds_run,
            by_position: vec![],
            pooled_by_round: vec![],
        }
    }

    fn rows(ratio_skb: Interval, ratio_native: Interval) -> Vec<RowCost> {
        vec![
            row("mio", Some(interval(1.0, 1.0, 1.0, 10)), 10),
            row("afxdp-skb", Some(ratio_skb), 10),
            row("afxdp-native", Some(ratio_native), 10),
        ]
    }

    const BYPASS: [&str; 2] = ["afxdp-skb", "afxdp-native"];

    #[test]
    fn a_saving_is_stated_by_its_lower_bound_from_the_best_bypass_row() {
        let v = judge(
            &rows(interval(0.5, 0.4, 0.6, 10), interval(0.7, 0.6, 0.8, 10)),
            "mio",
            &BYPASS,
        );
        assert!(matches!(&v, Verdict::Saves { setup, .. } if setup == "afxdp-skb"));
        let s = v.sentence(str::to_string);
        assert!(s.contains("saves at least **40 %**"), "{s}");
        assert!(s.contains("median saving, 50 %, is above the 33 %"), "{s}");
        assert_eq!(v.kind(), "saves");
    }

    #[test]
    fn a_small_saving_is_named_as_too_small() {
        let v = judge(
            &rows(interval(0.85, 0.8, 0.9, 10), interval(0.9, 0.85, 0.95, 10)),
            "mio",
            &BYPASS,
        );
        let s = v.sentence(str::to_string);
        assert!(
            s.contains("at least **10 %**") && s.contains("15 %, is below"),
            "{s}"
        );
    }

    #[test]
    fn an_interval_that_holds_one_is_inconclusive() {
        let v = judge(
            &rows(interval(0.9, 0.7, 1.1, 10), interval(1.2, 1.0, 1.4, 10)),
            "mio",
            &BYPASS,
        );
        assert_eq!(v.kind(), "inconclusive");
        assert!(
            v.sentence(str::to_string)
                .contains("Inconclusive on this host")
        );
    }

    #[test]
    fn bypass_that_costs_more_says_so() {
        let v = judge(
            &rows(interval(1.5, 1.2, 1.8, 10), interval(1.6, 1.3, 1.9, 10)),
            "mio",
            &BYPASS,
        );
        assert_eq!(v.kind(), "costs");
        assert!(
            v.sentence(str::to_string)
                .contains("at least **20 %** more")
        );
    }

    #[test]
    fn too_few_kept_rounds_withhold_the_verdict() {
        let v = judge(
            &rows(interval(0.5, 0.4, 0.6, 4), interval(0.7, 0.6, 0.8, 4)),
            "mio",
            &BYPASS,
        );
        assert_eq!(v.kind(), "withheld");
        assert!(v.sentence(str::to_string).contains("4 of 10 rounds kept"));
        assert!(v.ratio().is_none());
    }

    #[test]
    fn without_relay_mio_or_a_bypass_row_the_verdict_is_withheld() {
        assert_eq!(judge(&[], "mio", &BYPASS).kind(), "withheld");
        let only_mio = vec![row("mio", None, 10)];
        assert_eq!(judge(&only_mio, "mio", &BYPASS).kind(), "withheld");
    }
}
