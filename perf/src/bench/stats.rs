//! Statistics a reader can trust on a noisy host: medians with distribution-free
//! (order-statistic) confidence intervals, and a flag for samples that split in two.
//!
//! No distribution is assumed: the interval for a median comes from the binomial law of
//! how many samples fall below it, so it holds for the skewed, two-state samples a shared
//! VM produces. With fewer than six samples no 95 % interval exists; the interval is then
//! the whole range and says what confidence it has.

/// Median, minimum and maximum of some measurements.
pub type Spread = (f64, f64, f64);

/// Median, minimum and maximum of `values` (`None` when empty).
pub fn spread(values: &[f64]) -> Option<Spread> {
    let v = sorted(values);
    let median = median_of_sorted(&v)?;
    Some((median, v[0], v[v.len() - 1]))
}

/// `values` sorted, NaNs left out.
fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

fn median_of_sorted(v: &[f64]) -> Option<f64> {
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The median of `values` (`None` when empty).
pub fn median(values: &[f64]) -> Option<f64> {
    median_of_sorted(&sorted(values))
}

/// A median and the order-statistic interval around it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// The sample median.
    pub median: f64,
    /// The interval's lower end (a sample).
    pub low: f64,
    /// The interval's upper end (a sample).
    pub high: f64,
    /// The probability that the interval holds the true median (at least the one asked
    /// for when the samples allow it; lower, and said, when they do not).
    pub confidence: f64,
    /// Samples it was computed from.
    pub samples: usize,
}

impl Interval {
    /// `median [low–high]` with `digits` decimals.
    pub fn label(&self, digits: usize) -> String {
        format!(
            "{:.digits$} [{:.digits$}–{:.digits$}]",
            self.median, self.low, self.high
        )
    }

    /// The interval's width as a fraction of its median (its relative precision).
    pub fn relative_width(&self) -> f64 {
        (self.high - self.low) / self.median.abs().max(1e-12)
    }
}

/// P(X ≤ k) for X ~ Binomial(n, 1/2).
fn binomial_half_cdf(n: usize, k: usize) -> f64 {
    let mut term = 0.5f64.powi(n as i32); // C(n, 0) / 2^n
    let mut sum = term;
    for i in 1..=k.min(n) {
        term *= (n + 1 - i) as f64 / i as f64;
        sum += term;
    }
    sum
}

/// The median of `values` with a distribution-free interval of at least `confidence`
/// (e.g. 0.95): the `k`-th smallest and `k`-th largest samples, `k` as large as the
/// binomial law allows. With too few samples for that confidence, the whole range and
/// the confidence it has. `None` when empty.
pub fn median_interval(values: &[f64], confidence: f64) -> Option<Interval> {
    let v = sorted(values);
    let n = v.len();
    let median = median_of_sorted(&v)?;
    // The interval [x(k), x(n+1-k)] (1-based) misses the median with probability
    // 2·P(X ≤ k-1); take the largest k whose miss stays within 1 - confidence.
    let mut k = 1;
    while k < n.div_ceil(2) && 2.0 * binomial_half_cdf(n, k) <= 1.0 - confidence {
        k += 1;
    }
    let covered = 1.0 - 2.0 * binomial_half_cdf(n, k - 1);
    Some(Interval {
        median,
        low: v[k - 1],
        high: v[n - k],
        confidence: covered.max(0.0),
        samples: n,
    })
}

/// The median absolute deviation of `values` from their median, scaled by 1.4826 so that
/// it estimates the standard deviation of normal data (`None` when empty).
pub fn mad(values: &[f64]) -> Option<f64> {
    let centre = median(values)?;
    let deviations: Vec<f64> = values.iter().map(|x| (x - centre).abs()).collect();
    Some(1.4826 * median(&deviations)?)
}

/// Which of `values` lie more than `k` scaled MADs from their median. A spread of less
/// than `floor` (an absolute amount) is taken as `floor`, so that near-identical values
/// do not make every small difference an outlier. Fewer than five values: none.
pub fn outliers(values: &[f64], k: f64, floor: f64) -> Vec<bool> {
    let (Some(centre), Some(spread)) = (median(values), mad(values)) else {
        return vec![];
    };
    if values.len() < 5 {
        return vec![false; values.len()];
    }
    let spread = spread.max(floor);
    values
        .iter()
        .map(|x| (x - centre).abs() > k * spread)
        .collect()
}

