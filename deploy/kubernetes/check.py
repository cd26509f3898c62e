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
  back only what relay-afxdp needs (BPF, NET_ADMIN, NET_RAW), to relay-afxdp alone;
- the hint-key Secret is mounted readable by no one but its owner and the pod's own group
  (fsGroup): the binaries refuse a key file readable by others or by another group;
- every workload of ours has a PodDisruptionBudget, and a LoadBalancer keeps the client's
  source address (`externalTrafficPolicy: Local`).

Prints one line per problem and exits 1 if there is any, else prints a summary and exits 0.

  check.py deploy/kubernetes --binary relay-mio=target/debug/relay-mio ...
"""

import argparse
import pathlib
import re
import subprocess
import sys

import kubernetes_validate
import yaml

KUBERNETES = "1.37.0"
OUR_IMAGES = ("relay-mio", "relay-afxdp", "transceiver")
AFXDP_CAPABILITIES = {"BPF", "NET_ADMIN", "NET_RAW"}


def image_binary(image):
    """`localhost/ufrag-relay/relay-mio:0.1.0` -> `relay-mio`."""
    return image.rsplit("/", 1)[-1].split(":", 1)[0]


def flags_of(path):
    """The long flags a binary's --help lists."""
    text = subprocess.run([path, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"--[a-z][a-z0-9-]*", text))


def whole_cpus(value):
    return re.fullmatch(r"[1-9][0-9]*", str(value)) is not None


def check_container(where, container, pod, flags, problems):
    binary = image_binary(container.get("image", ""))
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
    added = set(caps.get("add", []))
    wanted = AFXDP_CAPABILITIES if binary == "relay-afxdp" else set()
    if added != wanted:
        problems.append(f"{where}: capabilities added {sorted(added)}, want {sorted(wanted)}")
    secrets = {
        v["name"]: v["secret"]
        for v in pod.get("volumes", [])
        if "secret" in v
    }
    fs_group = pod.get("securityContext", {}).get("fsGroup")
    for mount in container.get("volumeMounts", []):
        secret = secrets.get(mount["name"])
        if secret and secret.get("secretName") == "hint-keys":
            mode = secret.get("defaultMode", 0o644)
            if mode & 0o007 or (mode & 0o070 and fs_group is None):
                problems.append(
                    f"{where}: hint keys mounted with mode {mode:04o}; the binaries refuse "
                    "a key file readable by others, or by a group not their own (fsGroup)"
                )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=pathlib.Path)
    parser.add_argument("--binary", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args()
    flags = {}
    for spec in args.binary:
        name, path = spec.split("=", 1)
        flags[name] = flags_of(path)

    problems, objects = [], []
    for path in sorted(args.directory.rglob("*.yaml")):
        where = path.relative_to(args.directory)
        if path.name == "kustomization.yaml":
            for resource in yaml.safe_load(path.read_text()).get("resources", []):
                target = path.parent / resource
                if not (target.is_file() or (target / "kustomization.yaml").is_file()):
                    problems.append(f"{where}: resource {resource} does not exist")
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            name = f"{where}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            try:
                kubernetes_validate.validate(doc, KUBERNETES, strict=True)
            except kubernetes_validate.ValidationError as e:
                problems.append(f"{name}: {e.message} (at {'/'.join(map(str, e.path))})")
            objects.append((name, doc))

    budgets = [
        doc["spec"]["selector"]["matchLabels"]
        for _, doc in objects
        if doc.get("kind") == "PodDisruptionBudget"
    ]
    workloads = 0
    for name, doc in objects:
        kind = doc.get("kind")
        if kind == "Service" and doc["spec"].get("type") == "LoadBalancer":
            if doc["spec"].get("externalTrafficPolicy") != "Local":
                problems.append(f"{name}: a LoadBalancer must keep the client's address (Local)")
        if kind not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        if not any(image_binary(c.get("image", "")) in OUR_IMAGES for c in pod["containers"]):
            continue
        workloads += 1
        labels = doc["spec"]["template"]["metadata"]["labels"]
        if not any(all(labels.get(k) == v for k, v in b.items()) for b in budgets):
            problems.append(f"{name}: no PodDisruptionBudget selects it")
        for container in pod["containers"]:
            check_container(f"{name} ({container['name']})", container, pod, flags, problems)

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
