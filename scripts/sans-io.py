#!/usr/bin/env python3
"""The sans-IO gate: the crates that promise no I/O keep the promise. `ufrag-common`
without its `runtime` feature, and `ufrag-model-protocol` (the messages and codec a model
backend builds on), touch no file, no environment variable, no clock and no socket, and
depend on nothing that does.

Two checks, each of which fails on its own:

1. The dependency list. `cargo tree` of each crate's normal dependencies (no features)
   holds only the crates in ALLOWED below: a new dependency of the core is a decision, made
   by adding it there. (One known exception to "no I/O" rides in with clap: a flag
   declared with `env = …` is read from the environment when the binary parses its
   flags; the binaries do that, the core never parses.)
2. The source. No line of `common/src/` outside `runtime/`, or of `model-protocol/src/`,
   outside `#[cfg(test)]` modules names a file, environment, clock, socket, process or sleep API (FORBIDDEN
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
# Each crate held to no I/O: its package, its source, and the directory its I/O may live
# in (behind a feature), if any.
CORES = [
    ("ufrag-common", ROOT / "common" / "src", "runtime"),
    ("ufrag-model-protocol", ROOT / "model-protocol" / "src", None),
]


# Every crate the core may depend on without `runtime` (today's tree, parsers, hashes and
# their proc macros): none reads a file, a clock or a socket.
ALLOWED = {
    "anstream", "anstyle", "anstyle-parse", "anstyle-query", "block-buffer", "cfg-if",
    "clap", "clap_builder", "clap_derive", "clap_lex", "cmov", "colorchoice", "const-oid",
    "cpufeatures", "crc32fast", "crypto-common", "ctutils", "digest", "heck", "hmac",
    "humantime", "hybrid-array", "ipnet", "is_terminal_polyfill", "proc-macro2", "quote",
    "serde", "serde_core", "serde_derive", "serde_spanned", "sha1", "sha2", "strsim", "syn",
    "thiserror", "thiserror-impl", "toml", "toml_datetime", "toml_parser", "toml_writer",
    "typenum", "ufrag-common", "unicode-ident", "utf8parse", "winnow",
}
# The model protocol's: the core's, its JSON and a constant-time comparison.
ALLOWED_PROTOCOL = ALLOWED | {
    "itoa", "memchr", "serde_json", "subtle", "ufrag-model-protocol", "zmij",
}

# What reaches outside the process's memory, or reads a clock: the paths, the imports
# that would let a shorter path through (`use std::{fs, env}`), and the calls that hide a
# clock read or a name lookup.
FORBIDDEN = re.compile(
    r"\bstd::(fs|env|process|thread|net::(UdpSocket|TcpStream|TcpListener|ToSocketAddrs))\b"
    r"|\buse\s+std::\{[^}]*\b(fs|env|process|thread)\b"
    r"|\bstd::net::\{[^}]*\b(UdpSocket|TcpStream|TcpListener|ToSocketAddrs)\b"
    r"|\b(Instant|SystemTime)::now\b|\.elapsed\(\)"
    r"|\bstd::io::(stdin|stdout|stderr)\b|\bto_socket_addrs\b"
    r"|\bFile::(open|create)\b"
)
# String and character literals, blanked before braces are counted.
LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)\'')


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
                code = LITERAL.sub('""', lines[i])
                depth += code.count("{") - code.count("}")
                opened = opened or "{" in code
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


def core_files(src, io_dir):
    for path in sorted(src.rglob("*.rs")):
        if io_dir and io_dir in path.relative_to(src).parts:
            continue
        yield str(path.relative_to(ROOT)), path.read_text()


def dependency_findings(crates, allowed=None):
    return sorted(set(crates) - (ALLOWED if allowed is None else allowed))


def core_dependencies(package):
    out = subprocess.run(
        ["cargo", "tree", "-q", "--locked", "-p", package, "-e", "normal",
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
    sneaky = (
        "use std::{fs, env};\n"
        "use std::thread;\n"
        "pub fn h(t: Instant) -> bool { t.elapsed().as_secs() > 1 }\n"
        "#[cfg(test)]\n"
        "mod tests {\n"
        "    const OPEN: &str = \"{\";\n"
        "}\n"
        "pub fn after_the_tests() { let _ = std::fs::read(\"/x\"); }\n"
    )
    caught = source_findings([("sneaky.rs", sneaky)])
    assert len(caught) == 4, caught
    assert source_findings([("clean.rs", clean)]) == [], source_findings([("clean.rs", clean)])
    assert dependency_findings({"serde", "redis", "tokio"}) == ["redis", "tokio"]
    assert dependency_findings({"serde", "getrandom"}) == ["getrandom"]
    assert dependency_findings({"serde", "hmac"}) == []
    print("sans-io self-test: clock and file reads caught (also through `use std::{fs}`, "
          "`use std::thread` and `.elapsed()`, and after a test module with a brace in a "
          "string), a doc and a test module left alone, a crate outside the allowed list "
          "caught")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    self_test()
    failed = False
    for package, src, io_dir in CORES:
        allowed = ALLOWED_PROTOCOL if package == "ufrag-model-protocol" else ALLOWED
        denied = dependency_findings(core_dependencies(package), allowed)
        if denied:
            failed = True
            print(f"sans-io: {package} (no features) depends on crates outside ALLOWED "
                  "(add one only if it does no I/O): " + ", ".join(denied))
        for finding in source_findings(core_files(src, io_dir)):
            failed = True
            print(f"sans-io: I/O in {package}: {finding}")
    if failed:
        return 1
    names = " and ".join(package for package, _, _ in CORES)
    print(f"sans-io: {names} (ufrag-common without `runtime`) have no I/O dependency, "
          "and no file, environment, clock or socket use")
    return 0


if __name__ == "__main__":
    sys.exit(main())
