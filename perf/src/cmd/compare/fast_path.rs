//! What relay-afxdp's in-kernel fast path (`--fast-path xdp`: a proven flow's datagrams
//! forwarded by the XDP program itself, by `XDP_TX`) carried in a round: its counters on
//! the relay's `/metrics`, read around the cost trials, and the flows it carried. A
//! fast-path row is a measurement of the fast path only if the fast path carried the
//! load; otherwise it measured the AF_XDP workers behind it, and these counters say so.

use std::fmt::Write as _;

use super::carried::Carried;
use super::relay_host::RelayHost;
use super::sample::Sample;
use super::setups::{Kind, SETUPS, Setup, name_of};

/// Whether `setup` runs relay-afxdp with its in-kernel fast path.
pub fn has_fast_path(setup: &Setup) -> bool {
    matches!(setup.kind, Kind::Relay { flags, .. }
        if flags.windows(2).any(|pair| pair == ["--fast-path", "xdp"]))
}

/// `setup`'s fast-path totals since it started, read from its `/metrics` on `relay`'s
/// host; `None` for a setup without a fast path (or, said, one whose metrics do not
/// answer).
pub fn read(relay: &RelayHost, setup: &Setup) -> Option<Carried> {
    if !has_fast_path(setup) {
        return None;
    }
    match ufrag_testbed::http::get(relay.ns(), relay.metrics, "/metrics") {
        Some((200, text)) => Some(Carried::from_metrics(&text)),
        _ => {
            crate::say!(
                "  WARNING: {}'s /metrics did not answer: what its fast path carried is unknown",
                setup.name
            );
            None
        }
    }
}

/// Datagrams the sink received over `sample`'s cost trials.
fn received(sample: &Sample) -> u64 {
    sample.loads.iter().map(|t| t.received).sum()
}

/// `sample`'s fast-path figures for the report's JSON (`null` without a fast path).
pub fn json(sample: &Sample) -> serde_json::Value {
    sample.fast_path.map_or(serde_json::Value::Null, |carried| {
        serde_json::json!({
            "packets": carried.packets,
            "share_of_received": carried.share_of(received(sample)),
            "flows": carried.flows,
            "left_to_workers": carried.left_to_workers,
            "flows_not_installed": carried.flows_not_installed,
        })
    })
}

