//! Lab mode end to end on two network namespaces standing in for two hosts, joined by one
//! veth pair (root only: CI runs as root; without root the test fails loudly rather than
//! skips): the agent runs in the "tools host", `perf compare --lab` in the "relay host"
//! with zero-copy AF_XDP requested, which veth refuses. The run must leave that setup out
//! naming the refusal, measure the rest, put the interface's queues back, and write a
//! report of the same shape as the testbed's.

use std::collections::BTreeSet;
use std::process::Command;

use ufrag_perf::cmd::lab::protocol::{Channel, Request};
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
        // The wire: a veth delivers the tools host's XDP_TX live frames only to a peer
        // with NAPI, which GRO turns on (a NIC needs nothing).
        let gro = Command::new("ip")
            .args([
                "netns",
                "exec",
                &hosts.relay_ns,
                "ethtool",
                "-K",
                &hosts.relay_if,
            ])
            .args(["gro", "on"])
            .status()
            .expect("ethtool runs (scripts/test.sh installs it)");
        assert!(gro.success(), "ethtool -K gro on");
        // A veth takes an XDP program only while its RX queues are at least its peer's TX
        // queues: the tools host's sink needs two while the relay host runs two
        // (`--queues 2`).
        let queues = Command::new("ip")
            .args([
                "netns",
                "exec",
                &hosts.tools_ns,
                "ethtool",
                "-L",
                &hosts.tools_if,
            ])
            .args(["rx", "2", "tx", "1"])
            .status()
            .expect("ethtool runs");
        assert!(queues.success(), "ethtool -L rx 2 tx 1");
        hosts
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

/// The short trials both runs share.
const SHORT: &[&str] = &[
    "--only",
    "direct,mio,afxdp-native-wakeup",
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

/// Runs `ufrag-perf compare` (in `ns`, if given) with `args` and [`SHORT`]; its report,
/// JSON and stderr.
fn compare(
    ns: Option<&str>,
    args: &[&str],
    out: &std::path::Path,
) -> (String, serde_json::Value, String) {
    let perf = bin("ufrag-perf");
    let mut command = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&perf);
            c
        }
        None => Command::new(&perf),
    };
    let run = command
        .env(TOKEN_ENV, LAB_TOKEN)
        .arg("compare")
        .args(args)
        .args(SHORT)
        .arg("--out")
        .arg(out)
        .output()
        .expect("perf compare runs");
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(
        run.status.success(),
        "perf compare {args:?} failed: {stderr}"
    );
    let report = std::fs::read_to_string(out).unwrap();
    let json = serde_json::from_str(&std::fs::read_to_string(out.with_extension("json")).unwrap())
        .unwrap();
    (report, json, stderr)
}

/// The report's section headings, as a reader scans them (not the per-setup ones below).
fn headings(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|l| l.starts_with("# ") || l.starts_with("## "))
        .map(|l| l.split(" (").next().unwrap_or(l))
        .collect()
}

/// Every key path of a JSON value (arrays by their first element).
fn shape(v: &serde_json::Value, at: &str, into: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                let path = format!("{at}/{k}");
                into.insert(path.clone());
                shape(child, &path, into);
            }
        }
        serde_json::Value::Array(items) => {
            if let Some(first) = items.first() {
                shape(first, &format!("{at}[]"), into);
            }
        }
        _ => {}
    }
}

