//! The verdict a perf lab acts on: does kernel bypass save enough of the best socket
//! relay's cost per packet to warrant its operational cost? Three outcomes, each judged
//! on the whole interval of the per-round ratio, never on its median: **warranted** when
//! the interval lies below `1 − threshold`, **not warranted** when it lies above, and
//! **inconclusive** otherwise, with about how many rounds would decide it. The error rate
//! is divided among the bypass rows the verdict chooses from, and "as cheap as" is
//! claimed only from an equivalence test.

use std::fmt::Write as _;

use crate::stats::{Interval, median_interval, samples_to_clear};

/// The default threshold: a saving of a third of the best socket relay's cost per packet
/// warrants kernel bypass's operational cost (a dedicated NIC queue, CAP_NET_RAW/BPF, no
/// kernel firewall on the path).
pub const DEFAULT_THRESHOLD: f64 = 1.0 / 3.0;

/// The confidence the verdict's whole family of intervals holds together: each bypass
/// row's interval, at each look a sequential run takes, is taken at
/// `1 − (1 − FAMILY_CONFIDENCE) / (rows · looks)` (Bonferroni: the chosen row's interval
/// holds at the family's confidence whichever row and look decide).
pub const FAMILY_CONFIDENCE: f64 = 0.95;

/// No verdict from fewer kept rounds than this.
pub const MIN_KEPT_ROUNDS: usize = 6;

/// Two rows are "as cheap as" each other when the two one-sided tests place their ratio
/// within `1 ± EQUIVALENCE_MARGIN`.
pub const EQUIVALENCE_MARGIN: f64 = 0.10;

/// One bypass row's marginal cost over the best socket relay's, round by round.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The bypass row's key.
    pub setup: String,
    /// Its ratio in each round kept for it, with the socket row that was cheapest there.
    pub by_round: Vec<(usize, f64, String)>,
}

/// What the rounds say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The whole interval lies below `1 − threshold`.
    Warranted,
    /// The whole interval lies above `1 − threshold`.
    NotWarranted,
    /// The interval holds `1 − threshold`.
    Inconclusive,
}

/// The verdict and what it rests on.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The rounds decided, or said they cannot yet.
    Judged {
        /// Warranted, not warranted or inconclusive.
        outcome: Outcome,
        /// The bypass row chosen: the lowest median ratio among the candidates.
        setup: String,
        /// Its per-round ratio to the best socket relay, at `confidence`.
        ratio: Interval,
        /// The saving that warrants bypass, as a share of the socket relay's cost.
        threshold: f64,
        /// Bypass rows chosen from (the error rate is divided among them).
        candidates: usize,
        /// Looks at the data a sequential run planned (the error rate is divided among
        /// them too; 1 for a fixed number of rounds).
        looks: usize,
        /// The socket rows that were cheapest in some round, by how many rounds.
        cheapest: Vec<(String, usize)>,
        /// For an inconclusive outcome: about how many kept rounds would decide it.
        rounds_needed: Option<usize>,
    },
    /// Too few rounds kept, or a row is missing.
    Withheld(String),
}

/// Judges the `candidates` against `threshold`; `rounds_run` is how many rounds ran and
/// `looks` how many times a sequential run planned to judge (1 for a fixed run).
pub fn judge(candidates: &[Candidate], threshold: f64, rounds_run: usize, looks: usize) -> Verdict {
    if candidates.is_empty() {
        return Verdict::Withheld("no relay-afxdp row was measured".into());
    }
    let looks = looks.max(1);
    let each = 1.0 - (1.0 - FAMILY_CONFIDENCE) / (candidates.len() * looks) as f64;
    let judged: Vec<(&Candidate, Interval)> = candidates
        .iter()
        .filter_map(|c| {
            let ratios: Vec<f64> = c.by_round.iter().map(|r| r.1).collect();
            Some((c, median_interval(&ratios, each)?))
        })
        .collect();
    let Some((chosen, ratio)) = judged
        .iter()
        .min_by(|a, b| a.1.median.total_cmp(&b.1.median))
    else {
        return Verdict::Withheld(
            "no round kept a relay-afxdp row beside a socket relay (host gate or loss)".into(),
        );
    };
    if ratio.samples < MIN_KEPT_ROUNDS {
        return Verdict::Withheld(format!(
            "{} of {rounds_run} rounds kept for {} beside the best socket relay, at least {MIN_KEPT_ROUNDS} needed (the host gate's record below says why any were left out)",
            ratio.samples, chosen.setup
        ));
    }
    let bound = 1.0 - threshold;
    let outcome = if ratio.high < bound {
        Outcome::Warranted
    } else if ratio.low > bound {
        Outcome::NotWarranted
    } else {
        Outcome::Inconclusive
    };
    let mut cheapest: Vec<(String, usize)> = vec![];
    for (_, _, socket) in &chosen.by_round {
        match cheapest.iter_mut().find(|(s, _)| s == socket) {
            Some((_, n)) => *n += 1,
            None => cheapest.push((socket.clone(), 1)),
        }
    }
    cheapest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Verdict::Judged {
        outcome,
        setup: chosen.setup.clone(),
        ratio: *ratio,
        threshold,
        candidates: candidates.len(),
        looks,
        cheapest,
        rounds_needed: (outcome == Outcome::Inconclusive)
            .then(|| samples_to_clear(ratio, bound))
            .flatten(),
    }
}

