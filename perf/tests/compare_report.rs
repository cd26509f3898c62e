//! `perf compare` end to end, small (root only: CI runs as root; without root the test
//! fails loudly rather than skips): the direct path, relay-mio sleeping and relay-mio
//! busy-polling on the netns testbed, with short trials, and what the report then says:
//! a latency CDF per row with its sample count (Markdown, JSON, SVG), the price of a
//! wake-up computed from the two relay-mio rows, and the cross-core hops of the placement;
//! and the same over IPv6.

use testkit::cargo_build::bin;
use testkit::testbed::tools::require_root;

/// What one `perf compare` run wrote: the Markdown report, its JSON and its SVG, and
/// its progress (stderr).
struct Written {
    report: String,
    json: serde_json::Value,
    svg: String,
    progress: String,
}

/// Runs `perf compare` with `args` and short trials (one search unless `args` say
/// `--repeats`, 0.3 s trials, a 1 s latency trial at 5,000 pps, at most `max_pps`), and
/// reads what it wrote.
/// One compare at a time: each pins its forwarder to CPU 1 and its generator to CPU 0,
/// so two at once would measure each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn compare(args: &[&str], max_pps: &str) -> Written {
    require_root();
    let _machine = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // compare starts the relay from its own directory.
    bin("relay-mio");
    let dir = std::env::temp_dir().join(format!(
        "ufrag-compare-{}-{}",
        std::process::id(),
        args.join("").len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("compare.md");
    let repeats: &[&str] = if args.contains(&"--repeats") {
        &[]
    } else {
        &["--repeats", "1"]
    };
    let run = std::process::Command::new(bin("perf"))
        .arg("compare")
        .args(args)
        .args(repeats)
        .args(["--trial", "300ms", "--max-pps", max_pps])
        .args(["--fixed-pps", "5000", "--latency-trial", "1s"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("perf compare runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "perf compare {args:?} failed: {stderr}"
    );
    let read = |ext: &str| std::fs::read_to_string(out.with_extension(ext)).unwrap();
    let written = Written {
        report: read("md"),
        json: serde_json::from_str(&read("json")).unwrap(),
        svg: read("svg"),
        progress: stderr.into_owned(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        unfilled_placeholder(&written.report),
        None,
        "a placeholder left unformatted in the report"
    );
    written
}

/// The first `{name}` in `text`: a format placeholder that was never filled.
fn unfilled_placeholder(text: &str) -> Option<&str> {
    text.match_indices('{').find_map(|(at, _)| {
        let rest = &text[at + 1..];
        let end = rest.find('}')?;
        let name = &rest[..end];
        (!name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .then(|| &text[at..at + end + 2])
    })
}

#[test]
fn a_small_compare_reports_latency_cdfs_and_prices_a_wake_up() {
    let Written {
        report, json, svg, ..
    } = compare(&["--only", "direct,mio,mio-busy", "--no-steer"], "40000");

    assert!(report.contains("## Latency at 5000 pps"), "{report}");
    for setup in ["direct path (no relay)", "relay-mio", "relay-mio busy"] {
        let row = json["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["setup"] == setup)
            .unwrap_or_else(|| panic!("a {setup} row: {json}"));
        // 5,000 pps for 1 s, one in 8 sampled.
        let samples = row["fixed"]["latency_samples"].as_u64().unwrap();
        assert!(
            (400..=700).contains(&samples),
            "{setup}: {samples} latency samples"
        );
        let cdf: Vec<f64> = row["fixed"]["latency_cdf_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["us"].as_f64().unwrap())
            .collect();
        assert_eq!(cdf.len(), perf::load::CDF_QUANTILES.len());
        assert!(
            cdf[0] > 0.0 && cdf.windows(2).all(|w| w[0] <= w[1]),
            "{setup}: a CDF rises: {cdf:?}"
        );
        assert!(row["busy_polls"] == (setup == "relay-mio busy"));
    }
    assert!(
        report.contains("relay-mio: median ") && report.contains("busy-polling (a wake-up costs"),
        "the wake-up is priced from the two relay-mio rows: {report}"
    );
    assert!(
        report.contains("two for a forwarder that sleeps"),
        "the hops of --no-steer: {report}"
    );
    assert_eq!(svg.matches("<polyline").count(), 3, "one CDF line per row");
}

/// `perf compare --ipv6`: the direct path, nftables and relay-mio over IPv6 (the live-frames
/// generator keeps each frame's UDP checksum right, or nothing would reach the relay's
/// socket), and the setups written for IPv4 named as not measured.
#[test]
fn an_ipv6_compare_forwards_through_nftables_and_relay_mio() {
    let Written { report, json, .. } =
        compare(&["--ipv6", "--only", "direct,nftables,nginx,mio"], "20000");
    assert!(report.contains("1000 flows, IPv6"), "{report}");
    assert!(report.contains("Not measured over IPv6: nginx"), "{report}");
    let rows = json["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["setup"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "direct path (no relay)",
            "nftables DNAT+SNAT (kernel)",
            "relay-mio"
        ]
    );
    for row in rows {
        // The first trial of the search, at 20k pps for 0.3 s: most of it arrived (no
        // rate is asserted: the point is that the path works over IPv6).
        let first = &row["runs"][0]["trials"][0];
        let (sent, received) = (
            first["sent"].as_u64().unwrap(),
            first["received"].as_u64().unwrap(),
        );
        assert!(
            sent > 0 && received * 10 >= sent * 9,
            "{}: {received} of {sent} arrived",
            row["setup"]
        );
        assert!(row["fixed"]["latency_samples"].as_u64().unwrap() > 0);
        // Each search carries the host's wake-up round trip read before it.
        let wake = &row["runs"][0]["host_wake_round_trip"];
        assert!(wake["p50_us"].as_f64() > Some(0.0), "{row}");
        assert_eq!(wake["cpus"], serde_json::json!([0, 1]), "{row}");
    }
    // The default placement took: the relay's receive work steered to the forwarder's core.
    let placement = json["environment"]["placement"].to_string();
    assert!(
        placement.contains("RPS of the relay's interface → CPU 1") && !placement.contains("FAILED"),
        "{placement}"
    );
    assert!(
        report.contains("## The host's state at each search")
            && report.contains("| relay-mio | 1 | "),
        "{report}"
    );
    let env_wake = &json["environment"]["wake_up_round_trip"];
    assert!(
        env_wake["cross_core"]["p50_us"].as_f64() > Some(0.0)
            && env_wake["same_core"]["p50_us"].as_f64() > Some(0.0),
        "{env_wake}"
    );
}

/// The in-kernel fast path's row beside the in-kernel reference relay and relay-mio: it
/// forwards the load (a loss-free maximum), and the verdict prices it against both.
#[test]
fn a_compare_prices_the_fast_path_against_the_in_kernel_reference() {
    bin("relay-afxdp");
    let Written { report, json, .. } = compare(
        &["--only", "direct,xdp-relay,mio,afxdp-fast-native"],
        "40000",
    );
    let row = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["setup"] == "relay-afxdp fast path native")
        .unwrap_or_else(|| panic!("a fast path row: {json}"));
    assert!(
        report.contains("relay-afxdp fast path native costs **"),
        "the verdict prices the fast path: {report}"
    );
    assert!(
        report.contains("the in-kernel reference relay's"),
        "against the reference: {report}"
    );
    assert!(
        row["max_loss_free_pps"]["median"].as_f64() > Some(0.0),
        "the fast path had a loss-free trial: {row}"
    );
}

/// Our AF_XDP layer and the `xdp` crate's under the same worker, searched in interleaved
/// rounds: the rounds alternate the two setups, each row gathers one search per round,
/// the report says so, and the verdict compares the pair.
#[test]
fn an_interleaved_compare_alternates_the_two_af_xdp_layers_and_compares_them() {
    bin("relay-afxdp");
    let Written {
        report,
        json,
        progress,
        ..
    } = compare(
        &[
            "--interleave",
            "--repeats",
            "2",
            "--only",
            "afxdp-native-wakeup,afxdp-crate-native-wakeup",
        ],
        "40000",
    );
    let order: Vec<&str> = progress
        .lines()
        .filter(|l| l.starts_with("round "))
        .collect();
    assert_eq!(
        order,
        [
            "round 1 of 2: relay-afxdp native wakeup",
            "round 1 of 2: relay-afxdp on the xdp crate native wakeup",
            "round 2 of 2: relay-afxdp native wakeup",
            "round 2 of 2: relay-afxdp on the xdp crate native wakeup",
        ],
        "{progress}"
    );
    for row in json["rows"].as_array().unwrap() {
        assert_eq!(
            row["runs"].as_array().map(Vec::len),
            Some(2),
            "one search per round: {row}"
        );
    }
    assert!(report.contains("2 interleaved rounds"), "{report}");
    assert!(
        report.contains("AF_XDP layer (native wakeup): the `xdp` crate costs"),
        "the verdict compares the two layers: {report}"
    );
}

/// A run stopped by SIGINT (by hand, or a CI timeout's SIGTERM) mid-search deletes its
/// testbed's namespaces and exits 130.
#[test]
fn an_interrupted_compare_deletes_its_testbed() {
    use std::io::{BufRead, BufReader};
    require_root();
    let _machine = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    bin("relay-mio");
    let out = std::env::temp_dir().join(format!("ufrag-compare-int-{}.md", std::process::id()));
    let mut run = std::process::Command::new(bin("perf"))
        .args(["compare", "--only", "mio", "--repeats", "1"])
        .args(["--trial", "2s", "--max-pps", "20000"])
        .arg("--out")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("perf compare starts");
    let prefix = format!("ufrag-tb-{}-", run.id());
    let namespaces = || {
        let list = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip netns list");
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .count()
    };
    // Wait until the search has begun (the relay runs), bounded by the progress lines.
    let mut progress = BufReader::new(run.stderr.take().unwrap()).lines();
    let searching = progress
        .by_ref()
        .take(200)
        .map_while(Result::ok)
        .any(|line| line.starts_with("measuring relay-mio"));
    assert!(searching, "the search never began");
    assert!(namespaces() > 0, "the testbed is up while it searches");
    send_signal(run.id(), "INT");
    let status = run.wait().expect("perf compare ends");
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert_eq!(namespaces(), 0, "no namespace of the run is left");
    let _ = std::fs::remove_file(&out);
}

/// Sends SIG`signal` to `pid` with kill(1).
fn send_signal(pid: u32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
}
