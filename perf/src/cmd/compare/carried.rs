//! What relay-afxdp's in-kernel fast path carried over a window, as the relay's own
//! `/metrics` counts it: what the cost trials' samples record beside the sink's counts.

/// What the fast path carried over a window (or, as [`super::fast_path::read`] returns it, since the
/// relay started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// Datagrams it forwarded towards transceivers: the sink's side, so these are what
    /// the uplink trials' received datagrams compare with.
    pub packets: u64,
    /// Datagrams it forwarded to clients.
    pub returned: u64,
    /// Datagrams to a VIP or internal address it left to the workers (STUN, no entry for
    /// the flow, a frame it does not take, a next hop without a MAC yet).
    pub left_to_workers: u64,
    /// Proven flows the workers could not hand it (they carry them).
    pub flows_not_installed: u64,
    /// Flows it carried: of the flows made before the trials, those whose datagram after
    /// their proof it forwarded (each sends one, [`crate::bench::load::target::prove_flows`]).
    /// Not a counter of the relay's: set with [`Carried::with_flows`], kept by
    /// [`Carried::since`].
    pub flows: u64,
}

impl Carried {
    /// What was carried between `before` and this reading (`flows` is this one's).
    pub fn since(&self, before: &Carried) -> Carried {
        Carried {
            packets: self.packets.saturating_sub(before.packets),
            returned: self.returned.saturating_sub(before.returned),
            left_to_workers: self.left_to_workers.saturating_sub(before.left_to_workers),
            flows_not_installed: self
                .flows_not_installed
                .saturating_sub(before.flows_not_installed),
            flows: self.flows,
        }
    }

    /// This, with `flows` flows carried.
    pub fn with_flows(self, flows: u64) -> Carried {
        Carried { flows, ..self }
    }

    /// The share of `received` datagrams (at the sink, over the same window) the fast
    /// path forwarded itself; `None` when none arrived.
    pub fn share_of(&self, received: u64) -> Option<f64> {
        (received > 0).then(|| self.packets as f64 / received as f64)
    }

    /// The totals in a `/metrics` text.
    pub fn from_metrics(text: &str) -> Carried {
        let count = |series: &str| ufrag_testbed::http::metric_sum(text, series) as u64;
        Carried {
            packets: count(r#"ufrag_relay_fast_path_forwarded_datagrams_total{direction="in""#),
            returned: count(r#"ufrag_relay_fast_path_forwarded_datagrams_total{direction="out""#),
            left_to_workers: count("ufrag_relay_fast_path_left_datagrams_total"),
            flows_not_installed: count("ufrag_relay_fast_path_flows_not_installed_total"),
            flows: 0,
        }
    }
}
