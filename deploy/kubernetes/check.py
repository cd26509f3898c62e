#!/usr/bin/env python3
"""Checks the Kubernetes manifests under a directory, offline.

Every object is validated against the Kubernetes OpenAPI schema of one release
(kubernetes-validate, strict: unknown fields are errors). Then what a schema cannot
know about this project:

- every kustomization's resources exist;
- every `--flag` a container of ours passes is one its binary accepts (`--help` of the
  binaries given with --binary NAME=PATH), and every `$(VAR)` it uses is set in its env;
- our workloads get Guaranteed QoS (requests equal limits, whole CPUs), readiness on
  /readyz and liveness on /healthz, a preStop wait, all capabilities dropped, and added
  back only what relay-afxdp needs (BPF, IPC_LOCK, NET_ADMIN, NET_RAW, PERFMON), to
  relay-afxdp alone;
- no container (init containers too) is privileged or may escalate; a container that
  adds capabilities runs as uid 0 (Kubernetes sets no ambient capabilities: another uid
  loses them at exec), one of ours that adds none does not, and none runs as uid 0 under
  runAsNonRoot;
- relay-afxdp needs no step on the node: it finds its interface (`--interface=auto`) and
  sets its queue count (`--set-queues`) itself;
- the hint-key and Redis-password Secrets and Redis's TLS material are mounted readable
  by no one but their owner and the pod's own group (fsGroup), in every pod (Redis's
  too): the binaries refuse a secret file readable by others or by another group;
- no file names one mapping key twice (kustomize refuses it; PyYAML keeps the last);
- a relay that uses Redis is given its password (`--redis-password-file`), and the Redis
  of ours asks for one (`requirepass`): without it any pod that reaches Redis reads and
  writes every route;
- the relays speak TLS to Redis (`rediss://` URLs), and the Redis of ours serves TLS only
  (`--tls-port`, `--port 0`): in plain text, the password and every route cross the
  cluster network readable;
- every workload of ours has a PodDisruptionBudget, and a LoadBalancer keeps the client's
  source address (`externalTrafficPolicy: Local`);
- no container takes a host port that a node agent holds on every node (9100:
  node_exporter's);
- a Redis that evicts (a `--maxmemory-policy` other than noeviction) is given a
  `--maxmemory` below its memory limit: without it Redis never evicts and is OOM-killed;
- a NetworkPolicy's address block admits the whole network the transceiver accepts
  relays from (`RELAY_NET` in a ConfigMap);
- relay-afxdp in native XDP mode says its AF_XDP bind mode (`--bind-mode`): left out it
  is copy, which a lab or a node with a zero-copy NIC does not want by accident;
- every kustomization a user applies (one no other includes) maps each of our images it
  deploys (`images:`), so none is pulled as `localhost/…`;
- a transceiver whose signaling listens beyond loopback serves /metrics on a listener of
  its own (`--metrics-addr`) and no demo page (`--demo-page=false`) on that public port;
- the transceiver's media ports, one per worker from `--bind`'s port (`--workers`), are
  each declared by its pod, listed by every Service that selects it with UDP ports, and
  admitted by every NetworkPolicy that selects it.
- no Secret, secretGenerator literal or container env holds an example secret: a hint
  key of guessable bytes (the tests' key is 00 01 02 …: anyone could forge ICE checks
  with it) or a `REPLACE-ME` placeholder (the binaries refuse such a key and token
  too; a placeholder Redis password only this check catches), and no container sets
  UFRAG_ALLOW_EXAMPLE_SECRETS, the tests' switch; the manifests ship no Secret at all.

With --monitoring DIR (deploy/monitoring), what a stock kube-prometheus-stack needs to pick
the monitoring up:

- its kustomization labels every object with `release` (the chart's default PodMonitor and
  PrometheusRule selectors), in one `labels` entry a team edits;
- the PodMonitor's namespaceSelector names every namespace a workload it selects runs in
  (the cluster's and the global relay tier's), and each such pod declares its port;
- every workload of ours is selected by a PodMonitor;
- every alert's runbook_url is an absolute https link to a runbook section, and the
  kustomization rewrites the PrometheusRule's links from its one `runbook-base` setting.

Prints one line per problem and exits 1 if there is any, else prints a summary and exits 0.

  check.py deploy/kubernetes --monitoring deploy/monitoring --binary relay-mio=... ...
"""

