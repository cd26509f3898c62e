//! Marginal and fixed cost: in each round, a straight line through a setup's fixed-load
//! trials, cores busy = fixed + marginal · packets per second. The slope is what one more
//! packet costs (what sets sessions per core); the intercept is the cores a setup holds
//! at no load (busy polling shows there, and a pooled µs-per-packet figure would charge
//! it to the packets, more at low loads than at high). Both are taken net of the null
//! row's line over the same loads. Pure: trials in, lines out.

use super::sample::Sample;
use crate::bench::stats::median;

/// The fewest loads a line is fitted through: two points always fit a line exactly, so
/// the residuals of at least four say whether a straight line describes the setup.
pub const MIN_LOADS: usize = 4;

/// A straight line through one setup's trials in one round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line {
    /// Cores busy at zero load (the intercept).
    pub fixed_cores: f64,
    /// µs of CPU per packet (the slope).
    pub us_per_packet: f64,
    /// The trials it went through.
    pub loads: usize,
}

impl Line {
    /// `self` less `other`, term by term: a setup's line net of the null row's.
    pub fn less(&self, other: &Line) -> Line {
        Line {
            fixed_cores: self.fixed_cores - other.fixed_cores,
            us_per_packet: self.us_per_packet - other.us_per_packet,
            loads: self.loads.min(other.loads),
        }
    }
}

