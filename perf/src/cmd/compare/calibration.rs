//! What the hardware can do on the relay host, beside what each setup did: the link's
//! line rate at the run's datagram size (from the NIC's speed), the rate its queues
//! receive and drop at in XDP (`XDP_DROP`, the `xdp-drop` calibration row, counted on the
//! relay's interface) and the in-kernel rewrite relay's (`XDP_TX` on the same queues, the
//! kernel and NIC alone), with each setup's maximum rate as a fraction of each. A setup near either is at the hardware's
//! limit, not its own; one far below has room a faster design could take.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::max_rate::RateRow;
use super::setups::name_of;

/// The setup whose rate is the `XDP_TX` calibration: rewrite and transmit in XDP.
pub const XDP_TX: &str = "xdp-relay";

/// The setup whose rate is the `XDP_DROP` calibration: count and drop in XDP.
pub const XDP_DROP: &str = "xdp-drop";

/// Bytes one UDP datagram of `payload` bytes takes on an Ethernet wire: its frame (at
/// least 64 bytes with the FCS) with the preamble and the inter-frame gap.
pub fn wire_bytes(payload: usize, ipv6: bool) -> usize {
    let frame = 14 + if ipv6 { 40 } else { 20 } + 8 + payload + 4;
    frame.max(64) + 20
}

/// Datagrams per second a link of `speed_mbps` carries at `wire_bytes` each.
pub fn line_rate_pps(speed_mbps: f64, wire_bytes: usize) -> f64 {
    speed_mbps * 1e6 / (8.0 * wire_bytes as f64)
}

/// The run's calibration.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    /// The link's line rate, pps, and the speed it came from, Mb/s (`None` on veth,
    /// which has no wire, or a NIC that reports no speed).
    pub line: Option<(f64, f64)>,
    /// Bytes per datagram on the wire.
    pub wire_bytes: usize,
    /// The in-kernel rewrite relay's median PDR over all its queues, pps (`None` when it
    /// was not measured).
    pub xdp_tx: Option<f64>,
    /// The `XDP_DROP` row's median PDR over all its queues, pps (`None` when not measured).
    pub xdp_drop: Option<f64>,
}

/// A row's median PDR over all its cores, pps.
fn total_pdr(row: &RateRow) -> Option<f64> {
    row.pdr.map(|p| p.median * row.cores as f64)
}

impl Calibration {
    /// From the searched `rates`, the relay NIC's facts in `environment` (a lab's
    /// `nic.speed_mbps`), and the datagrams' `size` and family.
    pub fn of(rates: &[RateRow], environment: &Value, size: usize, ipv6: bool) -> Calibration {
        let wire_bytes = wire_bytes(size, ipv6);
        // A veth reports a speed it does not have: it has no wire.
        let nic = &environment["nic"];
        let speed = nic["speed_mbps"]
            .as_f64()
            .filter(|s| *s > 0.0 && nic["driver"] != "veth");
        let rate_of = |key: &str| {
            let name = name_of(key);
            rates.iter().find(|r| r.setup == name).and_then(total_pdr)
        };
        Calibration {
            line: speed.map(|s| (line_rate_pps(s, wire_bytes), s)),
            wire_bytes,
            xdp_tx: rate_of(XDP_TX),
            xdp_drop: rate_of(XDP_DROP),
        }
    }

    /// Each row's PDR as a fraction of the line rate, of `XDP_DROP` and of `XDP_TX`.
    fn fractions(&self, row: &RateRow) -> [Option<f64>; 3] {
        let pdr = total_pdr(row);
        [self.line.map(|(line, _)| line), self.xdp_drop, self.xdp_tx].map(|limit| {
            pdr.zip(limit.filter(|l| *l > 0.0))
                .map(|(p, limit)| p / limit)
        })
    }