import argparse
import base64
import ipaddress
import pathlib
import re
import subprocess
import sys

import kubernetes_validate
import yaml

KUBERNETES = "1.37.0"
OUR_IMAGES = ("relay-mio", "relay-afxdp", "transceiver")
# The Secrets our binaries read as files, and what each holds.
SECRET_FILES = {
    "hint-keys": "hint keys",
    "redis-auth": "the Redis password",
    "redis-tls": "Redis's TLS material",
}
# The flags that point a relay at Redis.
REDIS_FLAGS = ("--redis-url", "--redis-cluster-node", "--redis-sentinel")
AFXDP_CAPABILITIES = {"BPF", "IPC_LOCK", "NET_ADMIN", "NET_RAW", "PERFMON"}
# The USER of the images scripts/images.sh builds.
IMAGE_USER = 65532
NODE_AGENT_PORTS = {9100: "node_exporter", 10250: "the kubelet", 10256: "kube-proxy"}
BYTES = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30,
         "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "t": 10**12}


class DuplicateKey(Exception):
    """A mapping names one key twice: kustomize refuses the file, PyYAML keeps the last."""


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise DuplicateKey(f"line {line}: key {key!r} given twice")
            seen.add(key)
        return super().construct_mapping(node, deep)


def strict_load_all(text):
    """Every document of `text`; DuplicateKey if a mapping names a key twice."""
    return list(yaml.load_all(text, Loader=UniqueKeyLoader))


def image_binary(image):
    """`localhost/ufrag-relay/relay-mio:0.1.0` -> `relay-mio`."""
    return image.rsplit("/", 1)[-1].split(":", 1)[0]


def flags_of(path):
    """The long flags a binary's --help lists."""
    text = subprocess.run([path, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"--[a-z][a-z0-9-]*", text))


def whole_cpus(value):
    return re.fullmatch(r"[1-9][0-9]*", str(value)) is not None


def size_in_bytes(text):
    """`800mb` (Redis) or `1Gi` (Kubernetes) in bytes; None if neither."""
    m = re.fullmatch(r"([0-9]+)([a-zA-Z]*)", str(text).strip())
    if not m or m.group(2).lower() not in BYTES:
        return None
    return int(m.group(1)) * BYTES[m.group(2).lower()]


def check_host_ports(where, container, problems):
    for port in container.get("ports", []):
        agent = NODE_AGENT_PORTS.get(port.get("hostPort"))
        if agent:
            problems.append(f"{where}: hostPort {port['hostPort']} is {agent}'s on every node")


def args_of(container):
    return [str(a) for a in container.get("args", [])]


def check_redis(where, container, problems):
    script = " ".join(str(c) for c in container.get("command", []))
    if "requirepass" not in script and "--requirepass" not in args_of(container):
        problems.append(f"{where}: Redis asks for no password: give it requirepass")
    args = args_of(container)
    value = lambda flag: args[args.index(flag) + 1] if flag in args[:-1] else None
    if value("--tls-port") is None or value("--port") != "0":
        problems.append(
            f"{where}: Redis serves plain text: give it --tls-port and --port 0"
        )
    policy = value("--maxmemory-policy")
    if policy is None or policy == "noeviction":
        return
    limit = size_in_bytes(container.get("resources", {}).get("limits", {}).get("memory", ""))
    maxmemory = size_in_bytes(value("--maxmemory") or "")
    if not maxmemory:
        problems.append(
            f"{where}: --maxmemory-policy {policy} without --maxmemory never evicts: "
            "Redis is OOM-killed at its memory limit"
        )
    elif limit is None or maxmemory >= limit:
        problems.append(f"{where}: --maxmemory {value('--maxmemory')} is not below its limit")


