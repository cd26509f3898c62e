//! The verdict a perf lab acts on: does kernel bypass save enough of the best socket
//! relay's cost per packet to warrant its operational cost? Three outcomes, each judged
//! on the whole interval of the per-round ratio, never on its median: **warranted** when
//! the interval lies below `1 − threshold`, **not warranted** when it lies above, and
//! **inconclusive** otherwise, with about how many rounds would decide it. The error rate
//! is divided among the bypass rows the verdict chooses from, and "as cheap as" is
//! claimed only from an equivalence test.

use std::fmt::Write as _;

use crate::bench::stats::{Interval, median_interval, samples_to_clear};

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

/// Each of the two one-sided tests runs at this level, so the interval they read is the
/// `1 − 2·EQUIVALENCE_ALPHA` (90 %) interval. The report's table tests several pairs and
/// divides nothing among them: it describes, the verdict does not rest on it.
pub const EQUIVALENCE_ALPHA: f64 = 0.05;

/// One bypass row's marginal cost over each socket row's, round by round.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The bypass row's key.
    pub setup: String,
    /// For each socket row (its key), the ratio in each round kept for both.
    pub against: Vec<(String, Vec<(usize, f64)>)>,
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
        /// The bypass row chosen: the cheapest (its highest median ratio to a socket row
        /// lowest) among those that warrant bypass; for "not warranted" the cheapest row;
        /// for "inconclusive" the cheapest that may still warrant it.
        setup: String,
        /// The socket row whose interval decides: the highest upper end (the least saving
        /// it shows) for "warranted" and "inconclusive", the highest lower end for "not
        /// warranted".
        against: String,
        /// Its per-round ratio to that socket row, at `confidence`.
        ratio: Interval,
        /// The saving that warrants bypass, as a share of the socket relay's cost.
        threshold: f64,
        /// Bypass rows chosen from (the error rate is divided among them).
        candidates: usize,
        /// Socket rows each is weighed against (the error rate is divided among them).
        sockets: usize,
        /// Looks at the data a sequential run planned (the error rate is divided among
        /// them too; 1 for a fixed number of rounds).
        looks: usize,
        /// For an inconclusive outcome: about how many kept rounds would decide it.
        rounds_needed: Option<usize>,
    },
    /// Too few rounds kept, or a row is missing.
    Withheld(String),
}

/// The confidence each interval of the verdict's family is taken at.
pub fn each_confidence(candidates: usize, sockets: usize, looks: usize) -> f64 {
    1.0 - (1.0 - FAMILY_CONFIDENCE) / (candidates.max(1) * sockets.max(1) * looks.max(1)) as f64
}