/// About how many samples in all an interval like `interval` needs for its side that
/// faces `bound` to stop short of it, if its median stays where it is: an interval of
/// the median narrows as one over the square root of the samples, so `n` samples whose
/// interval reaches `h` from the median toward a bound `d` away need about `n·(h/d)²`.
/// `None` when the median sits on the bound (no number of samples decides it).
pub fn samples_to_clear(interval: &Interval, bound: f64) -> Option<usize> {
    let distance = (interval.median - bound).abs();
    if distance <= 1e-12 {
        return None;
    }
    let reach = if bound < interval.median {
        interval.median - interval.low
    } else {
        interval.high - interval.median
    };
    let n = interval.samples as f64 * (reach / distance).powi(2);
    // Rounding error must not add a sample: 40.000000001 is 40.
    Some(((n - 1e-6).ceil() as usize).max(interval.samples + 1))
}

/// Whether `values` split into two groups: sorted, the widest gap between neighbours
/// leaves at least a fifth of the samples (and two) on each side, is wider than each
/// side's own spread, and is over 10 % of the median. A row that ran in two states on
/// a shared host shows this; its median then describes neither state well.
pub fn bimodal(values: &[f64]) -> bool {
    let v = sorted(values);
    let n = v.len();
    let least = (n / 5).max(2);
    if n < 2 * least {
        return false;
    }
    let Some(median) = median_of_sorted(&v) else {
        return false;
    };
    let (split, gap) = (least..=n - least)
        .map(|i| (i, v[i] - v[i - 1]))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("n ≥ 2·least");
    let below = v[split - 1] - v[0];
    let above = v[n - 1] - v[split];
    gap > below && gap > above && gap > 0.1 * median.abs()
}

/// How far one sample lies from another: the Hodges–Lehmann estimate of the shift (the
/// median of every difference `after − before`) with its distribution-free interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shift {
    /// The median of the pairwise differences `after − before`.
    pub estimate: f64,
    /// The interval's lower end (a pairwise difference).
    pub low: f64,
    /// The interval's upper end (a pairwise difference).
    pub high: f64,
    /// The probability that the interval holds the true shift (at least the one asked for
    /// when the samples allow it; lower, and said, when they do not).
    pub confidence: f64,
    /// Whether `confidence` comes from the exact law of the Mann–Whitney count (small
    /// samples) rather than its normal approximation.
    pub exact: bool,
    /// Values in the `before` sample.
    pub before: usize,
    /// Values in the `after` sample.
    pub after: usize,
}

/// Up to this many pairs (`before` × `after` values) the Mann–Whitney law is computed
/// exactly: the table costs about pairs × (smaller sample) × (all values) steps, a few
/// million here, and benchmark rounds stay far below it.
const EXACT_MANN_WHITNEY_PAIRS: usize = 2500;

/// P(U ≤ u) for u = 0..=m·n, U the Mann–Whitney count of two samples of `m` and `n` values
/// drawn from one continuous law: the ways to pick the `m` ranks of the first sample from
/// `m + n` with each rank sum, over all the ways.
fn mann_whitney_cdf_exact(m: usize, n: usize) -> Vec<f64> {
    let all = m + n;
    let least_sum = m * (m + 1) / 2;
    let most_sum = least_sum + m * n;
    // ways[j][s]: ways to choose j of the ranks seen so far with sum s. Counts reach
    // C(m+n, m), far within f64's range for the sizes computed exactly.
    let mut ways = vec![vec![0.0f64; most_sum + 1]; m + 1];
    ways[0][0] = 1.0;
    for rank in 1..=all {
        for j in (1..=m.min(rank)).rev() {
            for s in (rank..=most_sum).rev() {
                let from = ways[j - 1][s - rank];
                if from != 0.0 {
                    ways[j][s] += from;
                }
            }
        }
    }
    let total: f64 = ways[m].iter().sum();
    let mut below = 0.0;
    ways[m][least_sum..=most_sum]
        .iter()
        .map(|w| {
            below += w;
            (below / total).min(1.0)
        })
        .collect()
}

