//! Lab mode end to end on two network namespaces standing in for two hosts, joined by one
//! veth pair with two queues a side (root only: CI runs as root; without root the test
//! fails loudly rather than skips): the agent runs in the "tools host", `perf compare
//! --lab` in the "relay host". The run gives relay-mio as many workers as relay-afxdp has
//! queues and says each row's cores, counts what each queue received, leaves out the
//! trials during which the interface's steering changed, puts the interface's queues
//! back, and writes a report of the same shape as the testbed's. A second run with every
//! flow on one queue flags the skew, and with `--relay-cpus 1` counts that CPU alone,
//! naming the receive softirqs that ran on the other. A third leaves out zero-copy (veth
//! refuses it), naming the refusal, and searches downlink through relay-mio where the
//! kernel sends live frames; both ways on one agent interface is refused. The agent's
//! own test checks its token handshake and what it refuses to send.

use std::collections::BTreeSet;
use std::process::Command;

use ufrag_perf::bench::load::target::ReturnPath;
use ufrag_perf::cmd::lab::protocol::{Channel, Prepare, Purpose, Request};
use ufrag_perf::cmd::lab::token::{TOKEN_ENV, Token, prove};
use ufrag_testkit::OwnedChild;
use ufrag_testkit::cargo_build::bin;
use ufrag_testkit::testbed::tools::require_root;

/// Two namespaces and the veth pair between them, deleted when dropped.
struct TwoHosts {
    relay_ns: String,
    tools_ns: String,
    relay_if: String,
    tools_if: String,
}

/// The token both halves of the tests' labs are given.
const LAB_TOKEN: &str = "lab-token-0123456789abcdef0123456789";