/// The Theil–Sen line through `points` (packets per second, cores busy): the slope is the
/// median of the slopes between every two points at different rates, the intercept the
/// median of what each point leaves above that slope. `None` with fewer than
/// [`MIN_LOADS`] points or no two rates far enough apart to give a slope.
///
/// Why not least squares: a trial that a kernel thread or a timer disturbs carries tens
/// of milliseconds of busy time that are not the setup's, and with five loads one such
/// trial tilts a least-squares line by itself (its breakdown point is 0). Here it moves
/// four of the ten pairwise slopes, which can push their median only to the edge of the
/// six clean ones (the breakdown point is 29 %); on points exactly on a line both fits
/// agree. Cheap rows suffer most: the fast path's
/// marginal cost is under a microsecond per packet, a few tens of milliseconds across the
/// loads, the size of one disturbed trial.
pub fn fit(points: &[(f64, f64)]) -> Option<Line> {
    let n = points.len();
    if n < MIN_LOADS {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n as f64;
    // Rates within 1 % of their mean of each other give no slope worth the name: the
    // spread of the rates as a whole, and each pair's.
    let apart = 0.01 * mean_x;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx <= apart.powi(2) * n as f64 {
        return None;
    }
    let mut slopes = Vec::with_capacity(n * (n - 1) / 2);
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            if (b.0 - a.0).abs() > apart {
                slopes.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
    }
    let slope = median(&slopes)?;
    let leftovers: Vec<f64> = points.iter().map(|p| p.1 - slope * p.0).collect();
    Some(Line {
        fixed_cores: median(&leftovers)?,
        us_per_packet: slope * 1e6,
        loads: n,
    })
}

/// Which of `samples`' loads every one of them carried
/// ([`super::sample::LoadTrial::not_carried`]) in their round.
pub fn carried_by_all(samples: &[&Sample]) -> Vec<bool> {
    let loads = samples.iter().map(|s| s.loads.len()).min().unwrap_or(0);
    (0..loads)
        .map(|i| samples.iter().all(|s| s.loads[i].not_carried().is_none()))
        .collect()
}

/// Whether `sample` carried every load `loads` keeps.
fn carried_all(sample: &Sample, loads: &[bool]) -> bool {
    loads
        .iter()
        .enumerate()
        .filter(|(_, keep)| **keep)
        .all(|(i, _)| {
            sample
                .loads
                .get(i)
                .is_some_and(|t| t.not_carried().is_none())
        })
}

/// `sample`'s line through the loads `loads` keeps.
fn line_over(sample: &Sample, loads: &[bool]) -> Option<Line> {
    let points: Vec<(f64, f64)> = sample
        .loads
        .iter()
        .zip(loads)
        .filter(|(_, keep)| **keep)
        .filter_map(|(t, _)| t.point())
        .collect();
    fit(&points)
}

/// `row`'s line net of `null`'s, both through exactly the loads `loads` keeps (the run's
/// set for this row or pair, [`super::cost::Analysis::load_set`]): `None` when either did
/// not carry one of them, so every round's line for a row measures the same thing.
pub fn net_line(row: &Sample, null: &Sample, loads: &[bool]) -> Option<Line> {
    if !carried_all(row, loads) || !carried_all(null, loads) {
        return None;
    }
    Some(line_over(row, loads)?.less(&line_over(null, loads)?))
}

/// `row`'s marginal cost over `other`'s in one round, both net of `null` and through the
/// loads `loads` keeps; `None` when one of the three did not carry one of them, fewer
/// than [`MIN_LOADS`] are kept, or `other`'s net marginal cost is not above zero.
pub fn ratio_in_round(row: &Sample, other: &Sample, null: &Sample, loads: &[bool]) -> Option<f64> {
    let mine = net_line(row, null, loads)?;
    let theirs = net_line(other, null, loads)?;
    (theirs.us_per_packet > 0.0).then(|| mine.us_per_packet / theirs.us_per_packet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::compare::sample::LoadTrial;

    /// A one-second trial at `pps` on a setup holding `fixed` cores and costing `us` per
    /// packet, losing `lost`.
    fn trial(pps: u64, fixed: f64, us: f64, lost: u64) -> LoadTrial {
        let received = pps - lost;
        LoadTrial {
            offered_pps: pps,
            sent: pps,
            received,
            busy: fixed + us * received as f64 / 1e6,
            wall: 1.0,
            sent_pps: None,
        }
    }

    fn sample(setup: &str, fixed: f64, us: f64) -> Sample {
        Sample {
            loads: [10_000, 20_000, 35_000, 50_000]
                .iter()
                .map(|&pps| trial(pps, fixed, us, 0))
                .collect(),
            ..Sample::for_tests(setup, 1, true)
        }
    }

    #[test]
    fn a_line_through_exact_points_recovers_its_slope_and_intercept() {
        let points: Vec<(f64, f64)> = [10e3, 20e3, 35e3, 50e3]
            .iter()
            .map(|&x| (x, 0.25 + 7e-6 * x))
            .collect();
        let line = fit(&points).unwrap();
        assert!((line.us_per_packet - 7.0).abs() < 1e-9, "{line:?}");
        assert!((line.fixed_cores - 0.25).abs() < 1e-9, "{line:?}");
        assert_eq!(line.loads, 4);
    }

    #[test]
    fn one_disturbed_trial_does_not_tilt_the_line() {
        // Five loads on a setup costing 0.8 µs per packet over 0.06 cores; the 20k trial
        // carries 40 ms of someone else's busy time (as a kernel thread waking on the
        // measured core does). Least squares reads half the cost; the median of the
        // pairwise slopes reads it exactly.
        let mut points: Vec<(f64, f64)> = [10e3, 20e3, 30e3, 40e3, 50e3]
            .iter()
            .map(|&x| (x, 0.06 + 0.8e-6 * x))
            .collect();
        points[1].1 += 0.04;
        let line = fit(&points).unwrap();
        assert!((line.us_per_packet - 0.8).abs() < 1e-9, "{line:?}");
        assert!((line.fixed_cores - 0.06).abs() < 1e-9, "{line:?}");
        let least_squares = least_squares_slope(&points);
        assert!((least_squares - 0.4).abs() < 1e-9, "{least_squares}");
    }

    #[test]
    fn on_noisy_but_undisturbed_points_it_stays_near_least_squares() {
        // Residuals +e, −e, −e, +e at symmetric rates: least squares reads 5 exactly, and
        // the six pairwise slopes (3, 4, 5, 5, 6, 7) have 5 as their median.
        let e = 0.01;
        let points = [
            (10e3, 0.1 + 0.05 + e),
            (20e3, 0.1 + 0.10 - e),
            (30e3, 0.1 + 0.15 - e),
            (40e3, 0.1 + 0.20 + e),
        ];
        let line = fit(&points).unwrap();
        assert!((least_squares_slope(&points) - 5.0).abs() < 1e-9);
        assert!((line.us_per_packet - 5.0).abs() < 1e-9, "{line:?}");
    }

    /// The least-squares slope, µs per packet: what `fit` is compared with.
    fn least_squares_slope(points: &[(f64, f64)]) -> f64 {
        let n = points.len() as f64;
        let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
        let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
        sxy / sxx * 1e6
    }

    #[test]
    fn too_few_or_equal_rates_give_no_line() {
        assert!(fit(&[(1e4, 0.1), (2e4, 0.2), (3e4, 0.3)]).is_none());
        assert!(fit(&[(1e4, 0.1); 4]).is_none());
        assert!(fit(&[]).is_none());
        // Three at one rate and one 2 % off: each pair with the fourth is 2 % apart, but
        // the rates as a whole spread less than 1 % of their mean.
        let huddled = [(1e4, 0.1), (1e4, 0.1), (1e4, 0.1), (1.02e4, 0.11)];
        assert!(fit(&huddled).is_none());
    }

    #[test]
    fn busy_polling_shows_as_fixed_cores_not_as_cost_per_packet() {
        // A busy poller holds a whole core at any load; each packet costs it as little
        // as a cheap socket relay's. Pooled over these loads it would look 10× dearer
        // per packet at 10k than at 100k; the line tells the two costs apart.
        let busy = sample("afxdp-busy", 1.0, 2.0);
        let null = sample("direct", 0.02, 1.0);
        let line = net_line(&busy, &null, &[true; 4]).unwrap();
        assert!((line.fixed_cores - 0.98).abs() < 1e-9, "{line:?}");
        assert!((line.us_per_packet - 1.0).abs() < 1e-9, "{line:?}");
    }

    #[test]
    fn a_line_goes_through_exactly_the_loads_it_is_given() {
        let mut row = sample("naive", 0.0, 9.0);
        let other = sample("mio", 0.0, 5.0);
        let null = sample("direct", 0.0, 1.0);
        let all = [true; 4];
        assert!((ratio_in_round(&row, &other, &null, &all).unwrap() - 2.0).abs() < 1e-9);
        // The row loses 40 % at 50k.
        row.loads[3] = trial(50_000, 0.0, 9.0, 20_000);
        assert_eq!(
            carried_by_all(&[&row, &other, &null]),
            vec![true, true, true, false]
        );
        assert!(
            ratio_in_round(&row, &other, &null, &all).is_none(),
            "a load of the set not carried: no ratio this round, not a line through fewer"
        );
        assert!(net_line(&row, &null, &all).is_none());
        assert!(net_line(&other, &null, &all).is_some());
        assert!(
            net_line(&other, &null, &[true, true, true, false]).is_none(),
            "three loads are too few for a line"
        );
    }

    #[test]
    fn a_comparator_that_costs_nothing_net_gives_no_ratio() {
        let row = sample("mio", 0.0, 5.0);
        let free = sample("xdp", 0.0, 1.0);
        let null = sample("direct", 0.0, 1.0);
        assert!(ratio_in_round(&row, &free, &null, &[true; 4]).is_none());
    }
}