def media_ports(container):
    """The UDP ports a transceiver's workers bind: `--bind`'s port and one more per
    worker beyond the first; None for another binary or without `--bind`."""
    if image_binary(container.get("image", "")) != "transceiver":
        return None
    args = dict(a.split("=", 1) for a in container.get("args", []) if "=" in a)
    bind = args.get("--bind", "")
    if not re.search(r":[0-9]+$", bind):
        return None
    first = int(bind.rsplit(":", 1)[1])
    return set(range(first, first + int(args.get("--workers", "1"))))


def our_images_in(kustomization):
    """Our images (without tags) that the resources of `kustomization` deploy, nested
    kustomizations included."""
    found = set()
    for resource in yaml.safe_load(kustomization.read_text()).get("resources", []):
        target = kustomization.parent / resource
        if (target / "kustomization.yaml").is_file():
            found |= our_images_in(target / "kustomization.yaml")
        elif target.is_file():
            for doc in yaml.safe_load_all(target.read_text()):
                template = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
                for container in template.get("containers", []):
                    image = container.get("image", "")
                    if image_binary(image) in OUR_IMAGES:
                        found.add(image.rsplit(":", 1)[0])
    return found


def check_images_mapped(directory, problems):
    kustomizations = sorted(directory.rglob("kustomization.yaml"))
    included = set()
    for k in kustomizations:
        for resource in yaml.safe_load(k.read_text()).get("resources", []):
            included.add((k.parent / resource / "kustomization.yaml").resolve())
    for k in kustomizations:
        if k.resolve() in included:
            continue
        mapped = {i.get("name") for i in yaml.safe_load(k.read_text()).get("images", [])}
        for image in sorted(our_images_in(k) - mapped):
            problems.append(
                f"{k.relative_to(directory)}: deploys {image} with no images: entry "
                "(it would be pulled from localhost)"
            )


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_media_ports(objects, problems):
    for name, doc in objects:
        if doc.get("kind") not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        labels = doc["spec"]["template"]["metadata"]["labels"]
        for container in doc["spec"]["template"]["spec"]["containers"]:
            wanted = media_ports(container)
            if not wanted:
                continue
            declared = {
                p["containerPort"]
                for p in container.get("ports", [])
                if p.get("protocol") == "UDP"
            }
            if declared != wanted:
                problems.append(
                    f"{name}: its workers bind UDP {sorted(wanted)}, its pod declares "
                    f"{sorted(declared)}"
                )
            for other, obj in objects:
                kind, spec = obj.get("kind"), obj.get("spec", {})
                if kind == "Service" and selects(spec.get("selector"), labels):
                    listed = {p["port"] for p in spec.get("ports", []) if p.get("protocol") == "UDP"}
                    if listed and listed != wanted:
                        problems.append(
                            f"{other}: lists UDP {sorted(listed)}, the workers bind {sorted(wanted)}"
                        )
                if kind == "NetworkPolicy" and selects(
                    spec.get("podSelector", {}).get("matchLabels"), labels
                ):
                    admitted = set()
                    for rule in spec.get("ingress", []):
                        for p in rule.get("ports", []):
                            if p.get("protocol") == "UDP":
                                admitted |= set(range(p["port"], p.get("endPort", p["port"]) + 1))
                    if admitted and not wanted <= admitted:
                        problems.append(
                            f"{other}: admits UDP {sorted(admitted)}, the workers bind "
                            f"{sorted(wanted)}"
                        )


def check_secret_modes(where, container, pod, problems):
    """Secret files (ours, and Redis's) readable by no one but their owner and the pod's
    own group (fsGroup); our binaries refuse them otherwise."""
    secrets = {
        v["name"]: v["secret"]
        for v in pod.get("volumes", [])
        if "secret" in v
    }
    fs_group = pod.get("securityContext", {}).get("fsGroup")
    for mount in container.get("volumeMounts", []):
        secret = secrets.get(mount["name"])
        if secret and secret.get("secretName") in SECRET_FILES:
            what = SECRET_FILES[secret["secretName"]]
            mode = secret.get("defaultMode", 0o644)
            if mode & 0o007 or (mode & 0o070 and fs_group is None):
                problems.append(
                    f"{where}: {what} mounted with mode {mode:04o}: readable by others, or "
                    "by a group not the pod's own (fsGroup); our binaries refuse such a file"
                )


