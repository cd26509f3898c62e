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
}