    /// The report's section.
    pub fn markdown(&self, rates: &[RateRow]) -> String {
        let line = match self.line {
            Some((pps, speed)) => format!(
                "the link's line rate is {:.0} kpps ({speed:.0} Mb/s at {} bytes a datagram \
                 on the wire)",
                pps / 1e3,
                self.wire_bytes
            ),
            None => "no line rate (the interface reports no speed, or is a veth: no wire)".into(),
        };
        let drop = match self.xdp_drop {
            Some(pps) => format!(
                "its queues received and dropped {:.0} kpps in XDP (`XDP_DROP`)",
                pps / 1e3
            ),
            None => format!(
                "`XDP_DROP` was not measured (add `{XDP_DROP}` to `--only` for what the \
                 queues receive at most)"
            ),
        };
        let tx = match self.xdp_tx {
            Some(pps) => format!(
                "the in-kernel rewrite relay (`XDP_TX` on the same queues: what the kernel \
                 and NIC alone do) reached {:.0} kpps",
                pps / 1e3
            ),
            None => format!(
                "`XDP_TX` was not measured (add `{XDP_TX}` to `--only` for the kernel's own \
                 rate)"
            ),
        };
        let mut out = format!(
            "\n## Calibration: what the hardware can do\n\nOn the relay host {line}; {drop}; {tx}. \
             Each setup's median PDR over all its cores as a fraction of each: near 1 the \
             hardware, not the setup, is the limit (or the generator, where the search's \
             `limit` says so).\n\n| setup | PDR kpps, all cores | of the line rate | of \
             `XDP_DROP` | of `XDP_TX` |\n|---|---:|---:|---:|---:|\n"
        );
        let share = |f: Option<f64>| f.map_or("–".to_string(), |f| format!("{:.0} %", f * 100.0));
        for row in rates {
            let [of_line, of_drop, of_tx] = self.fractions(row);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                row.setup,
                total_pdr(row).map_or("–".to_string(), |p| format!("{:.0}", p / 1e3)),
                share(of_line),
                share(of_drop),
                share(of_tx)
            );
        }
        out
    }

    /// As the report's JSON records it.
    pub fn json(&self, rates: &[RateRow]) -> Value {
        json!({
            "line_rate_pps": self.line.map(|l| l.0),
            "speed_mbps": self.line.map(|l| l.1),
            "wire_bytes": self.wire_bytes,
            "xdp_tx_pdr_pps": self.xdp_tx,
            "xdp_drop_pdr_pps": self.xdp_drop,
            "rows": rates.iter().map(|r| {
                let [of_line, of_drop, of_tx] = self.fractions(r);
                json!({
                    "setup": r.setup,
                    "pdr_pps": total_pdr(r),
                    "of_line_rate": of_line,
                    "of_xdp_drop": of_drop,
                    "of_xdp_tx": of_tx,
                })
            }).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::Interval;

    fn row(setup: &str, cores: usize, pdr_per_core: f64) -> RateRow {
        RateRow {
            setup: setup.into(),
            cores,
            ndr: None,
            pdr: Some(Interval {
                median: pdr_per_core,
                low: pdr_per_core,
                high: pdr_per_core,
                confidence: 0.9,
                samples: 5,
            }),
            found: (0, 5),
            searches: 5,
            final_trial: None,
        }
    }

    #[test]
    fn the_wire_carries_small_datagrams_in_minimum_frames() {
        // 64-byte minimum frame + 20: 14.88 Mpps on 10 Gb/s, the figure every NIC quotes.
        assert_eq!(wire_bytes(18, false), 84);
        assert!((line_rate_pps(10_000.0, 84) - 14_880_952.4).abs() < 1.0);
        // 200-byte payloads over IPv4: 14 + 20 + 8 + 200 + 4 + 20 on the wire.
        assert_eq!(wire_bytes(200, false), 266);
        assert_eq!(wire_bytes(200, true), 286);
    }

    #[test]
    fn each_row_is_a_fraction_of_the_line_rate_of_xdp_drop_and_of_xdp_tx() {
        let rates = [
            row(&name_of(XDP_TX), 1, 2_000_000.0),
            row(&name_of(XDP_DROP), 2, 2_000_000.0),
            row("relay-afxdp native wakeup", 2, 500_000.0),
        ];
        let environment = json!({ "nic": { "speed_mbps": 10_000 } });
        let calibration = Calibration::of(&rates, &environment, 18, false);
        assert_eq!(calibration.xdp_tx, Some(2_000_000.0));
        assert_eq!(calibration.xdp_drop, Some(4_000_000.0));
        let [of_line, of_drop, of_tx] = calibration.fractions(&rates[2]);
        assert!((of_tx.unwrap() - 0.5).abs() < 1e-12);
        assert!((of_drop.unwrap() - 0.25).abs() < 1e-12);
        assert!((of_line.unwrap() - 1e6 / 14_880_952.38).abs() < 1e-6);
        let md = calibration.markdown(&rates);
        assert!(md.contains("line rate is 14881 kpps"), "{md}");
        assert!(md.contains("dropped 4000 kpps in XDP"), "{md}");
        assert!(
            md.contains("| relay-afxdp native wakeup | 1000 | 7 % | 25 % | 50 % |"),
            "{md}"
        );
        // The testbed: no NIC speed, no line rate; no reference rows, no XDP_TX or DROP.
        let bare = Calibration::of(&rates[2..], &json!({}), 18, false);
        assert_eq!((bare.line, bare.xdp_tx, bare.xdp_drop), (None, None, None));
        let veth = json!({ "nic": { "speed_mbps": 10_000, "driver": "veth" } });
        assert_eq!(Calibration::of(&rates, &veth, 18, false).line, None);
        assert!(bare.markdown(&rates[2..]).contains("| 1000 | – | – | – |"));
    }
}
