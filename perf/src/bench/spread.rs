//! How a load spread over a NIC's RX queues: each queue's received packets from
//! `ethtool -S`, counted around a setup's trials, and whether one queue took far more
//! (or far less) than its share. A NIC that hashes UDP on addresses only puts every flow
//! from one client address on one queue, and the extra workers then measure nothing.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Each RX queue's received packets as `ethtool -S` names them, by queue number:
/// `rx_queue_N_packets` (ice, ixgbe, igb, virtio_net), `rxN_packets` (mlx5),
/// `rx-N.packets` (i40e), `queue_N_rx_cnt` (ena), or `rx_queue_N_xdp_packets` (veth,
/// whose NAPI path counts only these) where none of the others is there.
pub fn rx_packets_by_queue(stats: &str) -> BTreeMap<usize, u64> {
    let (mut packets, mut xdp_packets) = (BTreeMap::new(), BTreeMap::new());
    for line in stats.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        let name = name.trim();
        if let Some(queue) = queue_of(name, "rx_queue_", "_xdp_packets") {
            xdp_packets.insert(queue, value);
        } else if let Some(queue) = [
            ("rx_queue_", "_packets"),
            ("rx-", ".packets"),
            ("queue_", "_rx_cnt"),
            ("rx", "_packets"),
        ]
        .into_iter()
        .find_map(|(prefix, suffix)| queue_of(name, prefix, suffix))
        {
            packets.insert(queue, value);
        }
    }
    if packets.is_empty() {
        xdp_packets
    } else {
        packets
    }
}

/// The queue number of a counter called `prefix` NUMBER `suffix`.
fn queue_of(name: &str, prefix: &str, suffix: &str) -> Option<usize> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// `name`'s per-queue received packets now (in namespace `ns`, if given); `None` when
/// `ethtool -S` cannot be read or names no per-queue counter.
pub fn read(ns: Option<&str>, name: &str) -> Option<BTreeMap<usize, u64>> {
    let out = ufrag_testbed::netns::command_in(ns, "ethtool")
        .args(["-S", name])
        .output()
        .ok()?;
    let counts = rx_packets_by_queue(&String::from_utf8_lossy(&out.stdout));
    (out.status.success() && !counts.is_empty()).then_some(counts)
}

/// The packets a queue, on average, must have received for the spread to be judged.
pub const JUDGED: u64 = 100;

/// The flows a queue, on average, must have had for the spread to be judged: a flow's
/// packets all land on one queue, so the flows are the sample (with 16 a queue, two
/// queues fall below half their share by chance about once in two hundred runs).
pub const JUDGED_FLOWS: u32 = 16;

/// The flows the cost trials of a run with `flows` flows send from, at least (the first
/// [`crate::bench::load::target::SOCKET_FLOWS`]; a lab's live frames take every flow in
/// turn): what a spread is judged over.
pub fn sending_flows(flows: u32) -> u32 {
    flows.min(crate::bench::load::target::SOCKET_FLOWS)
}

/// Packets each of a NIC's first `queues` RX queues received over a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spread {
    /// By queue number.
    pub packets: Vec<u64>,
}

impl Spread {
    /// What queues `0..queues` received between two readings of [`read`].
    pub fn between(
        before: &BTreeMap<usize, u64>,
        after: &BTreeMap<usize, u64>,
        queues: usize,
    ) -> Spread {
        let count = |m: &BTreeMap<usize, u64>, q| m.get(&q).copied().unwrap_or(0);
        Spread {
            packets: (0..queues)
                .map(|q| count(after, q).saturating_sub(count(before, q)))
                .collect(),
        }
    }

    /// Adds `other`'s counts, queue by queue.
    pub fn add(&mut self, other: &Spread) {
        if self.packets.len() < other.packets.len() {
            self.packets.resize(other.packets.len(), 0);
        }
        for (sum, n) in self.packets.iter_mut().zip(&other.packets) {
            *sum += n;
        }
    }

    /// Each queue's share of every packet counted (empty when none was).
    pub fn shares(&self) -> Vec<f64> {
        let total: u64 = self.packets.iter().sum();
        if total == 0 {
            return vec![];
        }
        self.packets
            .iter()
            .map(|&n| n as f64 / total as f64)
            .collect()
    }