/// Whether two rows are as cheap as each other, by two one-sided tests at `alpha` each:
/// equivalent when the `1 − 2·alpha` interval of their per-round ratio lies within
/// `1 ± margin`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Equivalence {
    /// The `1 − 2·alpha` interval of the ratio.
    pub ratio: Interval,
    /// The margin.
    pub margin: f64,
    /// Whether the interval lies within `1 ± margin`.
    pub equivalent: bool,
}

/// The equivalence test of `ratios` (one per round) within `1 ± margin` at `alpha`.
pub fn equivalence(ratios: &[f64], margin: f64, alpha: f64) -> Option<Equivalence> {
    let ratio = median_interval(ratios, 1.0 - 2.0 * alpha)?;
    Some(Equivalence {
        ratio,
        margin,
        equivalent: ratio.low >= 1.0 - margin && ratio.high <= 1.0 + margin,
    })
}

impl Outcome {
    /// A short word for machines.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Warranted => "warranted",
            Outcome::NotWarranted => "not_warranted",
            Outcome::Inconclusive => "inconclusive",
        }
    }
}

impl Verdict {
    /// How the error rate was divided, in words.
    fn error_rate_split(&self) -> String {
        let Verdict::Judged {
            candidates, looks, ..
        } = self
        else {
            return String::new();
        };
        let rows = if *candidates == 1 {
            "one bypass row".to_string()
        } else {
            format!("the error rate divided among {candidates} bypass rows")
        };
        if *looks > 1 {
            format!("{rows} and {looks} looks")
        } else {
            rows
        }
    }

    /// The headline ratio (bypass cost over the best socket relay's, per round).
    pub fn ratio(&self) -> Option<Interval> {
        match self {
            Verdict::Judged { ratio, .. } => Some(*ratio),
            Verdict::Withheld(_) => None,
        }
    }

    /// `warranted`, `not_warranted`, `inconclusive` or `withheld`.
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::Judged { outcome, .. } => outcome.word(),
            Verdict::Withheld(_) => "withheld",
        }
    }

    /// The sentence, with `name` turning a setup key into its display name and `host`
    /// naming the host it was measured on.
    pub fn sentence(&self, name: impl Fn(&str) -> String, host: &str) -> String {
        let (outcome, setup, ratio, threshold, rounds_needed) = match self {
            Verdict::Withheld(why) => return format!("**Verdict withheld**: {why}."),
            Verdict::Judged {
                outcome,
                setup,
                ratio,
                threshold,
                rounds_needed,
                ..
            } => (outcome, setup, ratio, threshold, rounds_needed),
        };
        let pct = |x: f64| format!("{:.0} %", x * 100.0);
        let evidence = format!(
            "{} costs **{:.2}–{:.2}** of the best socket relay's marginal cost per packet \
             ({:.1} % interval of the per-round ratio, median {:.2}, {} rounds kept; {})",
            name(setup),
            ratio.low,
            ratio.high,
            ratio.confidence * 100.0,
            ratio.median,
            ratio.samples,
            self.error_rate_split(),
        );
        let rule = format!(
            "a saving of {} of the socket relay's cost per packet warrants kernel bypass",
            pct(*threshold)
        );
        match outcome {
            Outcome::Warranted => format!(
                "Kernel bypass is **warranted** on {host}: {evidence}, a saving of at least {}; {rule}.",
                pct(1.0 - ratio.high)
            ),
            Outcome::NotWarranted => {
                let saving = if ratio.low < 1.0 {
                    format!("a saving of at most {}", pct(1.0 - ratio.low))
                } else {
                    format!("at least {} more", pct(ratio.low - 1.0))
                };
                format!(
                    "Kernel bypass is **not warranted** on {host}: {evidence}, {saving}; {rule}."
                )
            }
            Outcome::Inconclusive => {
                let more = rounds_needed.map_or(
                    "no number of rounds would decide it while the median sits on the bound"
                        .to_string(),
                    |n| format!("about {n} kept rounds would decide it if the median held"),
                );
                format!(
                    "**Inconclusive** on {host}: {evidence}; the interval holds {:.2}, the {} saving that warrants kernel bypass ({more}).",
                    1.0 - threshold,
                    pct(*threshold)
                )
            }
        }
    }

    /// The verdict as JSON.
    pub fn json(&self, name: impl Fn(&str) -> String, host: &str) -> serde_json::Value {
        let mut json = serde_json::json!({
            "kind": self.kind(),
            "sentence": self.sentence(&name, host),
        });
        if let Verdict::Judged {
            setup,
            ratio,
            threshold,
            candidates,
            looks,
            cheapest,
            rounds_needed,
            ..
        } = self
        {
            json["setup"] = serde_json::json!(setup);
            json["ratio"] = interval_json(ratio);
            json["threshold"] = serde_json::json!(threshold);
            json["bound"] = serde_json::json!(1.0 - threshold);
            json["candidates"] = serde_json::json!(candidates);
            json["family_confidence"] = serde_json::json!(FAMILY_CONFIDENCE);
            json["looks"] = serde_json::json!(looks);
            json["rounds_needed"] = serde_json::json!(rounds_needed);
            json["cheapest_socket_row"] = cheapest
                .iter()
                .map(|(s, n)| serde_json::json!({ "setup": s, "rounds": n }))
                .collect();
        }
        json
    }
}