def is_example_secret(secret):
    """Guessable rather than random (the binaries' own rule,
    `ufrag_common::hint::is_example_secret`): bytes in a fixed step (the tests' key
    00 01 02 …, a repeated byte), fewer than 8 distinct values, or printable text only."""
    step = (secret[1] - secret[0]) % 256 if len(secret) > 1 else 0
    stepped = all((b - a) % 256 == step for a, b in zip(secret, secret[1:]))
    few_values = len(set(secret)) < 8
    text = all(0x20 <= b <= 0x7E for b in secret)
    return stepped or few_values or text


def example_secrets_in(value):
    """Why a secret's value is an example's, if it is: a placeholder, or a hint key line
    (`<id>:<hex>`) with a guessable secret."""
    if value.strip().upper().startswith("REPLACE-ME"):
        return "a REPLACE-ME placeholder"
    for line in re.split(r"[\n,]", value):
        key = line.split("#", 1)[0].strip()
        match = re.fullmatch(r"(\d+)\s*:\s*([0-9a-fA-F]+)", key)
        if match and len(match.group(2)) % 2 == 0:
            if is_example_secret(bytes.fromhex(match.group(2))):
                return f"hint key {match.group(1)} is an example secret (guessable bytes)"
    return None


def check_env_secrets(where, container, problems):
    """No container is allowed example secrets, nor given one in its env."""
    for var in container.get("env", []):
        if var.get("name") == "UFRAG_ALLOW_EXAMPLE_SECRETS":
            problems.append(
                f"{where}: sets UFRAG_ALLOW_EXAMPLE_SECRETS, which only tests may: it lets "
                "an example hint key or token through"
            )
        why = example_secrets_in(str(var.get("value", "")))
        if why:
            problems.append(f"{where}: env {var.get('name')}: {why}")


def check_secret_generator(where, kustomization, problems):
    """A kustomization's secretGenerator literals must not carry an example secret."""
    for generator in kustomization.get("secretGenerator", []) or []:
        for literal in generator.get("literals", []) or []:
            key, _, value = str(literal).partition("=")
            why = example_secrets_in(value)
            if why:
                problems.append(
                    f"{where}: secretGenerator {generator.get('name')}: {key}: {why}"
                )


def check_secret(name, doc, problems):
    """A Secret in the manifests must not carry an example secret."""
    values = dict(doc.get("stringData") or {})
    for key, encoded in (doc.get("data") or {}).items():
        try:
            values[key] = base64.b64decode(encoded).decode("utf-8", "replace")
        except ValueError:
            continue
    for key, value in values.items():
        why = example_secrets_in(str(value))
        if why:
            problems.append(
                f"{name}: {key}: {why}; create the Secret with `kubectl create secret` and "
                "`openssl rand -hex 32` instead (see base/kustomization.yaml)"
            )


def run_as_user(container, pod):
    """The uid a container runs as: its own securityContext's, else the pod's, else the
    USER of our images (65532); None for another image that says nothing."""
    for context in (container.get("securityContext", {}), pod.get("securityContext", {})):
        if "runAsUser" in context:
            return context["runAsUser"]
    return IMAGE_USER if image_binary(container.get("image", "")) in OUR_IMAGES else None


def check_privileges(where, container, pod, problems):
    """Added capabilities work for uid 0 only: Kubernetes sets no ambient capabilities, so
    a process of another uid loses them at exec and fails where it needs them. Uid 0 is
    then held to those capabilities; uid 0 with none added is root for nothing. Checked
    for init containers too, whatever their image."""
    context = container.get("securityContext", {})
    added = set(context.get("capabilities", {}).get("add", []))
    if context.get("privileged"):
        problems.append(f"{where}: privileged: every capability and device of the node; "
                        "add only the capabilities it needs")
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}: allowPrivilegeEscalation is not false")
    uid = run_as_user(container, pod)
    if added and uid != 0:
        problems.append(
            f"{where}: adds {sorted(added)} but runs as uid {uid if uid is not None else 'of its image'}: "
            "Kubernetes gives added capabilities to uid 0 only (without ambient capabilities "
            "they are lost at exec); set runAsUser: 0 beside them"
        )
    if uid == 0 and not added and image_binary(container.get("image", "")) in OUR_IMAGES:
        problems.append(f"{where}: runs as uid 0 with no capability added: run as 65532")
    non_root = next((c["runAsNonRoot"] for c in (context, pod.get("securityContext", {}))
                     if "runAsNonRoot" in c), False)
    if uid == 0 and non_root:
        problems.append(f"{where}: runAsNonRoot with uid 0: the kubelet refuses to start it")


