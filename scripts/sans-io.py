#!/usr/bin/env python3
"""The sans-IO gate: `ufrag-common` without its `runtime` feature touches no file, no
environment variable, no clock and no socket, and depends on nothing that does.

Two checks, each of which fails on its own:

1. The dependency list. `cargo tree` of ufrag-common's normal dependencies (no features)
   holds none of the crates that do I/O (listed in DENIED below).
2. The source. No line of `common/src/` outside `runtime/` and outside `#[cfg(test)]`
   modules names a file, environment, clock, socket, process or sleep API (FORBIDDEN
   below); doc comments may, to show a caller.

    scripts/sans-io.py              # both checks; exits 1 on any finding
    scripts/sans-io.py --self-test  # shows each check catching what it must

The third leg, that the core builds and passes its tests without `runtime`, is the test
command's (`cargo test -p ufrag-common`)."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE = ROOT / "common" / "src"

# Crates that do I/O or carry a runtime: the core depends on none of them.
DENIED = {
    "core_affinity", "crossbeam-channel", "libc", "mio", "nix", "prometheus-client",
    "redis", "rustix", "rustls", "signal-hook", "socket2", "tokio", "tracing",
    "tracing-subscriber", "ufrag-udp",
}

# What reaches outside the process's memory, or reads a clock.
FORBIDDEN = re.compile(
    r"\bstd::(fs|env|net::(UdpSocket|TcpStream|TcpListener)|process|thread::sleep)\b"
    r"|\b(Instant|SystemTime)::now\b"
    r"|\bFile::(open|create)\b"
)


def code_lines(text):
    """(number, line) of each line that is code: not a comment, not inside a
    `#[cfg(test)]` item (the item's braces are counted from the attribute on)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "#[cfg(test)]":
            depth, opened = 0, False
            while i < len(lines):
                depth += lines[i].count("{") - lines[i].count("}")
                opened = opened or "{" in lines[i]
                i += 1
                if opened and depth <= 0:
                    break
                if not opened and lines[i - 1].rstrip().endswith(";"):
                    break
            continue
        stripped = line.strip()
        if not stripped.startswith("//"):
            yield i + 1, line
        i += 1


def source_findings(files):
    """Every forbidden use in `files` ((name, text) pairs), as printable lines."""
    found = []
    for name, text in files:
        for number, line in code_lines(text):
            if FORBIDDEN.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def core_files():
    for path in sorted(CORE.rglob("*.rs")):
        if "runtime" in path.relative_to(CORE).parts:
            continue
        yield str(path.relative_to(ROOT)), path.read_text()


def dependency_findings(crates):
    return sorted(set(crates) & DENIED)


def core_dependencies():
    out = subprocess.run(
        ["cargo", "tree", "-q", "--locked", "-p", "ufrag-common", "-e", "normal",
         "--prefix", "none", "--no-dedupe"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return {line.split(" ")[0] for line in out.splitlines() if line.strip()}


def self_test():
    bad = (
        "pub fn f() -> u64 {\n"
        "    let t = std::time::Instant::now();\n"
        "    std::fs::read(\"/etc/x\").unwrap();\n"
        "    0\n"
        "}\n"
    )
    clean = (
        "/// let now = Instant::now(); // a caller's clock, in a doc\n"
        "pub fn g(now: Instant) -> Instant { now }\n"
        "#[cfg(test)]\n"
        "mod tests {\n"
        "    #[test]\n"
        "    fn t() { let _ = std::time::Instant::now(); }\n"
        "}\n"
    )
    caught = source_findings([("bad.rs", bad)])
    assert len(caught) == 2, caught
    assert source_findings([("clean.rs", clean)]) == [], source_findings([("clean.rs", clean)])
    assert dependency_findings({"serde", "redis", "tokio"}) == ["redis", "tokio"]
    assert dependency_findings({"serde", "hmac"}) == []
    print("sans-io self-test: a clock read and a file read caught, a doc and a test "
          "module left alone, I/O crates caught in a dependency list")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    self_test()
    failed = False
    denied = dependency_findings(core_dependencies())
    if denied:
        failed = True
        print("sans-io: ufrag-common without `runtime` depends on I/O crates: "
              + ", ".join(denied))
    for finding in source_findings(core_files()):
        failed = True
        print(f"sans-io: I/O outside common/src/runtime/: {finding}")
    if failed:
        return 1
    print("sans-io: ufrag-common without `runtime` has no I/O dependency, and no file, "
          "environment, clock or socket use outside runtime/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