/// The cost section's table of what each fast-path row's fast path carried over the
/// rounds (nothing when no row has one); `flows_made` flows were made before the trials.
pub fn markdown(samples: &[Sample], flows_made: u32) -> String {
    let mut keys: Vec<&str> = vec![];
    for s in samples.iter().filter(|s| s.fast_path.is_some()) {
        if !keys.contains(&s.setup.as_str()) {
            keys.push(&s.setup);
        }
    }
    if keys.is_empty() {
        return String::new();
    }
    // The table's order, as the other tables have it (not the first round's random one).
    keys.sort_by_key(|key| SETUPS.iter().position(|s| s.key == *key));
    let mut out = format!(
        "\n### What the in-kernel fast path carried\n\nrelay-afxdp's fast path forwards a flow \
         in the kernel once the flow is proven (DTLS or media both ways). Before the trials \
         each of the {flows_made} flows sends media, gets one datagram back from the \
         transceiver and sends once more, as a session's first exchange does. Share: of the \
         datagrams the sink received in a round's cost trials, those the fast path forwarded \
         itself, past every worker (the relay's `/metrics`); flows: those whose datagram \
         after the proof it forwarded. Median [lowest–highest] over the rounds. A share far \
         below 100 % means the row priced the AF_XDP workers behind the fast path.\n\n\
         | setup | share of received | flows carried | left to the workers | rounds |\n\
         |---|---:|---:|---:|---:|\n"
    );
    for key in keys {
        let carried: Vec<(&Sample, Carried)> = samples
            .iter()
            .filter(|s| s.setup == key)
            .filter_map(|s| Some((s, s.fast_path?)))
            .collect();
        let shares: Vec<f64> = carried
            .iter()
            .filter_map(|(s, c)| c.share_of(received(s)))
            .map(|share| share * 100.0)
            .collect();
        let flows: Vec<f64> = carried.iter().map(|(_, c)| c.flows as f64).collect();
        let left: Vec<f64> = carried
            .iter()
            .map(|(_, c)| c.left_to_workers as f64)
            .collect();
        let spread = |values: &[f64], digits: usize, unit: &str| {
            crate::bench::stats::spread(values).map_or("–".into(), |(median, low, high)| {
                format!("{median:.digits$}{unit} [{low:.digits$}–{high:.digits$}]")
            })
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} of {flows_made} | {} | {} |",
            name_of(key),
            spread(&shares, 1, " %"),
            spread(&flows, 0, ""),
            spread(&left, 0, ""),
            carried.len()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::compare::sample::LoadTrial;
    use crate::cmd::compare::setups::by_key;

    fn sample(setup: &str, round: usize, received: u64, fast: Option<Carried>) -> Sample {
        let trial = LoadTrial {
            offered_pps: received,
            sent: received,
            received,
            busy: 0.1,
            wall: 1.0,
            sent_pps: None,
        };
        Sample {
            loads: vec![trial],
            fast_path: fast,
            ..Sample::for_tests(setup, round, true)
        }
    }

    fn carried(packets: u64, flows: u64) -> Carried {
        Carried {
            packets,
            ..Carried::default()
        }
        .with_flows(flows)
    }

    #[test]
    fn only_the_fast_path_rows_have_one() {
        assert!(has_fast_path(by_key("afxdp-fast-skb").unwrap()));
        assert!(has_fast_path(by_key("afxdp-fast-native").unwrap()));
        for key in ["afxdp-skb-wakeup", "afxdp-native-busy", "mio", "xdp-relay"] {
            assert!(!has_fast_path(by_key(key).unwrap()), "{key}");
        }
    }

    #[test]
    fn the_relays_counters_are_read_by_direction_and_summed_over_reasons() {
        let text = "\
ufrag_relay_fast_path_forwarded_datagrams_total{direction=\"in\"} 900
ufrag_relay_fast_path_forwarded_datagrams_total{direction=\"out\"} 40
ufrag_relay_fast_path_forwarded_bytes_total{direction=\"in\"} 123456
ufrag_relay_fast_path_left_datagrams_total{reason=\"stun\"} 7
ufrag_relay_fast_path_left_datagrams_total{reason=\"miss\"} 3
ufrag_relay_fast_path_flows_not_installed_total 2
";
        let read = Carried::from_metrics(text);
        assert_eq!(
            read,
            Carried {
                packets: 900,
                returned: 40,
                left_to_workers: 10,
                flows_not_installed: 2,
                flows: 0,
            }
        );
        let later = Carried {
            packets: 1900,
            ..read
        }
        .with_flows(250);
        let window = later.since(&read);
        assert_eq!(
            (window.packets, window.returned, window.flows),
            (1000, 0, 250)
        );
        assert_eq!(window.share_of(2000), Some(0.5));
        assert_eq!(window.share_of(0), None);
    }

    #[test]
    fn the_table_gives_each_fast_path_rows_median_share_and_flows() {
        let samples = [
            sample("afxdp-fast-native", 1, 1000, Some(carried(1000, 1000))),
            sample("afxdp-fast-skb", 1, 1000, Some(carried(990, 1000))),
            sample("afxdp-fast-skb", 2, 1000, Some(carried(500, 600))),
            sample("afxdp-fast-skb", 3, 1000, Some(carried(1000, 1000))),
            sample("mio", 1, 1000, None),
        ];
        let table = markdown(&samples, 1000);
        assert!(
            table.contains(
                "| relay-afxdp fast path skb | 99.0 % [50.0–100.0] | 1000 [600–1000] of 1000 |"
            ),
            "{table}"
        );
        assert!(!table.contains("relay-mio"), "{table}");
        assert!(
            table.find("fast path skb") < table.find("fast path native"),
            "in the setups' order: {table}"
        );
        assert_eq!(markdown(&samples[4..], 1000), "", "no fast path, no table");
        assert_eq!(json(&samples[4]), serde_json::Value::Null);
        let figures = json(&samples[2]);
        assert_eq!(figures["share_of_received"], 0.5);
        assert_eq!(figures["flows"], 600);
    }
}