#[test]
fn lab_mode_on_two_namespaces_refuses_zero_copy_cleanly_and_reports_like_the_testbed() {
    require_root();
    // The agent's search drives the live-frames generator.
    if ufrag_perf::forwarders::xdp::skip_without_live_frames(
        "lab_mode_on_two_namespaces_refuses_zero_copy_cleanly_and_reports_like_the_testbed",
    ) {
        return;
    }
    bin("relay-mio");
    bin("relay-afxdp");
    let dir = std::env::temp_dir().join(format!("ufrag-lab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hosts = TwoHosts::up();

    let perf = bin("ufrag-perf");
    let mut agent_command = Command::new("ip");
    agent_command
        .args(["netns", "exec", &hosts.tools_ns])
        .arg(&perf)
        .args(["agent", "--once", "--listen", &format!("{TOOLS_IP}:7700")])
        .args(["--interface", &hosts.tools_if, "--cpus", "0"])
        .env(TOKEN_ENV, LAB_TOKEN);
    let mut agent = OwnedChild::spawn(&mut agent_command).expect("the agent starts");
    std::thread::sleep(std::time::Duration::from_millis(300));

    let queues_before = hosts.rx_queues();
    let agent_addr = format!("{TOOLS_IP}:7700");
    let lab_out = dir.join("lab.md");
    let (report, json, progress) = compare(
        Some(&hosts.relay_ns),
        &[
            "--lab",
            &agent_addr,
            "--interface",
            &hosts.relay_if,
            "--bind-mode",
            "zerocopy",
            "--queues",
            "2",
        ],
        &lab_out,
    );

    // Zero-copy refused by veth: left out before the first trial, with the driver's words.
    assert!(
        progress.contains("!! LEFT OUT relay-afxdp native wakeup")
            && progress.contains("refuses zero-copy"),
        "{progress}"
    );
    let left_out = json["left_out"].as_array().expect("left_out");
    assert!(
        left_out
            .iter()
            .any(|l| l["setup"] == "relay-afxdp native wakeup"
                && l["why"]
                    .as_str()
                    .is_some_and(|w| w.contains("refuses zero-copy"))),
        "{left_out:?}"
    );
    assert!(report.contains("Not measured in this run: relay-afxdp native wakeup (did not start"));
    // The rest was measured: relay-mio's cost in every round, and a maximum rate.
    let mio = json["cost"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["setup"] == "mio")
        .unwrap_or_else(|| panic!("a relay-mio cost row: {}", json["cost"]));
    // A round counts only when the host gate kept both relay-mio's trial and the null
    // row's (a hypervisor that steals the CPU makes a reading meaningless); every round both
    // kept must yield a cost.
    let samples = json["cost"]["samples"].as_array().expect("cost samples");
    let kept_in = |round: u64, setup: &str| {
        samples
            .iter()
            .find(|s| s["round"] == round && s["setup"] == setup)
            .map(|s| s["kept"] == true)
            .unwrap_or_else(|| panic!("round {round} ran {setup}: {samples:?}"))
    };
    let rounds_run = mio["rounds_run"].as_u64().unwrap();
    let both_kept = (1..=rounds_run)
        .filter(|&r| kept_in(r, "mio") && kept_in(r, "direct"))
        .count();
    assert_eq!(
        mio["rounds_kept"].as_u64(),
        Some(both_kept as u64),
        "every round the gate kept is priced: {mio}"
    );
    if both_kept > 0 {
        assert!(
            mio["marginal_us_per_packet"]["median"]
                .as_f64()
                .is_some_and(|c| c > 0.0),
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
            .any(|r| r["setup"] == "relay-mio"
                && r["max_loss_free_pps"]["median"]
                    .as_f64()
                    .is_some_and(|n| n > 0.0)),
        "relay-mio's maximum rate: {}",
        json["rows"]
    );
    // The environment names both hosts' NICs as ethtool read them.
    let env = &json["environment"];
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
    // Put back when the run ended; the agent served one compare and left.
    assert_eq!(hosts.rx_queues(), queues_before, "the queues are put back");
    let exit = (0..50).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        agent.exit_report()
    });
    assert!(
        exit.as_deref()
            .is_some_and(|e| e.starts_with("exit status: 0")),
        "the agent exits after one compare: {exit:?}"
    );

    // The same shape as the testbed's report: the same sections (the testbed's limits in
    // place of lab mode's notes) and the same JSON fields (the NICs' besides).
    let testbed_out = dir.join("testbed.md");
    let (testbed_report, testbed_json, _) = compare(None, &[], &testbed_out);
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
    let (mut lab_shape, mut testbed_shape) = (BTreeSet::new(), BTreeSet::new());
    shape(&json, "", &mut lab_shape);
    shape(&testbed_json, "", &mut testbed_shape);
    let only_lab: Vec<&String> = lab_shape.difference(&testbed_shape).collect();
    let only_testbed: Vec<&String> = testbed_shape.difference(&lab_shape).collect();
    // A run whose every round the host gate left out prices no cost: its cost rows have
    // no intervals, so those fields are on one side only. Said, not failed.
    let priced = |j: &serde_json::Value| {
        j["cost"]["rows"]
            .as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["rounds_kept"].as_u64() > Some(0)))
    };
    let unpriced_cost = |j: &serde_json::Value, which: &str| -> Option<&'static str> {
        (!priced(j)).then(|| {
            eprintln!("!! the host gate left every round of the {which} run out: its cost fields are not compared");
            "/cost/rows[]/"
        })
    };
    let lab_may_add = unpriced_cost(&testbed_json, "testbed");
    let testbed_may_add = unpriced_cost(&json, "lab");
    // A run whose bypass rows were all refused (here: zero copy on veth) weighs no bypass
    // row against a socket row: its list of pairs is empty, so their fields are on one
    // side only.
    let no_pairs = |j: &serde_json::Value| {
        j["cost"]["pairs_with_sockets"]
            .as_array()
            .is_none_or(Vec::is_empty)
            .then_some("/cost/pairs_with_sockets[]/")
    };
    let (lab_may_add, testbed_may_add) = (
        lab_may_add.into_iter().chain(no_pairs(&testbed_json)),
        testbed_may_add.into_iter().chain(no_pairs(&json)),
    );
    assert!(
        only_lab.iter().all(|p| {
            ["/environment/nic", "/environment/tools", "/left_out"]
                .into_iter()
                .chain(lab_may_add.clone())
                .any(|prefix| p.starts_with(prefix))
        }),
        "fields only the lab's report has: {only_lab:?}"
    );
    assert!(
        only_testbed.iter().all(|p| {
            ["/environment/tools/", "/left_out"]
                .into_iter()
                .chain(testbed_may_add.clone())
                .any(|prefix| p.starts_with(prefix))
        }),
        "fields only the testbed's report has: {only_testbed:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
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
    drop(channel);
    let report = exit_of(&mut agent, "--once: the agent stayed");
    assert!(report.starts_with("exit status: 0"), "{report}");

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