/// The standard normal law's P(Z ≤ z), from the complementary error function's Chebyshev
/// fit (Numerical Recipes' `erfcc`, relative error under 1.2e-7): std has no `erf`.
fn standard_normal_cdf(z: f64) -> f64 {
    let x = -z / std::f64::consts::SQRT_2;
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.5 * a);
    let poly = -a * a - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    0.5 * if x >= 0.0 { erfc } else { 2.0 - erfc }
}

/// The shift of `after` from `before` with a distribution-free interval of at least
/// `confidence` (e.g. 0.95): the Hodges–Lehmann estimate and the Mann–Whitney (Wilcoxon
/// rank-sum) interval, the `k`-th smallest and `k`-th largest of the `m·n` pairwise
/// differences, `k` as large as the law of U allows. The law is exact up to
/// `EXACT_MANN_WHITNEY_PAIRS` (2,500) pairs and the normal approximation (with a continuity
/// correction) above; `Shift::exact` says which. Like [`median_interval`], too few values
/// for that confidence give the whole range of differences and the confidence it has.
/// Both samples are taken as drawn from continuous laws of the same shape (ties, which
/// measured times almost never have, make the coverage slightly approximate). NaNs are
/// left out; `None` when either sample is empty.
///
/// For a ratio, pass logarithms: the shift of log ratios is the log of a multiplicative
/// change, and `exp` of its ends is that change's interval.
pub fn shift_interval(before: &[f64], after: &[f64], confidence: f64) -> Option<Shift> {
    let (x, y) = (sorted(before), sorted(after));
    let (m, n) = (x.len(), y.len());
    let mut differences: Vec<f64> = y
        .iter()
        .flat_map(|b| x.iter().map(move |a| b - a))
        .collect();
    differences.sort_by(f64::total_cmp);
    let estimate = median_of_sorted(&differences)?;
    let pairs = differences.len();
    let exact = pairs <= EXACT_MANN_WHITNEY_PAIRS;
    let exact_law = if exact {
        // U's law is the same with the samples swapped; the smaller one sizes the table.
        mann_whitney_cdf_exact(m.min(n), m.max(n))
    } else {
        vec![]
    };
    let centre = pairs as f64 / 2.0;
    let sd = (pairs as f64 * (m + n + 1) as f64 / 12.0).sqrt();
    // P(U ≤ u) under no shift.
    let at_most = |u: usize| -> f64 {
        if exact {
            exact_law[u.min(pairs)]
        } else {
            standard_normal_cdf((u as f64 + 0.5 - centre) / sd)
        }
    };
    // The interval [d(k), d(mn+1-k)] (1-based) misses the shift with probability
    // 2·P(U ≤ k-1); take the largest k whose miss stays within 1 - confidence.
    let mut k = 1;
    while k < pairs.div_ceil(2) && 2.0 * at_most(k) <= 1.0 - confidence {
        k += 1;
    }
    Some(Shift {
        estimate,
        low: differences[k - 1],
        high: differences[pairs - k],
        confidence: (1.0 - 2.0 * at_most(k - 1)).max(0.0),
        exact,
        before: m,
        after: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0), "a NaN is left out");
    }

    #[test]
    fn the_binomial_tail_matches_hand_computed_values() {
        assert!((binomial_half_cdf(10, 1) - 11.0 / 1024.0).abs() < 1e-12);
        assert!((binomial_half_cdf(3, 3) - 1.0).abs() < 1e-12);
        assert!((binomial_half_cdf(5, 0) - 1.0 / 32.0).abs() < 1e-12);
    }

    #[test]
    fn ten_samples_give_the_second_and_ninth_as_the_95_percent_interval() {
        let values: Vec<f64> = (1..=10).map(f64::from).rev().collect();
        let i = median_interval(&values, 0.95).unwrap();
        assert_eq!((i.low, i.high, i.median), (2.0, 9.0, 5.5));
        // 1 - 2·P(X ≤ 1) = 1 - 22/1024.
        assert!((i.confidence - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        assert_eq!(i.samples, 10);
    }

    #[test]
    fn more_samples_narrow_the_interval_at_the_same_confidence() {
        let values: Vec<f64> = (1..=30).map(f64::from).collect();
        let i = median_interval(&values, 0.95).unwrap();
        // For n = 30 the 95 % interval is x(10)..x(21).
        assert_eq!((i.low, i.high), (10.0, 21.0));
        assert!(i.confidence >= 0.95);
    }

    #[test]
    fn too_few_samples_give_the_range_and_say_how_sure_it_is() {
        let i = median_interval(&[3.0, 1.0, 2.0], 0.95).unwrap();
        assert_eq!((i.low, i.high), (1.0, 3.0));
        assert!((i.confidence - 0.75).abs() < 1e-12, "{i:?}");
        let one = median_interval(&[7.0], 0.95).unwrap();
        assert_eq!((one.low, one.median, one.high), (7.0, 7.0, 7.0));
        assert_eq!(one.confidence, 0.0);
        assert!(median_interval(&[], 0.95).is_none());
    }

    #[test]
    fn the_mad_of_a_normal_like_sample_is_near_its_spread_and_ignores_one_outlier() {
        assert_eq!(mad(&[]), None);
        let values = [1.0, 2.0, 3.0, 4.0, 5.0];
        // Deviations 2, 1, 0, 1, 2: median 1.
        assert!((mad(&values).unwrap() - 1.4826).abs() < 1e-12);
        let with_outlier = [7.0, 7.2, 6.9, 7.1, 7.0, 13.3, 7.1, 6.8];
        let flagged = outliers(&with_outlier, 5.0, 0.0);
        assert_eq!(
            flagged,
            vec![false, false, false, false, false, true, false, false]
        );
        assert!(
            outliers(&[7.0, 7.0, 7.0, 7.0, 7.01], 5.0, 0.1)
                .iter()
                .all(|o| !o),
            "below the floor nothing is an outlier"
        );
        assert_eq!(outliers(&[1.0, 100.0], 5.0, 0.0), vec![false, false]);
    }

    #[test]
    fn the_samples_to_clear_a_bound_grow_as_the_square_of_the_reach_over_the_distance() {
        let i = Interval {
            median: 0.6,
            low: 0.5,
            high: 0.7,
            confidence: 0.95,
            samples: 10,
        };
        // Reaching 0.1 toward a bound 0.05 away: four times the samples.
        assert_eq!(samples_to_clear(&i, 0.65), Some(40));
        assert_eq!(samples_to_clear(&i, 0.55), Some(40));
        // Already clear: at least one more than it has.
        assert_eq!(samples_to_clear(&i, 0.9), Some(11));
        assert_eq!(samples_to_clear(&i, 0.6), None);
    }

    #[test]
    fn two_states_are_flagged_and_one_noisy_state_is_not() {
        let two = [3.5, 3.6, 3.4, 3.7, 8.0, 8.2, 7.9, 3.5, 8.1, 3.6];
        assert!(bimodal(&two));
        let one = [5.0, 5.2, 4.9, 5.6, 5.1, 4.7, 5.3, 5.0, 5.4, 4.8];
        assert!(!bimodal(&one));
        // One outlier is not a second state.
        let outlier = [5.0, 5.1, 5.0, 5.2, 4.9, 5.0, 5.1, 5.0, 5.2, 12.0];
        assert!(!bimodal(&outlier));
        assert!(!bimodal(&[1.0, 9.0]), "too few samples to say");
    }

    #[test]
    fn the_exact_mann_whitney_law_matches_the_counted_arrangements() {
        // Six and six: 924 ways to place the ranks; U = 0..=5 in 1, 1, 2, 3, 5, 7 of them.
        let law = mann_whitney_cdf_exact(6, 6);
        assert_eq!(law.len(), 37);
        assert!((law[0] - 1.0 / 924.0).abs() < 1e-12);
        assert!((law[5] - 19.0 / 924.0).abs() < 1e-12);
        assert!((law[36] - 1.0).abs() < 1e-12);
        // One value against two: U is 0, 1 or 2, each a third.
        let small = mann_whitney_cdf_exact(1, 2);
        assert!((small[0] - 1.0 / 3.0).abs() < 1e-12 && (small[1] - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_normal_approximation_is_close_to_the_exact_law_for_moderate_samples() {
        assert!((standard_normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((standard_normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
        let (m, n) = (30usize, 40usize);
        let exact = mann_whitney_cdf_exact(m, n);
        let sd = ((m * n * (m + n + 1)) as f64 / 12.0).sqrt();
        for u in [400, 500, 600] {
            let normal = standard_normal_cdf((u as f64 + 0.5 - (m * n) as f64 / 2.0) / sd);
            assert!(
                (exact[u] - normal).abs() < 0.005,
                "u {u}: {} vs {normal}",
                exact[u]
            );
        }
    }

    #[test]
    fn a_shift_of_ten_between_six_and_six_values_has_the_hand_computed_interval() {
        let before: Vec<f64> = (1..=6).map(f64::from).collect();
        let after: Vec<f64> = (11..=16).map(f64::from).collect();
        let s = shift_interval(&before, &after, 0.95).unwrap();
        // Differences 10 + (j − i): 5 once, 6 twice, 7 three times, …; P(U ≤ 5) = 19/924
        // is the largest tail within 2.5 %, so the 6th and 31st of 36: 7 and 13.
        assert_eq!((s.estimate, s.low, s.high), (10.0, 7.0, 13.0));
        assert!((s.confidence - (1.0 - 38.0 / 924.0)).abs() < 1e-12, "{s:?}");
        assert!(s.exact);
        assert_eq!((s.before, s.after), (6, 6));
    }

    #[test]
    fn identical_samples_give_a_ratio_interval_holding_one() {
        let ratios = [0.92, 1.05, 0.98, 1.10, 0.95, 1.01, 0.99, 1.03];
        let logs: Vec<f64> = ratios.iter().map(|r: &f64| r.ln()).collect();
        let s = shift_interval(&logs, &logs, 0.95).unwrap();
        assert!(s.estimate.abs() < 1e-12, "{s:?}");
        assert!(s.low.exp() < 1.0 && s.high.exp() > 1.0, "{s:?}");
        assert!(s.confidence >= 0.95, "{s:?}");
    }

    #[test]
    fn a_sample_half_again_as_costly_is_found_and_excludes_no_change() {
        let before = [0.92, 1.05, 0.98, 1.10, 0.95, 1.01, 0.99, 1.03];
        // Not simply the same values times 1.5: a different spread, in another order.
        let after = [1.41, 1.62, 1.47, 1.55, 1.44, 1.58, 1.50, 1.52];
        let logs = |v: &[f64]| v.iter().map(|r| r.ln()).collect::<Vec<_>>();
        let s = shift_interval(&logs(&before), &logs(&after), 0.95).unwrap();
        let change = s.estimate.exp();
        assert!((change - 1.5).abs() < 0.05, "{change}");
        assert!(s.low.exp() > 1.0, "the interval excludes 1: {s:?}");
        // 8 and 8: P(U ≤ 13) = 321/12870 is the largest tail within 2.5 %, so the 14th
        // smallest and largest of the 64 ratios: 1.44/1.01 and 1.47/0.92 (checked against a
        // brute-force enumeration of the 12,870 arrangements).
        assert!((s.low.exp() - 1.44 / 1.01).abs() < 1e-12, "{s:?}");
        assert!((s.high.exp() - 1.47 / 0.92).abs() < 1e-12, "{s:?}");
        assert!(
            (s.confidence - (1.0 - 642.0 / 12870.0)).abs() < 1e-12,
            "{s:?}"
        );
    }

    #[test]
    fn too_few_values_give_the_whole_range_and_say_how_sure_it_is() {
        let s = shift_interval(&[1.0, 2.0], &[3.0, 5.0], 0.95).unwrap();
        assert_eq!((s.low, s.high, s.estimate), (1.0, 4.0, 2.5));
        // The range of differences misses only when U is 0 or 4: 2 · 1/6.
        assert!((s.confidence - 2.0 / 3.0).abs() < 1e-12, "{s:?}");
        assert!(shift_interval(&[], &[1.0], 0.95).is_none());
        assert!(shift_interval(&[1.0, f64::NAN], &[f64::NAN], 0.95).is_none());
    }

    #[test]
    fn large_samples_use_the_normal_approximation_and_keep_their_coverage() {
        let before: Vec<f64> = (0..60).map(|i| f64::from(i) / 10.0).collect();
        let after: Vec<f64> = before.iter().map(|x| x + 1.0).collect();
        let s = shift_interval(&before, &after, 0.95).unwrap();
        assert!(!s.exact);
        assert!((s.estimate - 1.0).abs() < 1e-9, "{s:?}");
        assert!(s.confidence >= 0.95 && s.confidence < 0.96, "{s:?}");
        assert!(s.low < 1.0 && s.high > 1.0 && s.low > 0.0, "{s:?}");
    }
}
