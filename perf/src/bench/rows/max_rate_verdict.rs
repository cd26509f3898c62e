//! The verdict at the maximum rate: relay-mio against the best relay-afxdp row, the
//! fast path against the in-kernel reference, each AF_XDP layer against its twin, and
//! relay-mio against the alternatives a user would pick.

use std::fmt::Write as _;

use super::Row;

/// Audio packets per second one voice session costs a relay: 50 each way.
pub const VOICE_SESSION_PPS: f64 = 100.0;

/// The name prefix of the rows that run relay-afxdp's worker on the `xdp` crate's AF_XDP
/// layer instead of ours (`--xsk-layer xdp-crate`).
pub const ON_XDP_CRATE: &str = "relay-afxdp on the xdp crate ";

/// One line per AF_XDP layer comparison: each row on the `xdp` crate against the row with
/// the same worker and modes on ours. Whether to adopt the crate is read from here.
fn layer_verdicts(rows: &[Row]) -> String {
    let mut out = String::new();
    for theirs in rows.iter().filter(|r| r.setup.starts_with(ON_XDP_CRATE)) {
        let modes = &theirs.setup[ON_XDP_CRATE.len()..];
        let ours_name = format!("relay-afxdp {modes}");
        let Some(ours) = rows.iter().find(|r| r.setup == ours_name) else {
            continue;
        };
        let (Some((them, them_min, them_max)), Some((us, us_min, us_max))) =
            (theirs.forwarder_us(), ours.forwarder_us())
        else {
            let _ = writeln!(
                out,
                "- AF_XDP layer ({modes}): one of the two rows had no loss-free trial: no comparison."
            );
            continue;
        };
        let reading = if them_max >= us_min && us_max >= them_min {
            "the ranges overlap: no measurable difference on this host".to_string()
        } else if them < us {
            format!(
                "the crate is **{:.0} %** cheaper",
                (1.0 - them / us) * 100.0
            )
        } else {
            format!("ours is **{:.0} %** cheaper", (1.0 - us / them) * 100.0)
        };
        let _ = writeln!(
            out,
            "- AF_XDP layer ({modes}): the `xdp` crate costs **{them:.2} µs** [{them_min:.2}–{them_max:.2}] per packet under the same worker, ours **{us:.2} µs** [{us_min:.2}–{us_max:.2}]: {reading}."
        );
    }
    out
}

/// The verdict, computed from the rows: relay-mio against the best relay-afxdp row (by
/// forwarder µs per packet), and each against the alternatives a user would pick.
pub fn verdict(rows: &[Row]) -> String {
    let mut out = String::from("## At the maximum rate\n\n");
    if rows.is_empty() {
        out.push_str("No maximum-rate search ran (`--no-search`, or no round of searches): no verdict at the maximum rate.\n");
        return out;
    }
    verdict_against_relay_mio(rows, &mut out);
    out.push_str(&layer_verdicts(rows));
    out
}