def check_afxdp_node_steps(where, args, problems):
    """relay-afxdp on a DaemonSet needs no step on the node: it finds its interface
    (`--interface=auto`: the one holding the node's address, whatever the NIC's name)
    and gives it one RX queue per worker (`--set-queues`) itself."""
    interface = next((a.split("=", 1)[1] for a in args if a.startswith("--interface=")), "")
    if "--interface" in args[:-1]:
        interface = args[args.index("--interface") + 1]  # `--interface auto`, two arguments
    if interface != "auto":
        problems.append(
            f"{where}: --interface={interface} names an interface every node must have: "
            "pass --interface=auto (the one holding the node's address)"
        )
    if "--set-queues" not in args:
        problems.append(
            f"{where}: without --set-queues every node needs `ethtool -L` by hand to have "
            "one RX queue per worker: pass --set-queues"
        )


def check_container(where, container, pod, flags, problems):
    check_host_ports(where, container, problems)
    check_secret_modes(where, container, pod, problems)
    check_env_secrets(where, container, problems)
    binary = image_binary(container.get("image", ""))
    if binary == "redis":
        check_redis(where, container, problems)
    if binary not in OUR_IMAGES:
        return
    env = {e["name"] for e in container.get("env", [])}
    for arg in container.get("args", []):
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and binary in flags and flag not in flags[binary]:
            problems.append(f"{where}: {binary} has no flag {flag}")
        for var in re.findall(r"\$\(([A-Z_][A-Z0-9_]*)\)", arg):
            if var not in env:
                problems.append(f"{where}: {arg} uses $({var}), which its env does not set")
    resources = container.get("resources", {})
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    if not requests or requests != limits or not whole_cpus(requests.get("cpu")):
        problems.append(f"{where}: not Guaranteed QoS with whole CPUs: {resources}")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        if container.get(probe, {}).get("httpGet", {}).get("path") != path:
            problems.append(f"{where}: {probe} is not GET {path}")
    if "preStop" not in container.get("lifecycle", {}):
        problems.append(f"{where}: no preStop wait before the drain")
    caps = container.get("securityContext", {}).get("capabilities", {})
    if caps.get("drop") != ["ALL"]:
        problems.append(f"{where}: capabilities not dropped: {caps}")
    args = container.get("args", [])
    if binary == "relay-afxdp" and "--xdp-mode=native" in args and not any(
        a.startswith("--bind-mode=") for a in args
    ):
        problems.append(
            f"{where}: native XDP without --bind-mode copies every frame: ask for "
            "--bind-mode=zerocopy, or say --bind-mode=copy"
        )
    http_addr = next((a.split("=", 1)[1] for a in args if a.startswith("--http-addr=")), "")
    if binary == "transceiver" and not http_addr.startswith(("127.", "[::1]")):
        if not any(a.startswith("--metrics-addr=") for a in args):
            problems.append(
                f"{where}: /metrics on the public signaling port: give --metrics-addr"
            )
        if "--demo-page=false" not in args:
            problems.append(f"{where}: the demo page on the public signaling port: "
                            "pass --demo-page=false")
    added = set(caps.get("add", []))
    wanted = AFXDP_CAPABILITIES if binary == "relay-afxdp" else set()
    if added != wanted:
        problems.append(f"{where}: capabilities added {sorted(added)}, want {sorted(wanted)}")
    check_privileges(where, container, pod, problems)
    if binary == "relay-afxdp":
        check_afxdp_node_steps(where, args, problems)
    uses_redis = any(a.split("=", 1)[0] in REDIS_FLAGS for a in args_of(container))
    has_password = any(a.startswith("--redis-password-file") for a in args_of(container)) or (
        "UFRAG_REDIS_PASSWORD" in env
    )
    if uses_redis and not has_password:
        problems.append(
            f"{where}: uses Redis without its password: give --redis-password-file"
        )
    args = args_of(container)
    for at, arg in enumerate(args):
        flag, _, url = arg.partition("=")
        if flag in REDIS_FLAGS and not url and at + 1 < len(args):
            url = args[at + 1]  # `--redis-url URL`, two arguments
        if flag in REDIS_FLAGS and url and not url.startswith("rediss://"):
            problems.append(
                f"{where}: talks to Redis in plain text ({url}): use a rediss:// URL "
                "(--redis-ca-file for your CA)"
            )