const RELAY_IP: &str = "10.89.0.1";
const TOOLS_IP: &str = "10.89.0.2";
/// The tools host's client addresses: its first of each family and the one after it
/// (`ufrag-perf agent --client-addresses 2`).
const CLIENT_ADDRESSES: [&str; 2] = [TOOLS_IP, "10.89.0.3"];
const RELAY_IP6: &str = "fd89::1";
const CLIENT_ADDRESSES6: [&str; 2] = ["fd89::2", "fd89::3"];

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TwoHosts {
    fn up() -> TwoHosts {
        let pid = std::process::id();
        let hosts = TwoHosts {
            relay_ns: format!("ufrag-lab-{pid}-relay"),
            tools_ns: format!("ufrag-lab-{pid}-tools"),
            relay_if: format!("ul{}r", pid % 1_000_000),
            tools_if: format!("ul{}t", pid % 1_000_000),
        };
        ip(&["netns", "add", &hosts.relay_ns]);
        ip(&["netns", "add", &hosts.tools_ns]);
        ip(&[
            "link",
            "add",
            &hosts.relay_if,
            "netns",
            &hosts.relay_ns,
            "type",
            "veth",
            "peer",
            "name",
            &hosts.tools_if,
            "netns",
            &hosts.tools_ns,
        ]);
        for (ns, ifname, addr) in [
            (&hosts.relay_ns, &hosts.relay_if, RELAY_IP),
            (&hosts.tools_ns, &hosts.tools_if, TOOLS_IP),
        ] {
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                ifname,
            ]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", ifname, "up"]);
        }
        ip(&[
            "-n",
            &hosts.tools_ns,
            "addr",
            "add",
            &format!("{}/24", CLIENT_ADDRESSES[1]),
            "dev",
            &hosts.tools_if,
        ]);
        // IPv6 without duplicate address detection, so each address is usable at once.
        for (ns, ifname, addr) in [
            (&hosts.relay_ns, &hosts.relay_if, RELAY_IP6),
            (&hosts.tools_ns, &hosts.tools_if, CLIENT_ADDRESSES6[0]),
            (&hosts.tools_ns, &hosts.tools_if, CLIENT_ADDRESSES6[1]),
        ] {
            ip(&[
                "-n",
                ns,
                "-6",
                "addr",
                "add",
                &format!("{addr}/64"),
                "dev",
                ifname,
                "nodad",
            ]);
        }
        // The wire: a veth delivers the tools host's XDP_TX live frames only to a peer
        // with NAPI, which GRO turns on (a NIC needs nothing); UDP from sockets takes the
        // NAPI path (where veth counts each RX queue's packets, as a NIC always does) only
        // when the receiver also forwards UDP GRO.
        let gro = Command::new("ip")
            .args(["netns", "exec", &hosts.relay_ns, "ethtool", "-K"])
            .arg(&hosts.relay_if)
            .args(["gro", "on", "rx-udp-gro-forwarding", "on"])
            .status()
            .expect("ethtool runs (scripts/test.sh installs it)");
        assert!(gro.success(), "ethtool -K gro on rx-udp-gro-forwarding on");
        // A veth takes an XDP program only while its RX queues are at least its peer's TX
        // queues: the tools host's sink needs two while the relay host runs two
        // (`--queues 2`).
        hosts.tools_tx_queues(2);
        hosts
    }

    /// Sets the tools host's TX queues, which on a veth are the relay host's RX queues
    /// its packets land on: two spread the flows by their hash, one puts all on one.
    fn tools_tx_queues(&self, n: usize) {
        let queues = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.tools_ns,
                "ethtool",
                "-L",
                &self.tools_if,
            ])
            .args(["rx", "2", "tx", &n.to_string()])
            .status()
            .expect("ethtool runs");
        assert!(queues.success(), "ethtool -L rx 2 tx {n}");
    }

    /// Starts the agent in the tools host, for one compare.
    fn agent(&self) -> OwnedChild {
        let mut agent_command = Command::new("ip");
        agent_command
            .args(["netns", "exec", &self.tools_ns])
            .arg(bin("ufrag-perf"))
            .args(["agent", "--once", "--listen", &format!("{TOOLS_IP}:7700")])
            .args(["--interface", &self.tools_if, "--cpus", "0"])
            .args(["--client-addresses", "2"])
            .env(TOKEN_ENV, LAB_TOKEN);
        let agent = OwnedChild::spawn(&mut agent_command).expect("the agent starts");
        std::thread::sleep(std::time::Duration::from_millis(300));
        agent
    }

    /// Runs `perf compare --lab` in the relay host, on its interface set to two queues,
    /// with `extra` and [`SHORT`], against a fresh `--once` agent in the tools host, handing
    /// each progress line to `on_line`; checks the agent left after that one compare. The
    /// report, JSON and progress.
    fn lab_compare(
        &self,
        extra: &[&str],
        out: &std::path::Path,
        on_line: &mut dyn FnMut(&str),
    ) -> (String, serde_json::Value, String) {
        let mut agent = self.agent();
        let agent_addr = format!("{TOOLS_IP}:7700");
        let mut args = vec![
            "--lab",
            &agent_addr,
            "--interface",
            &self.relay_if,
            "--queues",
            "2",
        ];
        args.extend(extra);
        let generator = generator();
        args.extend(generator.iter());
        let measured = compare(Some(&self.relay_ns), &args, out, on_line);
        let exit = exit_of(&mut agent, "the agent stayed after its one compare");
        assert!(exit.starts_with("exit status: 0"), "{exit}");
        measured
    }

    /// Runs `perf compare --lab` in the relay host with `extra` against a fresh `--once`
    /// agent; the compare must refuse to run before any trial (exit 2), and the agent
    /// leave cleanly after that one connection. The compare's stderr.
    fn refused_compare(&self, extra: &[&str]) -> String {
        let mut agent = self.agent();
        let run = Command::new("ip")
            .args(["netns", "exec", &self.relay_ns])
            .arg(bin("ufrag-perf"))
            .env(TOKEN_ENV, LAB_TOKEN)
            .args(["compare", "--lab", &format!("{TOOLS_IP}:7700")])
            .args(["--interface", &self.relay_if])
            .args(extra)
            .output()
            .expect("perf compare runs");
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert_eq!(run.status.code(), Some(2), "{stderr}");
        assert!(!stderr.contains("round "), "no trial began: {stderr}");
        let exit = exit_of(&mut agent, "the agent stayed after its one compare");
        assert!(exit.starts_with("exit status: 0"), "{exit}");
        stderr
    }

    /// Writes `mask` to the relay interface's first RX queue's RPS CPUs.
    fn set_rps(&self, mask: &str) {
        let file = format!("/sys/class/net/{}/queues/rx-0/rps_cpus", self.relay_if);
        let set = Command::new("ip")
            .args(["netns", "exec", &self.relay_ns, "sh", "-c"])
            .arg(format!("echo {mask} > {file}"))
            .status()
            .expect("sh runs");
        assert!(set.success(), "echo {mask} > {file}");
    }

    /// Counts in the relay host, before any relay reads them, the UDP datagrams to the
    /// relays' port from each IPv6 client address (nftables; the table goes with the
    /// namespace).
    fn count_by_client6(&self) {
        let nft = |args: &[&str]| {
            let out = Command::new("ip")
                .args(["netns", "exec", &self.relay_ns, "nft"])
                .args(args)
                .output()
                .expect("nft runs (scripts/test.sh installs it)");
            assert!(
                out.status.success(),
                "nft {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        nft(&["add", "table", "inet", "ufrag_lab_clients"]);
        nft(&[
            "add",
            "chain",
            "inet",
            "ufrag_lab_clients",
            "tally",
            "{ type filter hook prerouting priority raw; policy accept; }",
        ]);
        for client in CLIENT_ADDRESSES6 {
            nft(&[
                "add",
                "rule",
                "inet",
                "ufrag_lab_clients",
                "tally",
                "ip6",
                "saddr",
                client,
                "udp",
                "dport",
                "3478",
                "counter",
            ]);
        }
    }

    /// What [`TwoHosts::count_by_client6`] has counted from each client address.
    fn counted_by_client6(&self) -> [u64; 2] {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.relay_ns, "nft", "list", "table"])
            .args(["inet", "ufrag_lab_clients"])
            .output()
            .expect("nft runs");
        let text = String::from_utf8_lossy(&out.stdout);
        CLIENT_ADDRESSES6.map(|client| {
            text.lines()
                .find(|l| l.contains(&format!("saddr {client} ")))
                .and_then(|l| l.split("packets ").nth(1)?.split(' ').next()?.parse().ok())
                .unwrap_or_else(|| panic!("a counter for {client}: {text}"))
        })
    }

    fn rx_queues(&self) -> usize {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.relay_ns, "ls"])
            .arg(format!("/sys/class/net/{}/queues", self.relay_if))
            .output()
            .expect("ls runs");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter(|q| q.starts_with("rx-"))
            .count()
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in [&self.relay_ns, &self.tools_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// The short trials every run shares.
const SHORT: &[&str] = &[
    "--rounds",
    "2",
    "--loads",
    "2000,3000,4000,5000",
    "--trial",
    "300ms",
    "--search-rounds",
    "1",
    "--pdr-latency-trial",
    "300ms",
    "--final-trial",
    "300ms",
    "--search-trial",
    "300ms",
    "--trials-per-rate",
    "1",
    "--max-pps",
    "40000",
    "--fixed-pps",
    "5000",
    "--latency-trial",
    "1s",
    "--seed",
    "7",
];

/// The setups the main lab run and the testbed run measure: the null row, relay-mio, the
/// fast path (the cheapest bypass the project ships), the in-kernel reference and the
/// `XDP_DROP` calibration.
const MEASURED: &str = "direct,mio,afxdp-fast-native,xdp-relay,xdp-drop";

/// Runs `ufrag-perf compare` (in `ns`, if given) with `args` and [`SHORT`], handing
/// each line of its progress to `on_line` as it comes; its report, JSON and progress.
fn compare(
    ns: Option<&str>,
    args: &[&str],
    out: &std::path::Path,
    on_line: &mut dyn FnMut(&str),
) -> (String, serde_json::Value, String) {
    use std::io::BufRead as _;
    let perf = bin("ufrag-perf");
    let mut command = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&perf);
            c
        }
        None => Command::new(&perf),
    };
    let mut run = command
        .env(TOKEN_ENV, LAB_TOKEN)
        .arg("compare")
        .args(args)
        .args(SHORT)
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("perf compare runs");
    let mut progress = String::new();
    for line in std::io::BufReader::new(run.stderr.take().expect("piped")).lines() {
        let line = line.expect("perf's stderr reads");
        on_line(&line);
        progress.push_str(&line);
        progress.push('\n');
    }
    let status = run.wait().expect("perf compare exits");
    assert!(status.success(), "perf compare {args:?} failed: {progress}");
    let report = std::fs::read_to_string(out).unwrap();
    let json = serde_json::from_str(&std::fs::read_to_string(out.with_extension("json")).unwrap())
        .unwrap();
    (report, json, progress)
}