/// The verdict's lines that price each row against relay-mio (none without it).
fn verdict_against_relay_mio(rows: &[Row], out: &mut String) {
    let find = |name: &str| rows.iter().find(|r| r.setup == name);
    let cost = |r: &Row| r.forwarder_us().map(|v| v.0);
    // relay-mio's row (on loopback: its first, one-worker row).
    let Some(mio) = rows
        .iter()
        .find(|r| r.setup == "relay-mio" || r.setup.starts_with("relay-mio,"))
    else {
        out.push_str("relay-mio was not measured: no verdict against it.\n");
        return;
    };
    let Some(mio_us) = cost(mio) else {
        out.push_str("relay-mio had no loss-free trial: no verdict against it.\n");
        return;
    };
    let sessions = |us: f64| 1e6 / us / VOICE_SESSION_PPS;
    let _ = writeln!(
        out,
        "- relay-mio costs **{mio_us:.2} µs** of its core per packet: about **{:.0} voice sessions per core** at {VOICE_SESSION_PPS:.0} packets per second each (50 each way).",
        sessions(mio_us)
    );
    let is_fast_path = |r: &Row| r.setup.starts_with("relay-afxdp fast path");
    let on_crate = |r: &Row| r.setup.starts_with(ON_XDP_CRATE);
    let afxdp = rows
        .iter()
        .filter(|r| {
            r.setup.starts_with("relay-afxdp") && !r.busy_polls && !is_fast_path(r) && !on_crate(r)
        })
        .filter_map(|r| r.forwarder_us().map(|c| (r, c)))
        .min_by(|a, b| a.1.0.total_cmp(&b.1.0));
    match afxdp {
        Some((row, (us, _, us_max))) => {
            let saving = 1.0 - us / mio_us;
            let mio_min = mio.forwarder_us().map_or(mio_us, |v| v.1);
            let overlap = if us_max >= mio_min {
                ", but the two ranges overlap: these searches cannot tell them apart"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "- {} costs **{us:.2} µs** of its core per packet at its maximum: **{:.0} %** {} than relay-mio ({:.0} sessions per core){overlap}. Whether that warrants kernel bypass is the fixed-load verdict's to say, not one search's.",
                row.setup,
                saving.abs() * 100.0,
                if saving >= 0.0 { "less" } else { "more" },
                sessions(us),
            );
        }
        None => out
            .push_str("- relay-afxdp (wakeup mode) was not measured or had no loss-free trial.\n"),
    }
    // The fast path is not kernel bypass but the kernel doing the relay's work: priced
    // against the in-kernel reference relay (goal ≤ 1.2× its cost) and relay-mio (≥ 2×).
    let reference_us = find("in-kernel XDP rewrite relay").and_then(cost);
    for row in rows.iter().filter(|r| is_fast_path(r)) {
        let Some(us) = cost(row) else {
            let _ = writeln!(out, "- {} had no loss-free trial.", row.setup);
            continue;
        };
        let against_reference = reference_us.map_or(String::new(), |reference| {
            let ratio = us / reference;
            format!(
                "{ratio:.2}× the in-kernel reference relay's {reference:.2} µs (goal ≤ 1.2×: {}), ",
                if ratio <= 1.2 { "met" } else { "not met" }
            )
        });
        let per_core = mio_us / us;
        let _ = writeln!(
            out,
            "- {} costs **{us:.2} µs** per packet: {against_reference}relay-mio spends {per_core:.2}× that (goal ≥ 2×: {}); {:.0} sessions per core.",
            row.setup,
            if per_core >= 2.0 { "met" } else { "not met" },
            sessions(us),
        );
    }
    let mio_pps = mio.max_pps().map(|v| v.0);
    for (alt, goal) in [
        ("nginx stream proxy, 1 worker", 2.5),
        ("naive recv_from/send_to relay", 1.2),
    ] {
        if let (Some(row), Some(mio_pps)) = (find(alt), mio_pps)
            && let Some((alt_pps, _, _)) = row.max_pps()
        {
            let ratio = mio_pps / alt_pps;
            let _ = writeln!(
                out,
                "- relay-mio carries **{ratio:.2}×** the {alt} (goal ≥ {goal}×: {}).",
                if ratio >= goal { "met" } else { "not met" }
            );
        }
    }
    for reference in ["nftables DNAT+SNAT (kernel)", "in-kernel XDP rewrite relay"] {
        if let (Some(row), Some(us)) = (find(reference), find(reference).and_then(cost)) {
            if us < 0.5 {
                let _ = writeln!(
                    out,
                    "- {} ran in the kernel's softirq on the tools' core (its work was not steered to the forwarder core: run without `--no-steer`), so its cost is not comparable here.",
                    row.setup
                );
                continue;
            }
            let _ = writeln!(
                out,
                "- {} costs {us:.2} µs per packet: relay-mio spends {:.1}× that.",
                row.setup,
                mio_us / us
            );
        }
    }
    let fastest = rows
        .iter()
        .filter(|r| !r.setup.starts_with("direct"))
        .filter_map(|r| r.max_pps().map(|v| v.0))
        .fold(0.0, f64::max);
    if let Some(direct) = find("direct path (no relay)").and_then(Row::max_pps) {
        let _ = writeln!(
            out,
            "- The direct path carried {:.0}k pps, {:.1}× the fastest forwarder row ({:.0}k): {}.",
            direct.0 / 1e3,
            direct.0 / fastest.max(1.0),
            fastest / 1e3,
            if direct.0 >= 2.0 * fastest {
                "the tools were not the limit of any row"
            } else {
                "the tools may limit the fastest rows (see each row's limit)"
            }
        );
    }
    let tool_limited: Vec<&str> = rows
        .iter()
        .filter(|r| !r.setup.starts_with("direct") && !r.setup_limited())
        .map(|r| r.setup.as_str())
        .collect();
    if !tool_limited.is_empty() {
        let _ = writeln!(
            out,
            "- Not limited by the setup itself in every search (see \"limit\"): {}.",
            tool_limited.join(", ")
        );
    }
}
