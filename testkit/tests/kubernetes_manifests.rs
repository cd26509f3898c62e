//! The Kubernetes manifests (`deploy/kubernetes`), checked offline by
//! `deploy/kubernetes/check.py`: every object against the Kubernetes 1.37 schema (strict),
//! and what a schema cannot know (our binaries' flags, QoS, probes, capabilities, the key
//! file's mode, disruption budgets, node agents' host ports, Redis eviction, the network
//! policy's address block). The checker must also refuse manifests that are
//! wrong. Its Python (kubernetes-validate from PyPI) is installed by `scripts/test.sh`
//! (`UFRAG_K8S_PYTHON`); without it this test fails, it does not skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ufrag_testkit::cargo_build::bin;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Runs the checker on `dir` and the monitoring in `monitoring`, with our three binaries'
/// `--help`.
fn check(dir: &Path, monitoring: &Path) -> Output {
    let python = std::env::var_os("UFRAG_K8S_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/deploy-venv/bin/python"));
    assert!(
        python.exists(),
        "{} missing: scripts/test.sh installs kubernetes-validate there",
        python.display()
    );
    let mut command = Command::new(python);
    command
        .arg(workspace().join("deploy/kubernetes/check.py"))
        .arg(dir)
        .arg("--monitoring")
        .arg(monitoring);
    for name in ["relay-mio", "relay-afxdp", "transceiver"] {
        command
            .arg("--binary")
            .arg(format!("{name}={}", bin(name).display()));
    }
    command.output().expect("the checker runs")
}

/// Copies a directory tree.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Replaces `old` (which must be there) with `new` in `file`.
fn edit(file: &Path, old: &str, new: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(old), "{old} in {}", file.display());
    std::fs::write(file, text.replacen(old, new, 1)).unwrap();
}

#[test]
fn the_manifests_are_valid_and_consistent_with_the_binaries() {
    let out = check(
        &workspace().join("deploy/kubernetes"),
        &workspace().join("deploy/monitoring"),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("valid against Kubernetes 1.37.0 (strict)"),
        "{said}"
    );
}