/// `--generator sockets` where this kernel refuses live frames (the agent's fixed loads
/// and search would use them), said loudly: the lab is still measured, by the other
/// generator.
fn generator() -> Vec<&'static str> {
    match ufrag_perf::forwarders::xdp::live_frames_refused() {
        Some(why) => {
            eprintln!("!! {why}: this lab run searches with --generator sockets");
            vec!["--generator", "sockets"]
        }
        None => vec![],
    }
}

/// The sample of `setup` in `round` of a report's JSON.
fn sample<'a>(json: &'a serde_json::Value, setup: &str, round: u64) -> &'a serde_json::Value {
    json["cost"]["samples"]
        .as_array()
        .expect("cost samples")
        .iter()
        .find(|s| s["round"] == round && s["setup"] == setup)
        .unwrap_or_else(|| panic!("round {round} ran {setup}: {}", json["cost"]["samples"]))
}

/// The report's section headings, as a reader scans them (not the per-setup ones below).
fn headings(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|l| l.starts_with("# ") || l.starts_with("## "))
        .map(|l| l.split(" (").next().unwrap_or(l))
        .collect()
}

/// A JSON value's schema as its key paths (every element of an array under `[]`), and
/// the paths whose value was empty somewhere (null, or an array with nothing in it):
/// what lies under those depends on what was measured, not on the schema.
#[derive(Default)]
struct Shape {
    paths: BTreeSet<String>,
    empty: BTreeSet<String>,
}

impl Shape {
    fn of(v: &serde_json::Value) -> Shape {
        let mut shape = Shape::default();
        shape.walk(v, "");
        shape
    }

    fn walk(&mut self, v: &serde_json::Value, at: &str) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, child) in map {
                    let path = format!("{at}/{k}");
                    self.paths.insert(path.clone());
                    self.walk(child, &path);
                }
            }
            serde_json::Value::Array(items) if items.is_empty() => {
                self.empty.insert(at.to_string());
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    self.walk(item, &format!("{at}[]"));
                }
            }
            serde_json::Value::Null => {
                self.empty.insert(at.to_string());
            }
            _ => {}
        }
    }

    /// The paths this has and `other` lacks, but for those under a path `other` left
    /// empty.
    fn beyond<'a>(&'a self, other: &'a Shape) -> Vec<&'a String> {
        self.paths
            .difference(&other.paths)
            .filter(|p| {
                !other.empty.iter().any(|e| {
                    p.strip_prefix(e.as_str())
                        .is_some_and(|rest| rest.starts_with('/') || rest.starts_with("[]"))
                })
            })
            .collect()
    }
}