def namespace_of(path, root):
    """The namespace the nearest kustomization at or above `path`'s directory sets."""
    directory = path.parent
    while True:
        kustomization = directory / "kustomization.yaml"
        if kustomization.is_file():
            namespace = (yaml.safe_load(kustomization.read_text()) or {}).get("namespace")
            if namespace:
                return namespace
        if directory == root or directory == directory.parent:
            return "default"
        directory = directory.parent


def check_monitoring(monitoring, workloads, problems):
    """`monitoring` (deploy/monitoring) against the workloads (namespace, pod labels, port
    names) of the manifests: what a stock kube-prometheus-stack needs to pick it up."""
    kustomization = yaml.safe_load((monitoring / "kustomization.yaml").read_text())
    where = monitoring.name + "/kustomization.yaml"
    labels = {}
    for entry in kustomization.get("labels", []):
        if entry.get("includeSelectors"):
            problems.append(f"{where}: labels must not reach selectors (includeSelectors)")
        labels.update(entry.get("pairs", {}))
    if "release" not in labels:
        problems.append(
            f"{where}: no `release` label: a stock kube-prometheus-stack selects PodMonitors "
            "and PrometheusRules by it"
        )
    rewrites_links = any(
        "runbook_url" in path
        for replacement in kustomization.get("replacements", [])
        for target in replacement.get("targets", [])
        if target.get("select", {}).get("kind") == "PrometheusRule"
        for path in target.get("fieldPaths", [])
    )
    if not rewrites_links:
        problems.append(f"{where}: no replacement sets the PrometheusRule's runbook_url base")
    monitors = []
    for path in sorted(monitoring.glob("*.yaml")):
        if path.name == "kustomization.yaml" or path.name.endswith(".test.yaml"):
            continue
        for doc in strict_load_all(path.read_text()):
            if not doc:
                continue
            groups = doc.get("groups") or doc.get("spec", {}).get("groups", [])
            for rule in (r for g in groups for r in g.get("rules", [])):
                url = rule.get("annotations", {}).get("runbook_url", "")
                if "alert" in rule and not re.fullmatch(r"https://[^#\s]+#[a-z0-9-]+", url):
                    problems.append(
                        f"{monitoring.name}/{path.name}: {rule['alert']}: runbook_url {url!r} "
                        "is not an absolute https link to a runbook section"
                    )
            if doc.get("kind") != "PodMonitor":
                continue
            monitors.append(doc)
            watched = set(doc["spec"].get("namespaceSelector", {}).get("matchNames", []))
            ports = {e.get("port") for e in doc["spec"].get("podMetricsEndpoints", [])}
            for name, namespace, pod_labels, pod_ports in workloads:
                if not selects(doc["spec"]["selector"].get("matchLabels", {}), pod_labels):
                    continue
                if namespace not in watched:
                    problems.append(
                        f"{monitoring.name}/{path.name}: PodMonitor never scrapes {name}: its "
                        f"namespace {namespace} is not in namespaceSelector.matchNames"
                    )
                if not ports & pod_ports:
                    problems.append(
                        f"{monitoring.name}/{path.name}: {name} declares none of the "
                        f"PodMonitor's ports {sorted(ports)}"
                    )
    for name, _, pod_labels, _ in workloads:
        if not any(
            selects(m["spec"]["selector"].get("matchLabels", {}), pod_labels) for m in monitors
        ):
            problems.append(f"{monitoring.name}: no PodMonitor selects {name}: it is never scraped")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=pathlib.Path)
    parser.add_argument("--binary", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--monitoring", type=pathlib.Path, metavar="DIR")
    args = parser.parse_args()
    flags = {}
    for spec in args.binary:
        name, path = spec.split("=", 1)
        flags[name] = flags_of(path)

    problems, objects, namespaces = [], [], {}
    for path in sorted(args.directory.rglob("*.yaml")):
        where = path.relative_to(args.directory)
        if path.name == "kustomization.yaml":
            kustomization = yaml.safe_load(path.read_text())
            check_secret_generator(where, kustomization, problems)
            for resource in kustomization.get("resources", []):
                target = path.parent / resource
                if not (target.is_file() or (target / "kustomization.yaml").is_file()):
                    problems.append(f"{where}: resource {resource} does not exist")
            continue
        try:
            docs = strict_load_all(path.read_text())
        except DuplicateKey as e:
            problems.append(f"{where}: {e}")
            continue
        for doc in docs:
            if doc is None:
                continue
            name = f"{where}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            try:
                kubernetes_validate.validate(doc, KUBERNETES, strict=True)
            except kubernetes_validate.ValidationError as e:
                problems.append(f"{name}: {e.message} (at {'/'.join(map(str, e.path))})")
            objects.append((name, doc))
            namespaces[name] = doc.get("metadata", {}).get("namespace") or namespace_of(
                path, args.directory
            )

    budgets = [
        doc["spec"]["selector"]["matchLabels"]
        for _, doc in objects
        if doc.get("kind") == "PodDisruptionBudget"
    ]
    relay_nets = {
        doc["data"]["RELAY_NET"]
        for _, doc in objects
        if doc.get("kind") == "ConfigMap" and "RELAY_NET" in doc.get("data", {})
    }
    workloads = 0
    for name, doc in objects:
        kind = doc.get("kind")
        if kind == "NetworkPolicy":
            for rule in doc["spec"].get("ingress", []):
                for peer in rule.get("from", []):
                    cidr = peer.get("ipBlock", {}).get("cidr")
                    for net in map(ipaddress.ip_network, relay_nets if cidr else []):
                        block = ipaddress.ip_network(cidr)
                        if net.version == block.version and not net.subnet_of(block):
                            problems.append(
                                f"{name}: ipBlock {cidr} leaves out part of RELAY_NET {net}, "
                                "the relays the transceiver accepts"
                            )
        if kind == "Secret":
            check_secret(name, doc, problems)
        if kind == "Service" and doc["spec"].get("type") == "LoadBalancer":
            if doc["spec"].get("externalTrafficPolicy") != "Local":
                problems.append(f"{name}: a LoadBalancer must keep the client's address (Local)")
        if kind not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []):
            check_privileges(f"{name} (init {container['name']})", container, pod, problems)
        if not any(image_binary(c.get("image", "")) in OUR_IMAGES for c in pod["containers"]):
            for container in pod["containers"]:
                check_container(f"{name} ({container['name']})", container, pod, flags, problems)
            continue
        workloads += 1
        labels = doc["spec"]["template"]["metadata"]["labels"]
        if not any(all(labels.get(k) == v for k, v in b.items()) for b in budgets):
            problems.append(f"{name}: no PodDisruptionBudget selects it")
        for container in pod["containers"]:
            check_container(f"{name} ({container['name']})", container, pod, flags, problems)

    check_media_ports(objects, problems)
    check_images_mapped(args.directory, problems)
    if args.monitoring:
        workloads = [
            (
                name,
                namespaces[name],
                doc["spec"]["template"]["metadata"].get("labels", {}),
                {
                    port.get("name")
                    for c in doc["spec"]["template"]["spec"]["containers"]
                    for port in c.get("ports", [])
                },
            )
            for name, doc in objects
            if doc.get("kind") in ("Deployment", "DaemonSet", "StatefulSet")
            and any(
                image_binary(c.get("image", "")) in OUR_IMAGES
                for c in doc["spec"]["template"]["spec"]["containers"]
            )
        ]
        check_monitoring(args.monitoring, workloads, problems)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(
        f"{len(objects)} objects valid against Kubernetes {KUBERNETES} (strict), "
        f"{workloads} workloads checked, flags of {sorted(flags)} checked"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
