//! What one setup's trials in one round measured ([`Sample`]): a trial per fixed load
//! ([`LoadTrial`]), the latency trials, what the host gate found and what the fast path
//! carried. The data every later step (lines, ratios, the report) reads; no analysis.

use crate::bench::host_gate::{Disturbance, Reading};

/// A load lost more than this share: left out of every line that load would enter.
pub const LOSSY: f64 = 0.005;

/// One trial at a fixed load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadTrial {
    /// The offered rate, pps.
    pub offered_pps: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams that reached the sink.
    pub received: u64,
    /// Busy CPU seconds over every CPU during the trial.
    pub busy: f64,
    /// Wall seconds of the trial.
    pub wall: f64,
    /// The rate the generator achieved, pps (`None` in a report that did not record it).
    pub sent_pps: Option<u64>,
}

/// Why a load's trial does not enter a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotCarried {
    /// Nothing arrived, or more than [`LOSSY`] was lost.
    Lost,
    /// The generator could not keep pace: it sent more than [`crate::bench::load::SHORTFALL`]
    /// slower than offered. It sends a fixed count, so the trial stretched instead of
    /// losing, and the setup ran at a rate nobody offered (on a host whose cores the tools
    /// share, a setup past its ceiling slows the generator; past the ceiling deeper
    /// batches make each packet cheaper).
    Stretched,
}

impl NotCarried {
    /// As a phrase for the report.
    pub fn label(self) -> &'static str {
        match self {
            NotCarried::Lost => "lost",
            NotCarried::Stretched => "stretched",
        }
    }
}

impl LoadTrial {
    /// Fraction lost.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 1.0;
        }
        self.sent.saturating_sub(self.received) as f64 / self.sent as f64
    }

    /// Why this trial does not enter a line, or `None` when the setup carried its load:
    /// something arrived, at most [`LOSSY`] was lost and the generator kept within
    /// [`crate::bench::load::SHORTFALL`] of the offered rate.
    pub fn not_carried(&self) -> Option<NotCarried> {
        if self.received == 0 || self.loss() > LOSSY {
            return Some(NotCarried::Lost);
        }
        let stretched = self
            .sent_pps
            .is_some_and(|sent| crate::bench::load::fell_short(sent, self.offered_pps));
        stretched.then_some(NotCarried::Stretched)
    }

    /// Busy µs per packet that arrived (`None` when the load was not carried).
    pub fn us_per_packet(&self) -> Option<f64> {
        self.not_carried()
            .is_none()
            .then(|| self.busy * 1e6 / self.received as f64)
    }

    /// The trial as a point of a line: (packets per second that arrived, cores busy);
    /// `None` for a trial of no length.
    pub fn point(&self) -> Option<(f64, f64)> {
        (self.wall > 0.0).then(|| (self.received as f64 / self.wall, self.busy / self.wall))
    }
}

/// One setup's trials in one round.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The setup's key.
    pub setup: String,
    /// The round (1-based).
    pub round: usize,
    /// Its place in the round's random order (1-based).
    pub position: usize,
    /// One trial per fixed load, in the order of the loads.
    pub loads: Vec<LoadTrial>,
    /// One latency trial per `--latency-loads` rate, in their order ([`super::latency`]).
    pub latency: Vec<crate::bench::load::Trial>,
    /// What the host gate found; empty when the host was fit.
    pub disturbances: Vec<Disturbance>,
    /// What the gate read before the trials.
    pub reading: Option<Reading>,
    /// What relay-afxdp's in-kernel fast path carried in the cost trials (`None` for a
    /// setup without one).
    pub fast_path: Option<super::carried::Carried>,
    /// What ran outside the experiment over the cost trials (`None` when not read).
    pub outside: Option<crate::bench::outside::Outside>,
    /// What each RX queue of the relay's interface received over the cost trials (`None`
    /// with one queue, or when the driver names no per-queue counter).
    pub queues: Option<crate::bench::spread::Spread>,
    /// The interface's steering settings that changed during the cost trials (a lab's
    /// relay host); any leaves the sample out.
    pub steering_changed: Vec<String>,
    /// The whole host's busy seconds over the cost trials, where the cost counted only
    /// some CPUs ([`crate::cmd::compare::relay_host::RelayHost::counted`]).
    pub host_busy: Option<f64>,
    /// Network work that landed on CPUs the cost did not count, over the cost trials.
    pub elsewhere: Vec<crate::bench::counted::Elsewhere>,
}

impl Sample {
    /// Whether the host gate passed it.
    pub fn clean(&self) -> bool {
        self.disturbances.is_empty()
    }

    /// Setup `setup`'s sample of `round`, first in its order, with no trials; passed by
    /// the host gate or (not `clean`) left out for a busy host. For unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(setup: &str, round: usize, clean: bool) -> Sample {
        Sample {
            setup: setup.into(),
            round,
            position: 1,
            loads: vec![],
            latency: vec![],
            disturbances: if clean {
                vec![]
            } else {
                vec![crate::bench::host_gate::Disturbance::BusyAtRest(0.5)]
            },
            reading: None,
            fast_path: None,
            outside: None,
            queues: None,
            steering_changed: vec![],
            host_busy: None,
            elsewhere: vec![],
        }
    }
}
