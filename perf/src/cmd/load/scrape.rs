//! The server's own view of a load: its Prometheus endpoints read before the load, in
//! the middle of the hold and after the deletes, and what changed between readings.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use ufrag_testbed::http::{Endpoint, request_to};

use crate::bench::sessions::load_test::Target;

/// A Prometheus endpoint the report reads.
#[derive(Clone, Debug)]
pub struct ScrapeTarget {
    endpoint: Endpoint,
    path: String,
    tls: Arc<rustls::ClientConfig>,
}

/// The signaling endpoint's `/metrics` and each of the `extra` URLs (`http://HOST:PORT`
/// means its `/metrics`); a URL that does not parse is said and left out.
pub fn targets(target: &Target, extra: &[String], ca_file: Option<&Path>) -> Vec<ScrapeTarget> {
    let mut targets = vec![ScrapeTarget {
        endpoint: target.endpoint.clone(),
        path: "/metrics".into(),
        tls: Arc::clone(&target.tls),
    }];
    for url in extra {
        match super::split_url(url) {
            Ok((endpoint, path)) => targets.push(ScrapeTarget {
                endpoint,
                path: path.unwrap_or_else(|| "/metrics".into()),
                tls: ufrag_testbed::http::tls_client(ca_file)
                    .unwrap_or_else(|_| Arc::clone(&target.tls)),
            }),
            Err(e) => crate::say!("load: --metrics {url}: {e}; not read"),
        }
    }
    targets
}

/// One reading of a Prometheus endpoint: its samples, or why it could not be read.
#[derive(Clone, Debug)]
pub struct Scrape {
    /// The endpoint's URL.
    pub url: String,
    /// `(series, value)` as exposed, or the error.
    pub series: Result<Vec<(String, f64)>, String>,
}

impl Scrape {
    /// Reads `target` now.
    pub fn read(target: &ScrapeTarget) -> Scrape {
        let url = format!("{}{}", target.endpoint, target.path);
        let series = request_to(
            &target.endpoint,
            &target.tls,
            "GET",
            &target.path,
            None,
            &[],
        )
        .and_then(|r| match r.status {
            200 => Ok(parse_exposition(&r.body)),
            status => Err(format!("answered {status}")),
        });
        Scrape { url, series }
    }
}

/// Reads every target now.
pub fn read_all(targets: &[ScrapeTarget]) -> Vec<Scrape> {
    targets.iter().map(Scrape::read).collect()
}

/// The samples of a Prometheus text exposition, `(series, value)`, the series as
/// written (name and labels); a sample that is not a finite number is left out.
pub fn parse_exposition(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, rest) = match l.rfind('}') {
                Some(end) => (&l[..=end], &l[end + 1..]),
                None => l.split_once(' ')?,
            };
            let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
            value
                .is_finite()
                .then(|| (series.trim().to_string(), value))
        })
        .collect()
}

/// One series over the load.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesChange {
    /// The series (name and labels).
    pub series: String,
    /// Before the load (0 when it did not exist yet).
    pub before: f64,
    /// In the middle of the hold, when read.
    pub during: Option<f64>,
    /// After the deletes.
    pub after: f64,
}

impl SeriesChange {
    /// A counter (`_total`) that went down: the server restarted, and the change is
    /// not the load's.
    pub fn reset(&self) -> bool {
        self.series
            .split('{')
            .next()
            .is_some_and(|n| n.ends_with("_total"))
            && (self.after < self.before || self.during.is_some_and(|d| d < self.before))
    }
}

/// The series that changed over the load (before, during, after); histogram buckets
/// and summary quantiles are left out (their `_sum` and `_count` stay). Sorted by name.
pub fn changes(
    before: &[(String, f64)],
    during: Option<&[(String, f64)]>,
    after: &[(String, f64)],
) -> Vec<SeriesChange> {
    let index =
        |samples: &[(String, f64)]| -> HashMap<String, f64> { samples.iter().cloned().collect() };
    let (old, mid) = (index(before), during.map(index));
    let mut changed: Vec<SeriesChange> = after
        .iter()
        .filter(|(s, _)| !s.contains("_bucket{") && !s.contains("quantile=\""))
        .map(|(s, v)| SeriesChange {
            series: s.clone(),
            before: old.get(s).copied().unwrap_or(0.0),
            during: mid.as_ref().and_then(|m| m.get(s).copied()),
            after: *v,
        })
        .filter(|c| c.before != c.after || c.during.is_some_and(|d| d != c.before))
        .collect();
    changed.sort_by(|x, y| x.series.cmp(&y.series));
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_reads_labelled_and_bare_series() {
        let text = "# HELP x y\n# TYPE a counter\na_total 3\n\
                    b{reason=\"a b\",x=\"1\"} 2.5 1700000000\nc_bucket{le=\"1\"} 4\nd NaN\n\n";
        assert_eq!(
            parse_exposition(text),
            vec![
                ("a_total".to_string(), 3.0),
                ("b{reason=\"a b\",x=\"1\"}".to_string(), 2.5),
                ("c_bucket{le=\"1\"}".to_string(), 4.0),
            ],
            "a NaN sample is no sample"
        );
    }

    #[test]
    fn changes_list_what_moved_new_series_from_zero_and_no_buckets() {
        let before = vec![("a_total".to_string(), 1.0), ("g".to_string(), 2.0)];
        let during = vec![("g".to_string(), 9.0), ("a_total".to_string(), 2.0)];
        let after = vec![
            ("a_total".to_string(), 3.0),
            ("g".to_string(), 2.0),
            ("n_total".to_string(), 4.0),
            ("h_bucket{le=\"1\"}".to_string(), 4.0),
            ("s{quantile=\"0.5\"}".to_string(), 4.0),
        ];
        let changed = changes(&before, Some(&during), &after);
        let names: Vec<&str> = changed.iter().map(|c| c.series.as_str()).collect();
        assert_eq!(
            names,
            ["a_total", "g", "n_total"],
            "a gauge back where it was still moved"
        );
        assert_eq!(changed[1].during, Some(9.0));
        assert_eq!(changed[2].before, 0.0);
        assert!(changed.iter().all(|c| !c.reset()));
    }

    #[test]
    fn a_counter_that_went_down_is_a_reset() {
        let change = |before, after| SeriesChange {
            series: "x_total{worker=\"0\"}".into(),
            before,
            during: None,
            after,
        };
        assert!(change(10.0, 2.0).reset());
        assert!(!change(2.0, 10.0).reset());
        let gauge = SeriesChange {
            series: "active".into(),
            ..change(10.0, 2.0)
        };
        assert!(!gauge.reset(), "a gauge may go down");
    }
}