/// An interval as JSON: median, ends, exact coverage and samples.
pub fn interval_json(i: &Interval) -> serde_json::Value {
    serde_json::json!({
        "median": i.median, "low": i.low, "high": i.high,
        "confidence": i.confidence, "samples": i.samples,
    })
}

/// The verdict section: the sentence, where it was measured, and which socket row was
/// the cheapest in how many rounds.
pub fn markdown(verdict: &Verdict, name: impl Fn(&str) -> String, host: &str) -> String {
    let mut out = String::from("## Verdict\n\n");
    let _ = writeln!(out, "{}\n", verdict.sentence(&name, host));
    if let Verdict::Judged { cheapest, .. } = verdict {
        let listed: Vec<String> = cheapest
            .iter()
            .map(|(s, n)| format!("{} in {n}", name(s)))
            .collect();
        let _ = writeln!(
            out,
            "The best socket relay is taken round by round: the cheapest socket row in each \
             round ({}). Taking the cheapest of several noisy rows favours the socket side, so \
             the ratio leans against bypass, never toward it.\n",
            listed.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A candidate whose per-round ratios are `ratios`, mio the cheapest in every round.
    fn candidate(setup: &str, ratios: &[f64]) -> Candidate {
        Candidate {
            setup: setup.into(),
            by_round: ratios
                .iter()
                .enumerate()
                .map(|(i, r)| (i + 1, *r, "mio".to_string()))
                .collect(),
        }
    }

    /// Ten ratios spread evenly ±`half` around `median`.
    fn around(median: f64, half: f64) -> Vec<f64> {
        (0..10)
            .map(|i| median - half + 2.0 * half * i as f64 / 9.0)
            .collect()
    }

    #[test]
    fn an_interval_wholly_below_the_bound_is_warranted() {
        let v = judge(&[candidate("afxdp", &around(0.5, 0.1))], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "warranted");
        let s = v.sentence(str::to_string, "this host");
        assert!(s.contains("**warranted** on this host"), "{s}");
        assert!(s.contains("a saving of at least 42 %"), "{s}");
    }

    #[test]
    fn a_median_past_the_bound_with_an_interval_across_it_is_inconclusive() {
        // The committed report's case: 0.59–0.75 with median 0.63 straddles 0.67.
        let ratios = [0.59, 0.60, 0.61, 0.62, 0.63, 0.63, 0.66, 0.70, 0.75, 0.76];
        let v = judge(&[candidate("afxdp", &ratios)], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "inconclusive");
        let Verdict::Judged {
            rounds_needed: Some(n),
            ratio,
            ..
        } = &v
        else {
            panic!("{v:?}")
        };
        assert!(*n > 10, "more rounds than it has: {n}");
        assert!(
            ratio.high > 2.0 / 3.0 && ratio.median < 2.0 / 3.0,
            "{ratio:?}"
        );
        assert!(
            v.sentence(str::to_string, "h")
                .contains("the interval holds 0.67")
        );
    }

    #[test]
    fn an_interval_wholly_above_the_bound_is_not_warranted_even_when_it_saves() {
        let v = judge(&[candidate("afxdp", &around(0.85, 0.05))], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "not_warranted");
        let s = v.sentence(str::to_string, "h");
        assert!(s.contains("a saving of at most 19 %"), "{s}");
        let costs = judge(&[candidate("afxdp", &around(1.3, 0.1))], 1.0 / 3.0, 10, 1);
        assert!(
            costs
                .sentence(str::to_string, "h")
                .contains("at least 22 % more")
        );
    }

    #[test]
    fn the_threshold_moves_the_bound() {
        let ratios = around(0.85, 0.05);
        assert_eq!(
            judge(&[candidate("a", &ratios)], 0.1, 10, 1).kind(),
            "warranted"
        );
        assert_eq!(
            judge(&[candidate("a", &ratios)], 0.15, 10, 1).kind(),
            "inconclusive"
        );
    }

    #[test]
    fn the_error_rate_is_divided_among_the_candidates() {
        let ratios = around(0.5, 0.1);
        let alone = judge(&[candidate("a", &ratios)], 1.0 / 3.0, 10, 1);
        let four: Vec<Candidate> = ["a", "b", "c", "d"]
            .iter()
            .map(|k| candidate(k, &around(if *k == "a" { 0.5 } else { 0.8 }, 0.1)))
            .collect();
        let among_four = judge(&four, 1.0 / 3.0, 10, 1);
        let (one, many) = (alone.ratio().unwrap(), among_four.ratio().unwrap());
        assert!(many.confidence >= 1.0 - 0.05 / 4.0, "{many:?}");
        assert!(one.confidence >= 0.95 && one.confidence < many.confidence);
        assert!(
            many.high - many.low > one.high - one.low,
            "a wider interval"
        );
        assert!(
            matches!(among_four, Verdict::Judged { ref setup, candidates: 4, .. } if setup == "a")
        );
    }

    #[test]
    fn each_planned_look_takes_its_share_of_the_error_rate() {
        let ratios: Vec<f64> = (0..20).map(|i| 0.4 + 0.01 * i as f64).collect();
        let once = judge(&[candidate("a", &ratios)], 1.0 / 3.0, 20, 1);
        let thrice = judge(&[candidate("a", &ratios)], 1.0 / 3.0, 20, 3);
        let (one, three) = (once.ratio().unwrap(), thrice.ratio().unwrap());
        assert!(three.confidence >= 1.0 - 0.05 / 3.0, "{three:?}");
        assert!(three.high - three.low > one.high - one.low);
        assert!(
            thrice
                .sentence(str::to_string, "h")
                .contains("one bypass row and 3 looks")
        );
    }

    #[test]
    fn fewer_than_six_kept_rounds_withhold_the_verdict() {
        let v = judge(&[candidate("afxdp", &[0.5; 5])], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "withheld");
        assert!(
            v.sentence(str::to_string, "h")
                .contains("5 of 10 rounds kept")
        );
        assert!(v.ratio().is_none());
        assert_eq!(judge(&[], 1.0 / 3.0, 10, 1).kind(), "withheld");
        assert_eq!(
            judge(&[candidate("a", &[])], 1.0 / 3.0, 10, 1).kind(),
            "withheld"
        );
    }

    #[test]
    fn the_cheapest_socket_rows_are_counted_by_round() {
        let mut c = candidate("afxdp", &around(0.5, 0.1));
        for r in c.by_round.iter_mut().take(7) {
            r.2 = "mio-bundles".into();
        }
        let Verdict::Judged { cheapest, .. } = judge(&[c], 1.0 / 3.0, 10, 1) else {
            panic!()
        };
        assert_eq!(
            cheapest,
            vec![("mio-bundles".to_string(), 7), ("mio".to_string(), 3)]
        );
    }

    #[test]
    fn equivalence_needs_the_whole_interval_within_the_margin() {
        let close = around(1.0, 0.05);
        let e = equivalence(&close, 0.10, 0.05).unwrap();
        assert!(e.equivalent, "{e:?}");
        assert!((e.ratio.confidence - 0.9).abs() < 0.1);
        // Overlapping intervals are not equivalence: centred on 1 but too wide.
        let wide = around(1.0, 0.2);
        assert!(!equivalence(&wide, 0.10, 0.05).unwrap().equivalent);
        let apart = around(1.3, 0.02);
        assert!(!equivalence(&apart, 0.10, 0.05).unwrap().equivalent);
        assert!(equivalence(&[], 0.1, 0.05).is_none());
    }

    #[test]
    fn the_json_carries_the_outcome_the_interval_its_coverage_and_the_threshold() {
        let v = judge(&[candidate("afxdp", &around(0.5, 0.1))], 1.0 / 3.0, 10, 1);
        let json = v.json(str::to_string, "h");
        assert_eq!(json["kind"], "warranted");
        assert!(json["ratio"]["confidence"].as_f64().unwrap() >= 0.95);
        assert!((json["threshold"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(json["candidates"], 1);
        assert_eq!(json["cheapest_socket_row"][0]["setup"], "mio");
    }
}
