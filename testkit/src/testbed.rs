//! The network-namespace testbed ([`ufrag_testbed::topology`], re-exported here) and the
//! helpers tests use to run the project's binaries inside it.

pub use ufrag_testbed::topology::*;

/// Helpers for tests and benchmarks that run binaries inside the testbed.
pub mod tools {
    use std::net::SocketAddr;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use super::{Testbed, is_root};
    use crate::cargo_build::bin;
    use crate::child::OwnedChild;
    pub use crate::keys::KEYS;
    use ufrag_testbed::launch::Stderr;
    /// The relay's metrics address inside its namespace.
    pub const METRICS: &str = "127.0.0.1:9100";

    /// Fails loudly unless running as root (the testbed needs CAP_NET_ADMIN and, for
    /// XDP, CAP_BPF). CI runs as root; a test never silently skips.
    pub fn require_root() {
        assert!(
            is_root(),
            "this test needs root (network namespaces, XDP); CI runs as root"
        );
    }

    /// The index of interface `ifname` in namespace `ns`, from `ip -o link` (`N: name…`):
    /// `/sys/class/net` shows the process's namespace, not a thread's.
    pub fn ifindex_in(ns: &str, ifname: &str) -> u32 {
        let out = std::process::Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "dev", ifname])
            .output()
            .expect("ip runs");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split(':')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no index for {ifname} in {ns}: {text}"))
    }

    /// What `ip link show` says of the relay's interface; an attached XDP program shows
    /// as `xdpgeneric` (skb mode) or `xdp` (native), with `prog/xdp id N`.
    pub fn relay_link_shown(bed: &Testbed) -> String {
        let out = bed
            .relay
            .command("ip")
            .args(["link", "show", "dev", &bed.relay.ifname])
            .output()
            .expect("ip runs");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Waits (at most 5 s) until the relay's interface has no XDP program; panics with
    /// `why` if one stays.
    pub fn wait_until_no_xdp(bed: &Testbed, why: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while relay_link_shown(bed).contains("prog/xdp") {
            assert!(Instant::now() < deadline, "{why}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The relay's VIP in the given family.
    pub fn vip(bed: &Testbed, ipv6: bool) -> SocketAddr {
        SocketAddr::new(bed.relay.ip(ipv6), 3478)
    }

    /// Starts `binary` as the relay (VIP 10.77.0.2:3478, internal :40000, one worker) with
    /// `extra` flags, and waits until `/readyz` answers 200.
    pub fn start_relay(bed: &Testbed, binary: &str, cpu: &str, extra: &[&str]) -> OwnedChild {
        start_relay_in(bed, false, binary, cpu, extra)
    }

    /// Like [`start_relay`], with the VIP, internal address and transceiver network of
    /// one family (IPv6: `[fd77::2]:3478`, fd77::/64).
    pub fn start_relay_in(
        bed: &Testbed,
        ipv6: bool,
        binary: &str,
        cpu: &str,
        extra: &[&str],
    ) -> OwnedChild {
        start_relay_under(bed, ipv6, &[], binary, cpu, extra)
    }

    /// Like [`start_relay_in`], the relay started by `wrapper` (a command and its
    /// arguments, the relay's command line after them: `setpriv …` to start it with a
    /// pod's capabilities).
    pub fn start_relay_under(
        bed: &Testbed,
        ipv6: bool,
        wrapper: &[&str],
        binary: &str,
        cpu: &str,
        extra: &[&str],
    ) -> OwnedChild {
        let launch = ufrag_testbed::launch::RelayLaunch {
            binary: bin(binary),
            ns: Some(bed.relay.ns.clone()),
            wrapper: wrapper.iter().map(|w| w.to_string()).collect(),
            vip: vip(bed, ipv6),
            internal: SocketAddr::new(bed.relay.ip(ipv6), 40000),
            transceiver_net: if ipv6 { "fd77::/64" } else { "10.77.0.0/24" }.into(),
            workers: 1,
            cpus: cpu.into(),
            metrics: METRICS.parse().expect("a socket address"),
            flags: extra.iter().map(|f| f.to_string()).collect(),
            log_filter: None,
        };
        launch
            .start(Stderr::Piped, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// GETs `path` from the relay's metrics endpoint inside its namespace: the body, or
    /// an empty string when nothing answers.
    pub fn relay_http(bed: &Testbed, path: &str) -> String {
        let addr: SocketAddr = METRICS.parse().expect("a socket address");
        crate::http::get(Some(&bed.relay.ns), addr, path)
            .map(|(_, text)| text)
            .unwrap_or_default()
    }

    /// The sum of the relay's metric series starting with `series`.
    pub fn relay_metric(bed: &Testbed, series: &str) -> f64 {
        crate::http::metric_sum(&relay_http(bed, "/metrics"), series)
    }

    /// A fake transceiver (echoing frames) in the transceiver namespace and a probe from
    /// the client making a flow through the relay and sending `count` datagrams; returns
    /// what the probe said (`received N/M`).
    pub fn probe_through_relay(bed: &Testbed, count: u64) -> String {
        probe_through_relay_in(bed, false, count)
    }

    /// Like [`probe_through_relay`], over IPv6 when `ipv6`.
    pub fn probe_through_relay_in(bed: &Testbed, ipv6: bool, count: u64) -> String {
        probe_session_through_relay_in(bed, ipv6, count, 7)
    }

    /// Like [`probe_through_relay_in`], for session `session` (a second probe of one
    /// relay must name another session: the first one's request would be a replay).
    pub fn probe_session_through_relay_in(
        bed: &Testbed,
        ipv6: bool,
        count: u64,
        session: u8,
    ) -> String {
        let vip = vip(bed, ipv6).to_string();
        let transceiver = SocketAddr::new(bed.transceiver.ip(ipv6), 41000).to_string();
        let mut command = bed
            .transceiver
            .command(bin("ufrag-perf").to_str().expect("UTF-8 path"));
        command
            .args(["fake-transceiver", "--bind", &transceiver, "--idle", "5s"])
            .stdout(Stdio::null());
        let fake = OwnedChild::spawn(&mut command).expect("fake transceiver starts");
        std::thread::sleep(Duration::from_millis(200));
        let probe = bed
            .client
            .command(bin("ufrag-perf").to_str().expect("UTF-8 path"))
            .args([
                "relay-probe",
                "--vip",
                &vip,
                "--transceiver",
                &transceiver,
                "--count",
                &count.to_string(),
                "--session",
                &session.to_string(),
            ])
            .output()
            .expect("probe runs");
        drop(fake);
        String::from_utf8_lossy(&probe.stdout).trim().to_string()
    }

    /// Starts the transceiver in its namespace (signaling on 10.77.0.3:8080, media on
    /// :41000, relays allowed from the testbed's network) advertising `vip`, with `extra`
    /// flags; waits until `/readyz` answers 200 from the client's namespace. Returns it and
    /// its signaling address.
    pub fn start_transceiver(
        bed: &Testbed,
        vip: SocketAddr,
        extra: &[&str],
    ) -> (OwnedChild, SocketAddr) {
        let http = SocketAddr::from((bed.transceiver.addr, 8080));
        // The testbed's private network; the client sends no token.
        let mut flags: Vec<String> = ["--allow-unauthenticated", "--advertise"]
            .map(String::from)
            .to_vec();
        flags.extend([
            vip.to_string(),
            "--allow-relay-net".into(),
            "10.77.0.0/24".into(),
        ]);
        flags.extend(extra.iter().map(|f| f.to_string()));
        let launch = ufrag_testbed::launch::TransceiverLaunch {
            binary: bin("transceiver"),
            ns: Some(bed.transceiver.ns.clone()),
            http,
            bind: SocketAddr::from((bed.transceiver.addr, 41000)),
            ready_from: Some(bed.client.ns.clone()),
            flags,
            log_filter: None,
        };
        let child = launch
            .start(Stderr::Kept, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}"));
        (child, http)
    }

    /// A str0m client in the client namespace signals to `http`, checks that the answer's
    /// only candidate is `vip`, talks (25 audio packets, at least 20 echoed, and the data
    /// channel) and hangs up with a DELETE; `what` names the path in failures.
    pub fn echoed_session(bed: &Testbed, http: SocketAddr, vip: SocketAddr, what: &str) {
        use crate::webrtc_client::{Client, converse_with_echo};
        let ns = bed.client.ns.clone();
        let ip = bed.client.addr;
        let socket = crate::netns::in_netns(Some(&ns), move || std::net::UdpSocket::bind((ip, 0)))
            .expect("into the client's namespace")
            .expect("a client socket");
        let mut client = Client::with_socket(socket);
        let body = client.offer.clone();
        let answer = crate::http::request_in(
            Some(&ns),
            http,
            "POST",
            "/v1/sessions",
            Some(("application/sdp", &body)),
            &[],
        )
        .expect("the transceiver answers");
        assert_eq!(answer.status, 201, "{what}: {}", answer.body);
        assert!(
            answer
                .body
                .contains(&format!("{} {}", vip.ip(), vip.port())),
            "{what}: the candidate is the VIP {vip}"
        );
        client.apply_answer(&answer);
        let client = converse_with_echo(client, what, 25, 20);
        let location = client.location.clone().expect("a session location");
        let deleted = crate::http::request_in(Some(&ns), http, "DELETE", &location, None, &[]);
        assert_eq!(deleted.map(|r| r.status), Some(204), "{what}: DELETE");
    }
}