#[test]
fn lab_mode_gives_each_side_equal_cores_counts_each_queue_and_reports_like_the_testbed() {
    require_root();
    bin("relay-mio");
    bin("relay-afxdp");
    let dir = std::env::temp_dir().join(format!("ufrag-lab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hosts = TwoHosts::up();
    let queues_before = hosts.rx_queues();

    // The loads' default generator is the tools host's live frames: where its kernel
    // refuses them (here one machine's), the compare stops before its first trial,
    // naming why and the other generator.
    match ufrag_perf::forwarders::xdp::live_frames_refused() {
        Some(why) => {
            let stderr = hosts.refused_compare(&["--only", "mio"]);
            assert!(
                stderr.contains("the tools host cannot send live frames")
                    && stderr.contains(&why)
                    && stderr.contains("--generator sockets"),
                "{stderr}"
            );
        }
        None => eprintln!(
            "!! this kernel sends live frames: the refusal of a tools host that cannot is \
             not exercised here"
        ),
    }

    // rx-0's RPS mask changes during the first round's relay-mio trials: set when the
    // turn's first trial has been reported, put back when the next line that is not the
    // turn's own (indented) begins.
    let (mut in_turn, mut flipped, mut restored) = (false, false, false);
    let mut on_line = |line: &str| {
        if line.starts_with("round 1/") && line.contains(": relay-mio, 2 workers (") {
            in_turn = true;
        } else if in_turn && !flipped && line.contains(" pps: sent ") {
            hosts.set_rps("1");
            flipped = true;
        } else if flipped && !restored && !line.starts_with(' ') {
            hosts.set_rps("0");
            restored = true;
        }
    };
    let (report, json, progress) =
        hosts.lab_compare(&["--only", MEASURED], &dir.join("lab.md"), &mut on_line);
    assert!(
        flipped && restored,
        "the mask was changed and put back: {progress}"
    );

    // Parity: two RX queues, so relay-afxdp runs two workers and relay-mio two; the
    // report says so row by row.
    let rows = json["cost"]["rows"].as_array().expect("cost rows");
    let cores = |setup: &str| {
        rows.iter()
            .find(|r| r["setup"] == setup)
            .unwrap_or_else(|| panic!("a {setup} cost row: {rows:?}"))["cores"]
            .as_str()
            .unwrap_or_else(|| panic!("{setup}'s cores: {rows:?}"))
            .to_string()
    };
    assert!(
        cores("mio-w2").starts_with("2 (CPU "),
        "{}",
        cores("mio-w2")
    );
    assert!(
        cores("afxdp-fast-native").starts_with("2 (CPU "),
        "{}",
        cores("afxdp-fast-native")
    );
    assert_eq!(cores("xdp-relay"), "softirq of 2 RX queue(s)");
    assert!(
        report.contains("Each row's cores: direct path (no relay): none (no forwarder); "),
        "{report}"
    );
    assert!(
        report.contains("relay-afxdp runs one worker on each of 2 RX queues, and the verdict weighs it against relay-mio on as many workers"),
        "{report}"
    );
    let pairs = json["cost"]["pairs_with_sockets"]
        .as_array()
        .expect("pairs");
    assert!(
        !pairs.is_empty() && pairs.iter().all(|p| p["against"] == "mio-w2"),
        "relay-afxdp on two queues is weighed against relay-mio on two workers: {pairs:?}"
    );
    assert_eq!(json["cost"]["baseline"], "mio-w2");
    // The fast path in the lab: weighed against relay-mio above, and priced against the
    // in-kernel reference in the same rounds; what it carried is counted.
    assert!(
        pairs.iter().any(|p| p["setup"] == "afxdp-fast-native"),
        "{pairs:?}"
    );
    let reference = report
        .split("### The fast path against the in-kernel reference")
        .nth(1)
        .unwrap_or_else(|| panic!("the fast path against the reference: {report}"));
    assert!(
        reference
            .lines()
            .any(|l| l.starts_with("| relay-afxdp fast path native |")),
        "{reference}"
    );
    assert!(
        report.contains("### What the in-kernel fast path carried"),
        "{report}"
    );
    // The agent proves each flow both ways after making it, as a session does before its
    // media: only then does relay-afxdp hand a flow to its fast path, which then carries
    // the load rather than the workers. (`flows` counts the flows whose last proving
    // datagram the fast path carried: with two workers, a flow whose return reached the
    // other worker completes its proof with that datagram, through the workers.)
    for round in 1..=2 {
        let fast = &sample(&json, "afxdp-fast-native", round)["fast_path"];
        assert!(
            fast["share_of_received"].as_f64().unwrap_or(0.0) > 0.9,
            "round {round}: the fast path carried most of what the sink received: {fast}"
        );
        assert!(fast["flows"].as_u64() > Some(0), "round {round}: {fast}");
    }
    // Calibration: what the relay's queues receive and drop in XDP (counted there) and
    // the in-kernel rewrite relay's XDP_TX rate on the same queues, each row a fraction
    // of both (a veth has no line rate).
    // A search that found no PDR on this loaded host leaves its limit empty: said, not
    // failed (the fractions need both).
    let calibration = &json["calibration"];
    let found = |limit: &str| {
        let pps = calibration[limit].as_f64();
        assert!(pps.is_none_or(|pps| pps > 0.0), "{limit}: {calibration}");
        if pps.is_none() {
            eprintln!(
                "!! {limit}: its search found no PDR on this host; its fractions are not checked"
            );
        }
        pps.is_some()
    };
    let (tx, drop) = (found("xdp_tx_pdr_pps"), found("xdp_drop_pdr_pps"));
    assert!(calibration["line_rate_pps"].is_null(), "{calibration}");
    let fast = calibration["rows"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["setup"] == "relay-afxdp fast path native")
        })
        .unwrap_or_else(|| panic!("the fast path's calibration row: {calibration}"));
    for (measured, fraction) in [(tx, "of_xdp_tx"), (drop, "of_xdp_drop")] {
        if measured && fast["pdr_pps"].is_number() {
            assert!(
                fast[fraction].as_f64().is_some_and(|f| f > 0.0),
                "{fraction}: {fast}"
            );
        }
    }
    assert!(
        report.contains("## Calibration: what the hardware can do"),
        "{report}"
    );
    assert!(
        rows.iter().all(|r| r["setup"] != "mio"),
        "no one-worker relay-mio row unless --workers 1 asks: {rows:?}"
    );
    assert!(
        json["left_out"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l["setup"] == "relay-mio"
                && l["why"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("weighed on 2 workers")))),
        "{}",
        json["left_out"]
    );

    // The turn during which the mask changed is left out, naming the setting; no other
    // is (the mask was put back between turns).
    let changed = sample(&json, "mio-w2", 1);
    assert_eq!(changed["kept"], false, "{changed}");
    assert!(
        changed["steering_changed"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c
                .as_str()
                .is_some_and(|c| c.starts_with("rx-0 rps_cpus 0 → 1")))),
        "{changed}"
    );
    assert!(
        progress.contains("steering changed during the trials: rx-0 rps_cpus 0 → 1"),
        "{progress}"
    );
    // The mask is put back through `ip netns exec` as the next turn begins: on a loaded
    // host the write may land in that turn's trials, which then see it put back.
    let put_back = serde_json::json!(["rx-0 rps_cpus 1 → 0"]);
    let mut restores = 0;
    for s in json["cost"]["samples"].as_array().unwrap() {
        if s["round"] == 1 && s["setup"] == "mio-w2" {
            continue;
        }
        let changed = &s["steering_changed"];
        if *changed == put_back {
            restores += 1;
        } else {
            assert!(
                changed.as_array().is_some_and(Vec::is_empty),
                "no change during any other turn: {s}"
            );
        }
    }
    assert!(restores <= 1, "one turn at most saw the mask put back");

    // Each queue's packets were counted, and with the tools host sending on two TX
    // queues the flows spread: no skew is flagged.
    for setup in ["mio-w2", "afxdp-fast-native", "xdp-relay", "xdp-drop"] {
        let queues = &sample(&json, setup, 2)["queues"];
        let packets: Vec<u64> = queues["packets"]
            .as_array()
            .unwrap_or_else(|| panic!("{setup}'s queues: {queues}"))
            .iter()
            .map(|p| p.as_u64().unwrap())
            .collect();
        assert_eq!(packets.len(), 2, "{setup}: {queues}");
        assert!(
            packets.iter().all(|&p| p > 0),
            "{setup}: both queues: {queues}"
        );
        assert!(queues["skew"].is_null(), "{setup} spread: {queues}");
    }
    assert!(
        report.contains("### How the load spread over the RX queues"),
        "{report}"
    );
    assert!(!report.contains("**did not spread**"), "{report}");

    // The rest as on the testbed: relay-mio's cost in every round both it and the null
    // row were kept (the host gate may leave rounds out), and a maximum rate.
    let mio = rows.iter().find(|r| r["setup"] == "mio-w2").unwrap();
    let kept_in = |round: u64, setup: &str| sample(&json, setup, round)["kept"] == true;
    let rounds_run = mio["rounds_run"].as_u64().unwrap();
    let both_kept = (1..=rounds_run)
        .filter(|&r| kept_in(r, "mio-w2") && kept_in(r, "direct"))
        .count();
    assert_eq!(
        mio["rounds_kept"].as_u64(),
        Some(both_kept as u64),
        "every round the gate kept is priced: {mio}"
    );
    // Priced, not judged: at these loads on one machine's two CPUs a round's slope is
    // noise (it may even come out negative); the plumbing is what this test proves.
    if both_kept > 0 {
        assert!(
            mio["marginal_us_per_packet"]["median"]
                .as_f64()
                .is_some_and(f64::is_finite),
            "relay-mio's marginal cost: {mio}"
        );
    } else {
        eprintln!("!! the host gate left every round out; relay-mio's cost is not checked");
    }
    assert!(
        json["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["setup"] == "relay-mio, 2 workers"
                && r["max_loss_free_pps"]["median"]
                    .as_f64()
                    .is_some_and(|n| n > 0.0)),
        "relay-mio's maximum rate: {}",
        json["rows"]
    );
    // The flows came from the agent's two client addresses, and the report says so.
    assert!(
        report.contains("1000 client flows (2 client address(es)"),
        "{report}"
    );
    // The environment names both hosts' NICs as ethtool read them.
    let env = &json["environment"];
    assert_eq!(env["tools_host"]["client_addresses"], 2, "{env}");
    assert_eq!(env["nic"]["driver"], "veth", "{env}");
    assert_eq!(
        env["nic"]["rx_queues"], 2,
        "--queues 2 held during the run: {env}"
    );
    assert_eq!(
        env["tools_host"]["client_nic"]["interface"],
        hosts.tools_if.as_str()
    );
    assert!(report.contains("# Side by side on the lab's hosts"));
    assert!(report.contains("## Lab mode: what differs from the testbed"));
    // Put back when the run ended.
    assert_eq!(
        hosts.rx_queues(),
        queues_before,
        "the queues are put back: {}",
        progress
            .lines()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Every flow on one queue (one TX queue on the tools host): flagged, per setup and in
    // the report. With `--relay-cpus 1` the cost counts CPU 1 alone, and relay-afxdp, whose
    // two workers need a CPU each, is left out before the first trial saying so. This run
    // is also the IPv6 one: lab mode speaks both families.
    hosts.tools_tx_queues(1);
    hosts.count_by_client6();
    let (skewed, skewed_json, skewed_progress) = hosts.lab_compare(
        &[
            "--only",
            "direct,mio,afxdp-native-wakeup",
            "--no-search",
            "--no-profile",
            "--relay-cpus",
            "1",
            "--ipv6",
        ],
        &dir.join("skewed.md"),
        &mut |_| {},
    );
    // IPv6 from both client addresses: the flows are dealt round them, so relay-mio's
    // datagrams (its flows made, then the loads, from sockets or live frames alike, which
    // take the flows in turn) came from each in amounts within a fifth of each other. Had
    // the loads come from the first address alone, the second would have sent its flows'
    // Binding Requests and nothing more: under half the first's.
    assert!(
        skewed_json["environment"]["interfaces"]
            .as_str()
            .is_some_and(|i| i.contains("2 client address(es) from fd89::2")),
        "{}",
        skewed_json["environment"]
    );
    let from = hosts.counted_by_client6();
    let (least, most) = (from.iter().min().unwrap(), from.iter().max().unwrap());
    assert!(
        *least > 0 && least * 5 >= most * 4,
        "datagrams from {CLIENT_ADDRESSES6:?}: {from:?}"
    );
    // relay-afxdp left out, so no row weighs cores against relay-mio: one worker.
    let queues = &sample(&skewed_json, "mio", 1)["queues"];
    assert!(
        queues["skew"]
            .as_str()
            .is_some_and(|s| s.contains("less than half its share")),
        "one queue took every packet: {queues}"
    );
    assert!(skewed.contains("**did not spread**"), "{skewed}");
    assert!(
        skewed_progress.contains("!! the load did not spread over the RX queues"),
        "{skewed_progress}"
    );
    assert!(
        skewed_progress.contains(
            "!! LEFT OUT relay-afxdp native wakeup: 2 workers need a CPU each; the relay's CPUs are 1"
        ),
        "{skewed_progress}"
    );
    // The cost counts CPU 1 alone (veth has no interrupts to add), the whole host's busy
    // time beside it; the receive softirqs that ran on CPU 0 (the agent's, which sends)
    // are work the cost missed, named.
    assert_eq!(skewed_json["environment"]["counted_cpus"], "1");
    assert!(
        skewed.contains("The cost counts the relay host's CPUs 1 only"),
        "{skewed}"
    );
    let mio = sample(&skewed_json, "mio", 1);
    let counted: f64 = mio["loads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["busy_seconds"].as_f64().unwrap())
        .sum();
    assert!(
        mio["host_busy_seconds"]
            .as_f64()
            .is_some_and(|host| host > counted),
        "the whole host's busy time beside CPU 1's {counted}: {mio}"
    );
    assert!(
        mio["network_elsewhere"].as_array().is_some_and(|e| e
            .iter()
            .any(|e| e["cpu"] == 0 && e["receive_softirqs"].as_u64() > Some(0))),
        "{mio}"
    );
    assert!(
        skewed.contains("**Network work outside the counted CPUs** in relay-mio's trials"),
        "{skewed}"
    );
    assert!(
        skewed_progress.contains("!! network work outside the counted CPUs: CPU 0: "),
        "{skewed_progress}"
    );

    // Zero copy, which veth refuses, is left out before the first trial with the
    // driver's words. Where this kernel sends live frames, the search goes the other
    // way: the tools host's live frames from its sink's address, through relay-mio's
    // internal port, counted arriving at its client addresses (with a downlink the
    // fixed-load rounds do not run). Where it refuses them, a downlink cannot be sent:
    // the run is the fixed-load rounds alone, and the downlink counted as skipped.
    let live_frames = !ufrag_perf::forwarders::xdp::skip_without_live_frames(
        "lab_mode_gives_each_side_equal_cores_counts_each_queue_and_reports_like_the_testbed \
         (its downlink search)",
    );
    let mut down_args = vec![
        "--only",
        "direct,mio,afxdp-native-wakeup",
        "--bind-mode",
        "zerocopy",
        "--no-profile",
    ];
    if live_frames {
        down_args.extend(["--direction", "down"]);
    } else {
        down_args.push("--no-search");
    }
    let (down, down_json, down_progress) =
        hosts.lab_compare(&down_args, &dir.join("zerocopy.md"), &mut |_| {});
    if live_frames {
        assert_downlink_arrived(&down, &down_json);
    }
    // Both ways at once need a second interface on the agent (each way is counted by an
    // XDP program on the interface it arrives at): refused before any trial.
    let both = hosts.refused_compare(&["--only", "mio", "--direction", "both"]);
    assert!(
        both.contains("--direction both") && both.contains("--sink-interface"),
        "{both}"
    );
    assert!(
        down_progress.contains("!! LEFT OUT relay-afxdp native wakeup")
            && down_progress.contains("refuses zero-copy"),
        "{down_progress}"
    );
    assert!(
        down_json["left_out"]
            .as_array()
            .is_some_and(
                |l| l.iter().any(|l| l["setup"] == "relay-afxdp native wakeup"
                    && l["why"]
                        .as_str()
                        .is_some_and(|w| w.contains("refuses zero-copy")))
            ),
        "{}",
        down_json["left_out"]
    );
    assert!(down.contains("Not measured in this run: relay-afxdp native wakeup (did not start"));

    // The same shape as the testbed's report: the same sections (the testbed's limits in
    // place of lab mode's notes) and the same JSON fields (the NICs' and the queues'
    // besides).
    let testbed_out = dir.join("testbed.md");
    let (testbed_report, testbed_json, _) =
        compare(None, &["--only", MEASURED], &testbed_out, &mut |_| {});
    let lab_sections: Vec<String> = headings(&report)
        .into_iter()
        .map(|h| match h {
            "## Lab mode: what differs from the testbed" => {
                "## What this testbed cannot show".into()
            }
            _ => h.replace("the lab's hosts", "the netns testbed"),
        })
        .collect();
    assert_eq!(lab_sections, headings(&testbed_report));
    // Fields present on one side only because nothing was measured into them on the
    // other (every round left out by the host gate, say) are not schema.
    let (lab_shape, testbed_shape) = (Shape::of(&json), Shape::of(&testbed_json));
    let only_lab = lab_shape.beyond(&testbed_shape);
    let only_testbed = testbed_shape.beyond(&lab_shape);
    assert!(
        only_lab.iter().all(|p| {
            [
                "/environment/nic",
                "/environment/tools",
                "/environment/counted_cpus",
                "/cost/samples[]/queues/",
                "/left_out",
            ]
            .into_iter()
            .any(|prefix| p.starts_with(prefix))
        }),
        "fields only the lab's report has: {only_lab:?}"
    );
    assert!(
        only_testbed
            .iter()
            .all(|p| ["/environment/tools/", "/left_out"]
                .into_iter()
                .any(|prefix| p.starts_with(prefix))),
        "fields only the testbed's report has: {only_testbed:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The report of a downlink search through relay-mio says so in its title, and at the
/// search's lower rates the replies arrive: a trial that lost under a tenth.
fn assert_downlink_arrived(report: &str, json: &serde_json::Value) {
    assert!(
        report.contains("(downlink, 1000 flows)"),
        "{}",
        report.lines().next().unwrap_or_default()
    );
    let mio = json["rows"]
        .as_array()
        .and_then(|rows| {
            rows.iter().find(|r| {
                r["setup"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("relay-mio"))
            })
        })
        .unwrap_or_else(|| panic!("relay-mio's downlink search: {}", json["rows"]));
    let counts = |t: &serde_json::Value| (t["sent"].as_u64(), t["received"].as_u64());
    assert!(
        mio["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|run| run["trials"].as_array().into_iter().flatten())
            .any(
                |t| matches!(counts(t), (Some(sent), Some(got)) if sent > 0 && got * 10 >= sent * 9)
            ),
        "the replies reached the clients through relay-mio: {mio}"
    );
}

/// A lab run that cannot begin says why in one line before any trial: no agent where
/// `--lab` points, or no interface named.
#[test]
fn a_missing_agent_or_interface_is_named_before_any_trial() {
    require_root();
    let compare = |args: &[&str]| {
        let run = Command::new(bin("ufrag-perf"))
            .env(TOKEN_ENV, LAB_TOKEN)
            .arg("compare")
            .args(args)
            .output()
            .expect("perf compare runs");
        (
            run.status.code(),
            String::from_utf8_lossy(&run.stderr).into_owned(),
        )
    };
    // Port 1 on loopback: nothing listens there.
    let (code, stderr) = compare(&["--lab", "127.0.0.1:1", "--interface", "lo", "--only", "mio"]);
    assert_eq!(code, Some(2), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("--lab 127.0.0.1:1"))
        .unwrap_or_else(|| panic!("no line names --lab: {stderr}"));
    assert!(line.contains("ufrag-perf agent"), "{line}");
    assert!(!stderr.contains("round "), "no trial began: {stderr}");
    let (code, stderr) = compare(&["--lab", "127.0.0.1:1", "--only", "mio"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--interface"), "{stderr}");
    assert!(!stderr.contains("round "), "no trial began: {stderr}");
}

/// A namespace of the test's own with a veth pair inside it, `tools0` (10.90.0.1) for the
/// agent to drive, deleted when dropped.
struct ToolsHost {
    ns: String,
}

impl ToolsHost {
    fn up(tag: &str) -> ToolsHost {
        let ns = format!("ufrag-agent-{}-{tag}", std::process::id());
        ip(&["netns", "add", &ns]);
        let host = ToolsHost { ns };
        let exec = |args: &[&str]| ip(&[&["-n", &host.ns][..], args].concat());
        exec(&["link", "set", "lo", "up"]);
        exec(&[
            "link", "add", "tools0", "type", "veth", "peer", "name", "tools1",
        ]);
        exec(&["addr", "add", "10.90.0.1/24", "dev", "tools0"]);
        exec(&["link", "set", "tools0", "up"]);
        exec(&["link", "set", "tools1", "up"]);
        host
    }

    /// The agent in this namespace, on 127.0.0.1:7700, with `token_file` (or none) and
    /// `extra` flags.
    fn agent(&self, token_file: Option<&std::path::Path>, extra: &[&str]) -> OwnedChild {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.ns])
            .arg(bin("ufrag-perf"))
            .args([
                "agent",
                "--listen",
                "127.0.0.1:7700",
                "--interface",
                "tools0",
            ])
            .args(extra)
            .env_remove(TOKEN_ENV)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(file) = token_file {
            command.arg("--token-file").arg(file);
        }
        OwnedChild::spawn(&mut command).expect("the agent starts")
    }

    /// A connection to the agent, once it listens (at most 10 s).
    fn connect(&self, agent: &mut OwnedChild) -> Channel {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let stream = ufrag_testkit::netns::in_netns(Some(&self.ns), || {
                std::net::TcpStream::connect("127.0.0.1:7700")
            })
            .expect("the namespace");
            if let Ok(stream) = stream {
                return Channel::new(stream).unwrap();
            }
            if let Some(report) = agent.exit_report() {
                panic!("the agent exited: {report}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the agent never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for ToolsHost {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// The agent sends load wherever it is told, so it serves only a compare that proves the
/// token: a wrong answer, a request instead of an answer, and the wrong token are each
/// refused before anything is served (not even the hello), and the agent goes on serving;
/// the right token is served. Without a token, or with a token file others may read, it
/// does not start.
#[test]
fn the_agent_serves_only_who_proves_the_token() {
    require_root();
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("ufrag-agent-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("agent.token");
    std::fs::write(&file, format!("{LAB_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let tools = ToolsHost::up("token");
    let mut agent = tools.agent(Some(&file), &["--once"]);

    // A made-up answer.
    let mut channel = tools.connect(&mut agent);
    let challenge = channel.receive().unwrap().expect("a challenge");
    assert_eq!(
        challenge["challenge"].as_str().map(str::len),
        Some(64),
        "{challenge}"
    );
    channel
        .send(&serde_json::json!({ "answer": "00".repeat(32) }))
        .unwrap();
    let refusal = channel.receive().unwrap().expect("a refusal");
    assert_eq!(refusal["error"], "not authenticated", "{refusal}");
    assert!(
        channel.receive().unwrap_or(None).is_none(),
        "then the agent closes"
    );

    // A request where the answer belongs: refused, its hello never sent.
    let mut channel = tools.connect(&mut agent);
    channel.receive().unwrap().expect("a challenge");
    channel.send(&Request::Hello.to_json()).unwrap();
    let refusal = channel.receive().unwrap().expect("a refusal");
    assert!(
        refusal.get("ok").is_none() && refusal.get("client_ip").is_none(),
        "{refusal}"
    );

    // Another token.
    let mut channel = tools.connect(&mut agent);
    let wrong = Token::from_text("another-token-0123456789abcdef0123456789");
    let e = prove(&mut channel, &wrong).unwrap_err();
    assert!(e.contains("refused the token"), "{e}");

    // An answer that trickles in, a byte a second: refused when the handshake's five
    // seconds are up, however long the line would take.
    let mut channel = tools.connect(&mut agent);
    channel.receive().unwrap().expect("a challenge");
    let started = std::time::Instant::now();
    let mut refusal = None;
    for byte in "{\"nonce\": \"".bytes().cycle().take(12) {
        if channel.write_raw(&[byte]).is_err() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
        if let Ok(Some(reply)) = channel.try_receive() {
            refusal = Some(reply);
            break;
        }
    }
    // Refused while the answer was still trickling in (an agent that re-armed its
    // timeout on each byte would wait for the drip to stop).
    assert_eq!(
        refusal.as_ref().map(|r| r["error"].clone()),
        Some(serde_json::json!("not authenticated")),
        "no refusal during a 12-byte drip ({:?})",
        started.elapsed()
    );

    // The token: served, after four refusals, which did not use up `--once`; the one
    // compare served, the agent exits.
    let mut channel = tools.connect(&mut agent);
    prove(&mut channel, &Token::from_text(LAB_TOKEN)).unwrap();
    let hello = channel.call(&Request::Hello).unwrap();
    assert_eq!(hello["client_ip"], "10.90.0.1", "{hello}");
    // One client address holds 40,000 flows: a load of more is refused, naming the way
    // to more.
    assert_eq!(hello["max_flows"], 40_000, "{hello}");
    let load = Prepare {
        dst: "10.90.0.9:3478".parse().unwrap(),
        dst_mac: [2, 0, 0, 0, 0, 9],
        framed: false,
        keeps_flows: true,
        flows: 40_001,
        size: 100,
        purpose: Purpose::Fixed { live_frames: false },
        returns: None,
        downlink_share: 0.0,
    };
    let e = channel.call(&Request::Prepare(load)).unwrap_err();
    assert!(
        e.contains("between 1 and 40000") && e.contains("--client-addresses"),
        "{e}"
    );
    // A downlink the agent cannot send is refused: outside a live-frames search, without
    // the setup's returns, or both ways on one interface; and so is a return path that
    // is not the load's destination's.
    let returns = Some(ReturnPath::ToClientPort("10.90.0.9".parse().unwrap()));
    let search = Purpose::Search { live_frames: true };
    for (downlink, refused) in [
        (
            Prepare {
                flows: 10,
                downlink_share: 1.0,
                returns,
                ..load
            },
            "in a search, in live frames",
        ),
        (
            Prepare {
                flows: 10,
                downlink_share: 1.0,
                purpose: search,
                ..load
            },
            "needs the setup's returns",
        ),
        (
            Prepare {
                flows: 10,
                downlink_share: 0.5,
                purpose: search,
                returns,
                ..load
            },
            "--sink-interface",
        ),
        // The proof and the downlink go only where the load goes.
        (
            Prepare {
                flows: 10,
                returns: Some(ReturnPath::Framed {
                    internal: "10.90.0.77:40000".parse().unwrap(),
                    vip: load.dst,
                }),
                ..load
            },
            "not the return path of a load to 10.90.0.9:3478",
        ),
        (
            Prepare {
                flows: 10,
                returns: Some(ReturnPath::ToClientPort("fd00::9".parse().unwrap())),
                ..load
            },
            "not the return path",
        ),
        (
            Prepare {
                flows: 10,
                returns: Some(ReturnPath::Framed {
                    internal: "10.90.0.9:40000".parse().unwrap(),
                    vip: "10.90.0.9:3479".parse().unwrap(),
                }),
                ..load
            },
            "not the return path",
        ),
        (
            Prepare {
                flows: 10,
                keeps_flows: false,
                returns: Some(ReturnPath::ToClientPort(load.dst.ip())),
                ..load
            },
            "not the return path",
        ),
    ] {
        let e = channel.call(&Request::Prepare(downlink)).unwrap_err();
        assert!(e.contains(refused), "{downlink:?}: {e}");
    }
    drop(channel);
    let report = exit_of(&mut agent, "--once: the agent stayed");
    assert!(report.starts_with("exit status: 0"), "{report}");

    // Client addresses the interface does not have: the agent does not start, naming the
    // first missing one.
    let mut agent = tools.agent(Some(&file), &["--client-addresses", "2"]);
    let report = exit_of(&mut agent, "the agent started without 10.90.0.2");
    assert!(report.contains("exit status: 2"), "{report}");
    assert!(
        report.contains("10.90.0.2 is missing after 10.90.0.1"),
        "{report}"
    );

    // No token, and a token others may read: the agent does not start.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (token_file, expected) in [(None, "a token is required"), (Some(&file), "0644")] {
        let mut agent = tools.agent(token_file.map(|f| f.as_path()), &[]);
        let report = exit_of(&mut agent, &format!("the agent started: {expected}"));
        assert!(report.contains("exit status: 2"), "{report}");
        assert!(report.contains(expected), "{expected}: {report}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// How `agent` exited (its status and stderr), waiting at most 10 s; fails with `stayed`
/// if it still runs then.
fn exit_of(agent: &mut OwnedChild, stayed: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(report) = agent.exit_report() {
            return report;
        }
        assert!(std::time::Instant::now() < deadline, "{stayed}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