/// Judges the `candidates` against `threshold`; `rounds_run` is how many rounds ran and
/// `looks` how many times a sequential run planned to judge (1 for a fixed run).
///
/// Bypass is **warranted** when some bypass row's interval against **every** socket row
/// lies below `1 − threshold` (it beats the best of them, whichever that is); **not
/// warranted** when every bypass row's interval against some socket row lies above it;
/// **inconclusive** otherwise. Every interval is taken at [`each_confidence`], so the
/// whole family, and so the statement made, holds at [`FAMILY_CONFIDENCE`]. A row decides
/// "warranted" or "not warranted" only when each of its intervals rests on at least
/// [`MIN_KEPT_ROUNDS`] kept rounds and reaches that confidence; the verdict is withheld
/// when the cheapest row does not (unless another row warrants bypass by the rule), and
/// when every row that meets the rule falls short but another does not meet it.
pub fn judge(candidates: &[Candidate], threshold: f64, rounds_run: usize, looks: usize) -> Verdict {
    let sockets = candidates
        .iter()
        .map(|c| c.against.len())
        .max()
        .unwrap_or(0);
    if candidates.is_empty() || sockets == 0 {
        return Verdict::Withheld("no relay-afxdp row, or no relay-mio row, was measured".into());
    }
    let each = each_confidence(candidates.len(), sockets, looks);
    let bound = 1.0 - threshold;
    // Each candidate's intervals against every socket row, and its worst (the socket row
    // with the highest median ratio).
    let mut judged: Vec<(&Candidate, Vec<(&str, Interval)>)> = vec![];
    for c in candidates {
        let intervals: Option<Vec<(&str, Interval)>> = c
            .against
            .iter()
            .map(|(socket, rounds)| {
                let ratios: Vec<f64> = rounds.iter().map(|r| r.1).collect();
                Some((socket.as_str(), median_interval(&ratios, each)?))
            })
            .collect();
        if let Some(intervals) = intervals.filter(|i| i.len() == sockets) {
            judged.push((c, intervals));
        }
    }
    // A row's cost: its highest median ratio to a socket row (what it saves against the
    // best socket relay, for it).
    let worst_median = |intervals: &[(&str, Interval)]| {
        intervals
            .iter()
            .map(|(_, i)| i.median)
            .fold(f64::NEG_INFINITY, f64::max)
    };
    let by_worst_median = |a: &&(&Candidate, Vec<(&str, Interval)>),
                           b: &&(&Candidate, Vec<(&str, Interval)>)| {
        worst_median(&a.1).total_cmp(&worst_median(&b.1))
    };
    // A row may decide the outcome only on intervals that meet the rule: enough kept
    // rounds, and each interval at its share of the error rate.
    let meets_rule = |intervals: &[(&str, Interval)]| {
        intervals
            .iter()
            .all(|(_, i)| i.samples >= MIN_KEPT_ROUNDS && i.confidence >= each)
    };
    let clears = |intervals: &[(&str, Interval)]| intervals.iter().all(|(_, i)| i.high < bound);
    // Warranted: the cheapest row that meets the rule and beats every socket row by the
    // threshold, quoted as that row.
    let warranted = judged
        .iter()
        .filter(|(_, intervals)| meets_rule(intervals) && clears(intervals))
        .min_by(by_worst_median);
    // The interval quoted: for "warranted" the one whose upper end is highest (the least
    // saving it shows), for "not warranted" the one whose lower end is highest (the one
    // that lies above the bound), for "inconclusive" the one whose upper end is highest
    // (it holds the bound).
    let quoted = |intervals: &[(&str, Interval)], by_low: bool| -> (String, Interval) {
        let (socket, i) = intervals
            .iter()
            .max_by(|a, b| {
                let end = |i: &Interval| if by_low { i.low } else { i.high };
                end(&a.1).total_cmp(&end(&b.1))
            })
            .expect("a candidate is judged against at least one socket row");
        (socket.to_string(), *i)
    };
    let judged_as =
        |outcome: Outcome, chosen: &Candidate, against: String, ratio: Interval| Verdict::Judged {
            outcome,
            setup: chosen.setup.clone(),
            against,
            ratio,
            threshold,
            candidates: candidates.len(),
            sockets,
            looks: looks.max(1),
            rounds_needed: (outcome == Outcome::Inconclusive)
                .then(|| samples_to_clear(&ratio, bound))
                .flatten(),
        };
    if let Some((chosen, intervals)) = warranted {
        let (against, ratio) = quoted(intervals, false);
        return judged_as(Outcome::Warranted, chosen, against, ratio);
    }
    let Some((cheapest, intervals)) = judged.iter().min_by(by_worst_median) else {
        return Verdict::Withheld(
            "no round kept a relay-afxdp row beside every socket relay (host gate, or loads not carried)".into(),
        );
    };
    let fewest = intervals.iter().map(|i| i.1.samples).min().unwrap_or(0);
    if fewest < MIN_KEPT_ROUNDS {
        return Verdict::Withheld(format!(
            "{fewest} of {rounds_run} rounds kept for {} beside every socket relay, at least {MIN_KEPT_ROUNDS} needed (the host gate's record below says why any were left out)",
            cheapest.setup
        ));
    }
    if let Some((socket, short)) = intervals.iter().find(|i| i.1.confidence < each) {
        return Verdict::Withheld(format!(
            "{} kept rounds of {} beside {socket} give an interval of at most {:.1} % coverage; the verdict's intervals need {:.2} % (95 % divided among {} bypass rows × {sockets} socket rows{}): more rounds (`--rounds`)",
            short.samples,
            cheapest.setup,
            short.confidence * 100.0,
            each * 100.0,
            candidates.len(),
            if looks > 1 {
                format!(" × {looks} looks")
            } else {
                String::new()
            }
        ));
    }
    let above = |intervals: &[(&str, Interval)]| intervals.iter().any(|(_, i)| i.low > bound);
    // Not warranted: every bypass row, each on intervals that meet the rule, falls short
    // of the threshold against some socket row.
    let not_warranted = judged.len() == candidates.len()
        && judged
            .iter()
            .all(|(_, intervals)| meets_rule(intervals) && above(intervals));
    if not_warranted {
        let (against, ratio) = quoted(intervals, true);
        return judged_as(Outcome::NotWarranted, cheapest, against, ratio);
    }
    // Inconclusive: the cheapest row that meets the rule and may still clear the bound.
    if let Some((open, intervals)) = judged
        .iter()
        .filter(|(_, intervals)| meets_rule(intervals) && !above(intervals))
        .min_by(by_worst_median)
    {
        let (against, ratio) = quoted(intervals, false);
        return judged_as(Outcome::Inconclusive, open, against, ratio);
    }
    // Every row that meets the rule falls short; what keeps the verdict open is a row that
    // does not meet it, or was not judged beside every socket relay.
    let open: Vec<&str> = candidates
        .iter()
        .filter(|c| {
            judged
                .iter()
                .find(|(j, _)| j.setup == c.setup)
                .is_none_or(|(_, intervals)| !meets_rule(intervals))
        })
        .map(|c| c.setup.as_str())
        .collect();
    Verdict::Withheld(format!(
        "every bypass row with rounds enough falls short of the threshold, but {} has too few kept rounds beside every socket relay to say whether it would: more rounds (`--rounds`)",
        open.join(", ")
    ))
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

/// The equivalence test of `ratios` (one per round) within `1 ± margin` at `alpha`;
/// never equivalent when the rounds are too few for the interval to reach `1 − 2·alpha`.
pub fn equivalence(ratios: &[f64], margin: f64, alpha: f64) -> Option<Equivalence> {
    let ratio = median_interval(ratios, 1.0 - 2.0 * alpha)?;
    Some(Equivalence {
        ratio,
        margin,
        equivalent: ratio.confidence >= 1.0 - 2.0 * alpha
            && ratio.low >= 1.0 - margin
            && ratio.high <= 1.0 + margin,
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
            candidates,
            sockets,
            looks,
            ..
        } = self
        else {
            return String::new();
        };
        let looks = if *looks > 1 {
            format!(" × {looks} looks")
        } else {
            String::new()
        };
        format!("the error rate divided among {candidates} bypass × {sockets} socket rows{looks}")
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
        let (outcome, setup, against, ratio, threshold, rounds_needed) = match self {
            Verdict::Withheld(why) => return format!("**Verdict withheld**: {why}."),
            Verdict::Judged {
                outcome,
                setup,
                against,
                ratio,
                threshold,
                rounds_needed,
                ..
            } => (outcome, setup, against, ratio, threshold, rounds_needed),
        };
        let pct = |x: f64| format!("{:.0} %", x * 100.0);
        let evidence = format!(
            "{} costs **{:.2}–{:.2}** of the marginal cost per packet of {}, the socket relay \
             it saves least against ({:.1} % interval of the per-round ratio, median {:.2}, {} \
             rounds kept; {})",
            name(setup),
            ratio.low,
            ratio.high,
            name(against),
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
                    |n| {
                        format!(
                            "about {n} kept rounds would decide it if the median held and the \
                             interval narrowed as one over the root of the rounds: a rough guide"
                        )
                    },
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
            against,
            ratio,
            threshold,
            candidates,
            sockets,
            looks,
            rounds_needed,
            ..
        } = self
        {
            json["setup"] = serde_json::json!(setup);
            json["against"] = serde_json::json!(against);
            json["sockets"] = serde_json::json!(sockets);
            json["each_confidence"] =
                serde_json::json!(each_confidence(*candidates, *sockets, *looks));
            json["ratio"] = interval_json(ratio);
            json["threshold"] = serde_json::json!(threshold);
            json["bound"] = serde_json::json!(1.0 - threshold);
            json["candidates"] = serde_json::json!(candidates);
            json["family_confidence"] = serde_json::json!(FAMILY_CONFIDENCE);
            json["looks"] = serde_json::json!(looks);
            json["rounds_needed"] = serde_json::json!(rounds_needed);
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

/// The verdict section: the sentence, and the rule behind it.
pub fn markdown(verdict: &Verdict, name: impl Fn(&str) -> String, host: &str) -> String {
    let mut out = String::from("## Verdict\n\n");
    let _ = writeln!(out, "{}\n", verdict.sentence(&name, host));
    if matches!(verdict, Verdict::Judged { .. }) {
        out.push_str(
            "Each bypass row is weighed against every socket relay measured (relay-mio's \
             rows), round by round. *Warranted* needs one bypass row whose interval against \
             every socket row lies below the bound, so it beats the best of them whichever \
             that is; *not warranted* needs every bypass row's interval against some socket \
             row above it. Every interval is taken at the share of the error rate its pair and \
             look were given, so the whole family holds at 95 %; the ratio quoted is against \
             the socket row the chosen bypass row saves least against.\n\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A candidate whose per-round ratios against relay-mio are `ratios`.
    fn candidate(setup: &str, ratios: &[f64]) -> Candidate {
        Candidate {
            setup: setup.into(),
            against: vec![(
                "mio".to_string(),
                ratios
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (i + 1, *r))
                    .collect(),
            )],
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
                .contains("1 bypass × 1 socket rows × 3 looks")
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
    fn warranted_needs_every_socket_row_beaten_so_a_dropped_round_cannot_help_bypass() {
        // Against plain relay-mio bypass saves half; against bundles only a fifth.
        let c = Candidate {
            setup: "afxdp".into(),
            against: vec![
                ("mio".into(), (1..=10).map(|r| (r, 0.5)).collect()),
                ("mio-bundles".into(), (1..=10).map(|r| (r, 0.8)).collect()),
            ],
        };
        let v = judge(std::slice::from_ref(&c), 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "not_warranted", "{v:?}");
        assert!(matches!(&v, Verdict::Judged { against, .. } if against == "mio-bundles"));
        // Bundles beaten too: warranted, quoted against the one it saves least against.
        let mut both = c;
        both.against[1].1 = (1..=10).map(|r| (r, 0.6)).collect();
        let v = judge(&[both], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "warranted");
        assert!((v.ratio().unwrap().median - 0.6).abs() < 1e-12);
    }

    #[test]
    fn only_a_row_that_meets_the_rule_decides_and_it_is_the_row_quoted() {
        // The cheapest median comes from a row with five kept rounds: it may not decide.
        // The other row's ten rounds lie wholly below the bound: warranted, quoted as it.
        let thin = candidate("thin", &[0.2; 5]);
        let tight = candidate("tight", &around(0.5, 0.05));
        let v = judge(&[thin.clone(), tight], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "warranted", "{v:?}");
        assert!(
            matches!(&v, Verdict::Judged { setup, .. } if setup == "tight"),
            "{v:?}"
        );
        // With the other row across the bound, nothing that meets the rule clears it, and
        // the cheapest row cannot be quoted: withheld, naming it.
        let across = candidate("across", &around(0.66, 0.1));
        let v = judge(&[thin, across], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "withheld", "{v:?}");
        assert!(v.sentence(str::to_string, "h").contains("for thin"));
        // A thin row cannot make it "not warranted" either, nor may the other row's
        // interval, wholly above the bound, be quoted as inconclusive: withheld, naming
        // the row that keeps the question open.
        let far = candidate("far", &around(0.9, 0.02));
        let v = judge(&[candidate("thin", &[0.95; 5]), far], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "withheld", "{v:?}");
        let s = v.sentence(str::to_string, "h");
        assert!(s.contains("but thin has too few kept rounds"), "{s}");
    }

    #[test]
    fn the_interval_quoted_is_the_one_that_decides() {
        // Against mio the median is higher but the interval narrow and below the bound;
        // against bundles the median is lower but the interval holds the bound. The
        // verdict is inconclusive and must quote the interval that holds the bound.
        let c = Candidate {
            setup: "afxdp".into(),
            against: vec![
                (
                    "mio".into(),
                    (1..=10).map(|r| (r, 0.62 + 0.001 * r as f64)).collect(),
                ),
                (
                    "mio-bundles".into(),
                    (1..=10).map(|r| (r, 0.35 + 0.05 * r as f64)).collect(),
                ),
            ],
        };
        let v = judge(&[c], 1.0 / 3.0, 10, 1);
        assert_eq!(v.kind(), "inconclusive", "{v:?}");
        assert!(
            matches!(&v, Verdict::Judged { against, .. } if against == "mio-bundles"),
            "{v:?}"
        );
        let ratio = v.ratio().unwrap();
        assert!(
            ratio.low <= 2.0 / 3.0 && ratio.high >= 2.0 / 3.0,
            "{ratio:?}"
        );
    }

    #[test]
    fn a_verdict_waits_for_rounds_enough_to_reach_its_share_of_the_error_rate() {
        // Four bypass rows × two socket rows: each interval needs 99.375 %; 8 rounds give
        // at most 1 − 2/256 = 99.22 %.
        let four: Vec<Candidate> = ["a", "b", "c", "d"]
            .iter()
            .map(|k| Candidate {
                setup: k.to_string(),
                against: vec![
                    ("mio".into(), (1..=8).map(|r| (r, 0.5)).collect()),
                    ("mio-bundles".into(), (1..=8).map(|r| (r, 0.5)).collect()),
                ],
            })
            .collect();
        let v = judge(&four, 1.0 / 3.0, 8, 1);
        assert_eq!(v.kind(), "withheld", "{v:?}");
        assert!(
            v.sentence(str::to_string, "h").contains("99.38 %"),
            "{}",
            v.sentence(str::to_string, "h")
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
        assert_eq!(json["against"], "mio");
        assert_eq!(json["sockets"], 1);
    }
}
