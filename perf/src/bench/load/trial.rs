//! The outcome of one trial: what was offered, sent and received, and the one-way latency
//! of the sampled datagrams.

use hdrhistogram::Histogram;

use super::LOSS_FREE;

/// The outcome of one trial.
#[derive(Clone, Copy, Debug)]
pub struct Trial {
    /// Target rate.
    pub offered_pps: u64,
    /// Rate the generator achieved.
    pub sent_pps: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams received.
    pub received: u64,
    /// One-way latency of the sampled datagrams.
    pub latency: Latency,
}

impl Trial {
    /// A trial that offered and carried nothing: the place of a row's latency trial
    /// before `perf compare --interleave` reaches its last round and takes it.
    pub const NONE: Trial = Trial {
        offered_pps: 0,
        sent_pps: 0,
        sent: 0,
        received: 0,
        latency: Latency {
            samples: 0,
            cdf_us: [0.0; CDF_QUANTILES.len()],
        },
    };
}

/// The quantiles a [`Latency`] keeps: its CDF, from the 1st percentile to the maximum.
pub const CDF_QUANTILES: [f64; 8] = [0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0];

/// One-way latency of a trial's sampled datagrams: how many were sampled, and the
/// latency at each of [`CDF_QUANTILES`] (µs). No samples: all zero.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Datagrams whose latency was recorded (a tail quantile from few samples is a
    /// handful of datagrams: p99.9 of 5,000 is the 5th worst).
    pub samples: u64,
    /// Latency at each of [`CDF_QUANTILES`], µs.
    pub cdf_us: [f64; CDF_QUANTILES.len()],
}

impl Latency {
    /// From a histogram of nanoseconds.
    pub fn from_histogram(latency_ns: &Histogram<u64>) -> Latency {
        if latency_ns.is_empty() {
            return Latency::default();
        }
        Latency {
            samples: latency_ns.len(),
            cdf_us: CDF_QUANTILES.map(|q| latency_ns.value_at_quantile(q) as f64 / 1_000.0),
        }
    }

    /// The latency at quantile `q`, which must be one of [`CDF_QUANTILES`].
    pub fn at(&self, q: f64) -> f64 {
        let i = CDF_QUANTILES
            .iter()
            .position(|&k| k == q)
            .expect("one of CDF_QUANTILES");
        self.cdf_us[i]
    }

    /// The median, µs.
    pub fn p50(&self) -> f64 {
        self.at(0.5)
    }

    /// The 99th percentile, µs.
    pub fn p99(&self) -> f64 {
        self.at(0.99)
    }

    /// The 99.9th percentile, µs.
    pub fn p999(&self) -> f64 {
        self.at(0.999)
    }
}

impl Trial {
    /// A trial at `offered_pps` that sent `sent` in `seconds`, of which `received`
    /// arrived; latency from `latency_ns` (which may hold a sample of them).
    pub fn from_counts(
        offered_pps: u64,
        sent: u64,
        seconds: f64,
        received: u64,
        latency_ns: &Histogram<u64>,
    ) -> Trial {
        Trial {
            offered_pps,
            sent_pps: (sent as f64 / seconds.max(1e-9)) as u64,
            sent,
            received,
            latency: Latency::from_histogram(latency_ns),
        }
    }

    /// Fraction lost.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        (self.sent.saturating_sub(self.received)) as f64 / self.sent as f64
    }

    /// True when loss is under 0.1 %.
    pub fn loss_free(&self) -> bool {
        self.loss() < LOSS_FREE
    }

    /// True when the generator fell short of the target rate by more than
    /// [`super::SHORTFALL`]: the load was not offered (the generator's own core, or the host's
    /// cores shared with the system under test, were the limit).
    pub fn generator_bound(&self) -> bool {
        super::fell_short(self.sent_pps, self.offered_pps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_computed_from_sent_and_received() {
        let t = Trial {
            offered_pps: 1000,
            sent_pps: 1000,
            sent: 10_000,
            received: 9_990,
            latency: Latency::default(),
        };
        assert!((t.loss() - 0.001).abs() < 1e-12);
        assert!(!t.loss_free(), "0.1 % is not under 0.1 %");
    }
}