#[test]
fn the_checker_refuses_manifests_that_are_wrong() {
    let dir = std::env::temp_dir().join(format!("ufrag-k8s-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_tree(&workspace().join("deploy/kubernetes"), &dir);
    let monitoring = std::env::temp_dir().join(format!("ufrag-monitoring-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&monitoring);
    copy_tree(&workspace().join("deploy/monitoring"), &monitoring);
    // Monitoring a stock kube-prometheus-stack would not pick up, or only in part.
    edit(
        &monitoring.join("podmonitor.yaml"),
        "      - ufrag-global\n",
        "",
    );
    edit(
        &monitoring.join("kustomization.yaml"),
        "      release: kube-prometheus-stack",
        "      team: voice",
    );
    // A relay whose pods lost the label the PodMonitor selects by.
    edit(
        &dir.join("overlays/loadbalancer/relay.yaml"),
        "        app.kubernetes.io/part-of: ufrag-relay",
        "        app.kubernetes.io/component: relay",
    );
    edit(
        &monitoring.join("alerts.yaml"),
        "runbook_url: https://example.invalid/ufrag-relay/docs/runbook.md#ufragrelaynotready",
        "runbook_url: docs/runbook.md#ufragrelaynotready",
    );
    let transceiver = dir.join("base/transceiver.yaml");
    edit(&transceiver, "--workers=2", "--wrokers=2");
    edit(&transceiver, "--drain-time=30s", "--workers=3");
    edit(&transceiver, "defaultMode: 0440", "defaultMode: 0444");
    edit(
        &transceiver,
        "- --metrics-addr=0.0.0.0:9591",
        "- --log-format=text",
    );
    edit(&transceiver, "- --demo-page=false", "- --demo-page=true");
    edit(
        &transceiver,
        "terminationGracePeriodSeconds: 40",
        "terminationGracePeriod: 40",
    );
    edit(
        &dir.join("overlays/afxdp/relay.yaml"),
        r#"add: ["BPF", "IPC_LOCK", "NET_ADMIN", "NET_RAW", "PERFMON"]"#,
        r#"add: ["BPF", "IPC_LOCK", "NET_ADMIN", "NET_RAW", "PERFMON", "SYS_ADMIN"]"#,
    );
    edit(
        &dir.join("overlays/loadbalancer/relay.yaml"),
        "externalTrafficPolicy: Local",
        "externalTrafficPolicy: Cluster",
    );
    edit(
        &dir.join("overlays/loadbalancer/kustomization.yaml"),
        "  - name: localhost/ufrag-relay/transceiver",
        "  - name: localhost/ufrag-relay/transceiver-typo",
    );
    edit(
        &dir.join("overlays/afxdp/relay.yaml"),
        "- --bind-mode=zerocopy",
        "- --log-format=json",
    );
    edit(
        &dir.join("overlays/hostnetwork/relay.yaml"),
        "hostPort: 9590",
        "hostPort: 9100",
    );
    edit(
        &dir.join("base/redis.yaml"),
        r#""--maxmemory", "800mb","#,
        "",
    );
    edit(
        &dir.join("overlays/loadbalancer/relay.yaml"),
        "- --redis-password-file=/etc/ufrag/redis/password",
        "- --log-format=json",
    );
    edit(
        &dir.join("overlays/afxdp/relay.yaml"),
        "secretName: redis-auth\n            defaultMode: 0400",
        "secretName: redis-auth\n            defaultMode: 0404",
    );
    edit(
        &dir.join("base/redis.yaml"),
        "requirepass $(cat /etc/redis/auth/password)",
        "appendonly no",
    );
    edit(
        &dir.join("base/network-policy.yaml"),
        "cidr: 10.0.0.0/8",
        "cidr: 10.0.0.0/16",
    );
    edit(
        &dir.join("overlays/hostnetwork/relay.yaml"),
        "--redis-url=rediss://",
        "--redis-url=redis://",
    );
    edit(&dir.join("base/redis.yaml"), r#""--port", "0", "#, "");
    edit(
        &dir.join("overlays/afxdp/relay.yaml"),
        "- --redis-url=rediss://redis.ufrag.svc.cluster.local:6379",
        "- --redis-url\n            - redis://redis-split.ufrag.svc.cluster.local:6379",
    );
    edit(
        &dir.join("base/redis.yaml"),
        "secretName: redis-tls\n            defaultMode: 0440",
        "secretName: redis-tls\n            defaultMode: 0444",
    );
    edit(
        &dir.join("global/namespace.yaml"),
        "  name: ufrag-global\n",
        "  name: ufrag-global\n  name: ufrag-global\n",
    );
    // Example Secrets added back: the tests' hint key, and a placeholder token.
    std::fs::write(
        dir.join("base/example-secrets.yaml"),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: hint-keys\nstringData:\n  \
             hint.keys: |\n    {}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  \
             name: signaling-token\ndata:\n  token: {}\n",
            ufrag_testkit::keys::KEYS,
            "UkVQTEFDRS1NRS13aXRoLWEtbG9uZy1yYW5kb20tdG9rZW4=",
        ),
    )
    .unwrap();
    edit(
        &transceiver,
        "          env:\n",
        "          env:\n            - name: UFRAG_ALLOW_EXAMPLE_SECRETS\n              value: \"1\"\n",
    );
    edit(
        &dir.join("overlays/hostnetwork/kustomization.yaml"),
        "images:",
        "secretGenerator:\n  - name: hint-keys\n    literals:\n      \
         - hint.keys=1:2222222222222222222222222222222222222222222222222222222222222222\n\
         images:",
    );
    // Privileges: capabilities that uid 65532 would lose at exec, root for nothing, a
    // privileged container; and relay-afxdp needing a step on every node.
    let afxdp = dir.join("overlays/afxdp/relay.yaml");
    edit(
        &afxdp,
        "            runAsUser: 0\n            runAsGroup: 0\n",
        "",
    );
    edit(&afxdp, "- --interface=auto", "- --interface=eth0");
    edit(&afxdp, "            - --set-queues\n", "");
    edit(
        &dir.join("overlays/loadbalancer/relay.yaml"),
        "runAsUser: 65532",
        "runAsUser: 0",
    );
    edit(
        &dir.join("global/relay.yaml"),
        "            allowPrivilegeEscalation: false\n",
        "            privileged: true\n",
    );
    // The issue's first design: an init container running ethtool, privileged.
    edit(
        &dir.join("overlays/hostnetwork/relay.yaml"),
        "      containers:\n",
        "      initContainers:\n        - name: queues\n          image: debian:12\n          \
         command: [\"ethtool\", \"-L\", \"eth0\", \"combined\", \"2\"]\n          \
         securityContext:\n            privileged: true\n            capabilities:\n              \
         add: [\"NET_ADMIN\"]\n      containers:\n",
    );
    let out = check(&dir, &monitoring);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&monitoring);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    for problem in [
        "transceiver has no flag --wrokers",
        "/metrics on the public signaling port: give --metrics-addr",
        "the demo page on the public signaling port",
        "hint keys mounted with mode 0444",
        "terminationGracePeriod",
        "want ['BPF', 'IPC_LOCK', 'NET_ADMIN', 'NET_RAW', 'PERFMON']",
        "must keep the client's address",
        "hostPort 9100 is node_exporter's on every node",
        "native XDP without --bind-mode copies every frame",
        "overlays/loadbalancer/kustomization.yaml: deploys localhost/ufrag-relay/transceiver with no images: entry",
        "--maxmemory-policy volatile-ttl without --maxmemory never evicts",
        "uses Redis without its password: give --redis-password-file",
        "the Redis password mounted with mode 0404",
        "Redis asks for no password: give it requirepass",
        "talks to Redis in plain text (redis://redis.ufrag.svc.cluster.local:6379)",
        "Redis serves plain text: give it --tls-port and --port 0",
        "talks to Redis in plain text (redis://redis-split.ufrag.svc.cluster.local:6379)",
        "Redis's TLS material mounted with mode 0444",
        "global/namespace.yaml: line 5: key 'name' given twice",
        "ipBlock 10.0.0.0/16 leaves out part of RELAY_NET 10.0.0.0/8",
        "its workers bind UDP [41000, 41001, 41002], its pod declares [41000, 41001]",
        "lists UDP [41000, 41001], the workers bind [41000, 41001, 41002]",
        "admits UDP [41000, 41001], the workers bind [41000, 41001, 41002]",
        "Secret/hint-keys: hint.keys: hint key 1 is an example secret (guessable bytes)",
        "Secret/signaling-token: token: a REPLACE-ME placeholder",
        "sets UFRAG_ALLOW_EXAMPLE_SECRETS, which only tests may",
        "secretGenerator hint-keys: hint.keys: hint key 1 is an example secret",
        "PodMonitor never scrapes global/relay.yaml: DaemonSet/global-relay: its namespace \
         ufrag-global is not in namespaceSelector.matchNames",
        "no `release` label: a stock kube-prometheus-stack selects PodMonitors",
        "no PodMonitor selects overlays/loadbalancer/relay.yaml:",
        "but runs as uid 65532: Kubernetes gives added capabilities to uid 0 only",
        "runs as uid 0 with no capability added",
        "privileged: every capability and device of the node",
        "DaemonSet/relay (init queues): adds ['NET_ADMIN'] but runs as uid 65532",
        "DaemonSet/relay (init queues): privileged",
        "allowPrivilegeEscalation is not false",
        "--interface=eth0 names an interface every node must have",
        "without --set-queues every node needs `ethtool -L` by hand",
        "alerts.yaml: UfragRelayNotReady: runbook_url 'docs/runbook.md#ufragrelaynotready' is \
         not an absolute https link",
    ] {
        assert!(said.contains(problem), "`{problem}` in:\n{said}");
    }
}