    /// Why a load of `flows` flows did not spread, or `None` when it did (or there is one
    /// queue, or fewer than [`JUDGED`] packets or [`JUDGED_FLOWS`] flows a queue to judge
    /// by: a stray ARP is no load, two flows no hash): one queue took more than twice its
    /// share, or (which two queues can only show this way) one took less than half of it.
    pub fn skew(&self, flows: u32) -> Option<String> {
        let shares = self.shares();
        let total: u64 = self.packets.iter().sum();
        let queues = shares.len();
        if queues < 2
            || total < JUDGED * queues as u64
            || (flows as usize) < JUDGED_FLOWS as usize * queues
        {
            return None;
        }
        let fair = 1.0 / shares.len() as f64;
        let by_share = |a: &(usize, &f64), b: &(usize, &f64)| a.1.total_cmp(b.1);
        let (busiest, most) = shares.iter().enumerate().max_by(by_share)?;
        let (quietest, least) = shares.iter().enumerate().min_by(by_share)?;
        if *most > 2.0 * fair {
            Some(format!(
                "queue {busiest} took {:.0} % of the packets, more than twice its share of {:.0} %",
                most * 100.0,
                fair * 100.0
            ))
        } else if *least < fair / 2.0 {
            Some(format!(
                "queue {quietest} took {:.0} % of the packets, less than half its share of {:.0} %",
                least * 100.0,
                fair * 100.0
            ))
        } else {
            None
        }
    }

    /// As the report's JSON records it, for a load of `flows` flows.
    pub fn to_json(&self, flows: u32) -> Value {
        json!({ "packets": self.packets, "skew": self.skew(flows) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_drivers_per_queue_counters_are_read() {
        let ice = "NIC statistics:\n     rx_packets: 900\n     rx_queue_0_packets: 500\n     \
                   rx_queue_0_bytes: 9\n     rx_queue_1_packets: 400\n";
        assert_eq!(
            rx_packets_by_queue(ice),
            BTreeMap::from([(0, 500), (1, 400)])
        );
        let mlx5 = "     rx_packets: 7\n     rx0_packets: 3\n     rx0_xdp_drop: 1\n     \
                    rx1_packets: 4\n     rx1_xsk_packets: 9\n";
        assert_eq!(rx_packets_by_queue(mlx5), BTreeMap::from([(0, 3), (1, 4)]));
        let i40e = "     rx-0.packets: 11\n     rx-0.bytes: 1\n     rx-1.packets: 12\n";
        assert_eq!(
            rx_packets_by_queue(i40e),
            BTreeMap::from([(0, 11), (1, 12)])
        );
        let ena = "     queue_0_rx_cnt: 5\n     queue_0_tx_cnt: 8\n     queue_1_rx_cnt: 6\n";
        assert_eq!(rx_packets_by_queue(ena), BTreeMap::from([(0, 5), (1, 6)]));
        let veth = "     peer_ifindex: 7\n     rx_queue_0_xdp_packets: 21\n     \
                    rx_queue_0_xdp_bytes: 99\n     rx_queue_1_xdp_packets: 22\n";
        assert_eq!(
            rx_packets_by_queue(veth),
            BTreeMap::from([(0, 21), (1, 22)])
        );
        assert!(rx_packets_by_queue("     rx_packets: 5\n     tx_packets: 5\n").is_empty());
    }

    #[test]
    fn a_queue_far_from_its_share_is_named() {
        let spread = |packets: &[u64]| Spread {
            packets: packets.to_vec(),
        };
        let flows = 1000;
        assert_eq!(spread(&[500, 480]).skew(flows), None);
        assert_eq!(
            spread(&[700, 300]).skew(flows),
            None,
            "within half its share"
        );
        let one_queue = spread(&[1000, 0]).skew(flows).expect("all on one queue");
        assert!(one_queue.contains("queue 1 took 0 %"), "{one_queue}");
        let four = spread(&[600, 150, 150, 100])
            .skew(flows)
            .expect("a hot queue");
        assert!(four.starts_with("queue 0 took 60 %"), "{four}");
        assert_eq!(spread(&[0, 0]).skew(flows), None, "nothing counted");
        assert_eq!(
            spread(&[3, 0]).skew(flows),
            None,
            "too few packets to judge"
        );
        assert_eq!(spread(&[1000, 0]).skew(2), None, "too few flows to judge");
        assert_eq!(spread(&[10]).skew(flows), None, "one queue");
    }

    #[test]
    fn a_window_counts_what_each_queue_received_in_it() {
        let before = BTreeMap::from([(0, 100), (1, 50), (2, 7)]);
        let after = BTreeMap::from([(0, 160), (1, 90), (2, 7)]);
        let mut spread = Spread::between(&before, &after, 2);
        assert_eq!(spread.packets, vec![60, 40]);
        spread.add(&Spread {
            packets: vec![40, 60],
        });
        assert_eq!(spread.shares(), vec![0.5, 0.5]);
    }
}
