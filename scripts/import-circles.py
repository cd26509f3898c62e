#!/usr/bin/env python3
"""Import circles between the modules of each crate: which top-level modules of a
crate's `src/` name each other (`crate::m`, or the `super::` paths that mean the crate
root), as a graph; every strongly connected group of two or more is a circle, printed with the lines
that close it. Exits 1 if any crate has one.

    scripts/import-circles.py            # every crate of the workspace
    scripts/import-circles.py transceiver relay-mio

Only `src/` counts (tests and benches may use anything); a module's own children
(`src/m/…`) belong to it; `#[cfg(test)]` code counts too (a test module that needs its
parent's neighbour is still a dependency a newcomer must read)."""

import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Every crate of the workspace, as Cargo.toml lists them.
CRATES = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
# From a top-level module's own file, `super::` is the crate root; from its children's,
# `super::super::`.
SUPER = {1: re.compile(r"(?<!::)\bsuper::([a-z_][a-z0-9_]*)"),
         2: re.compile(r"(?<!::)\bsuper::super::([a-z_][a-z0-9_]*)")}
# `use crate::{a, b::c}` names several modules at once.
GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)


def modules(src: pathlib.Path) -> dict[str, list[pathlib.Path]]:
    """Top-level module name -> its files (`m.rs` and everything under `m/`)."""
    found: dict[str, list[pathlib.Path]] = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src)
        if rel.parts[0] == "bin" or rel.name in ("lib.rs", "main.rs") and len(rel.parts) == 1:
            continue
        name = rel.parts[0].removesuffix(".rs")
        found.setdefault(name, []).append(f)
    return found


def edges(mods: dict[str, list[pathlib.Path]]) -> dict[str, dict[str, str]]:
    """Module -> {module it names: the first line that names it}."""
    graph: dict[str, dict[str, str]] = {m: {} for m in mods}
    for m, files in mods.items():
        for f in files:
            rel = f.relative_to(f.parents[len(f.relative_to(ROOT).parts) - 3])
            depth = 1 if len(rel.parts) == 1 or rel.name == "mod.rs" and len(rel.parts) == 2 else 2
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if line.lstrip().startswith("//"):
                    continue
                named = set(PATH.findall(line))
                if depth in SUPER:
                    named |= {x for x in SUPER[depth].findall(line) if x != "super"}
                for group in GROUP.findall(line):
                    named |= {p.strip().split("::")[0] for p in group.split(",") if p.strip()}
                for other in named:
                    if other in mods and other != m:
                        graph[m].setdefault(other, f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    return graph


def circles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    crates = sys.argv[1:] or CRATES
    bad = 0
    for crate in crates:
        src = ROOT / crate / "src"
        graph = edges(modules(src))
        for group in circles(graph):
            bad += 1
            print(f"{crate}: circle between {', '.join(group)}:")
            for a in group:
                for b, line in sorted(graph[a].items()):
                    if b in group:
                        print(f"  {a} -> {b}  ({line})")
    if bad:
        print(f"import-circles: {bad} circle(s)")
        return 1
    print(f"import-circles: none in {', '.join(crates)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
