#!/usr/bin/env python3
"""Import circles between the modules of each crate, at every depth: among a crate's
top-level modules, and among the children of every module that has children (perf's
`compare/bed.rs` naming `compare/options.rs` and back is a circle as much as two
top-level modules are). Each path a line names (`crate::a::b`, `super::x`,
`super::super::y`, `self::z`, and the groups `crate::{a, b::c}`) is resolved to the module
it reaches; where the naming module and the named one part ways below a common parent,
that parent's graph gets an edge between its two children. Every strongly connected
group of two or more is a circle, printed with the lines that close it. Exits 1 if any
crate has one.

    scripts/import-circles.py            # every crate of the workspace
    scripts/import-circles.py transceiver relay-mio
    scripts/import-circles.py --self-test

Only `src/` counts (tests and benches may use anything), `src/bin/` aside; comment lines
do not count; `#[cfg(test)]` code does (a test module that needs its parent's neighbour
is still a dependency a newcomer must read)."""

import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Every crate of the workspace, as Cargo.toml lists them.
CRATES = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
# `crate::a::b`, `super::super::x`, `self::y`, each optionally followed by a `{…}` group.
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{([^}]*)\})?")
# A whole `use` declaration, however many lines rustfmt spreads it over.
USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]*);", re.M | re.S)


def use_paths(tree: str):
    """Every path a `use` tree names, nested groups expanded: `crate::{a::{b, c}, d}`
    gives `crate::a::b`, `crate::a::c` and `crate::d`."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", tree))  # `X as Y` -> `X@Y`
    depth, start, items = 0, 0, []
    brace = tree.find("{")
    if brace < 0:
        return [tree.split("@")[0]] if tree else []
    prefix, body = tree[:brace], tree[brace + 1:tree.rfind("}")]
    for i, c in enumerate(body):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
    items.append(body[start:])
    paths = []
    for item in items:
        if not item:
            continue
        for sub in use_paths(item):
            paths.append(prefix + sub if sub != "self" else prefix.removesuffix("::"))
    return paths


def module_of(src: pathlib.Path, f: pathlib.Path):
    """The module path of source file `f` (`()` for the crate root), or None for bin/."""
    parts = list(f.relative_to(src).parts)
    if parts[0] == "bin":
        return None
    if len(parts) == 1 and parts[0] in ("lib.rs", "main.rs"):
        return ()
    if parts[-1] == "mod.rs":
        return tuple(parts[:-1])
    return tuple(parts[:-1] + [parts[-1].removesuffix(".rs")])


def named_paths(here: tuple, line: str):
    """Every module path `line`, in module `here`, names (possibly ending in an item)."""
    for match in PATH.finditer(line):
        head, tail, group = match.group(1), match.group(2), match.group(4)
        segments = [s for s in tail.split("::") if s]
        if head == "crate":
            base = []
        elif head == "self":
            base = list(here)
        else:
            base = list(here[:-1])
            while segments and segments[0] == "super":
                segments, base = segments[1:], base[:-1]
        prefix = base + segments
        if group is None:
            yield prefix
            continue
        for item in group.split(","):
            item = item.strip().split(" as ")[0].strip()
            if item == "self":
                yield prefix
            elif item:
                yield prefix + [item.split("::")[0]]


def lines_of(text: str):
    """(line number, text) of each line, every `use` declaration joined onto its first
    line and its nested groups expanded into plain paths."""
    lines = text.splitlines()
    for match in USE.finditer(text):
        first = text.count("\n", 0, match.start())
        last = text.count("\n", 0, match.end())
        if lines[first].lstrip().startswith("//"):
            continue
        lines[first] = "; ".join(f"use {p}" for p in use_paths(match.group(1)))
        for n in range(first + 1, last + 1):
            lines[n] = ""
    return enumerate(lines, 1)


def graphs_of(files: dict) -> dict:
    """Parent module -> {child: {sibling it names: the first line that names it}}."""
    children: dict = {}
    for module in files.values():
        if module:
            children.setdefault(module[:-1], set()).add(module[-1])
    graphs: dict = {}
    for f, here in files.items():
        for n, line in lines_of(f.read_text()):
            if line.lstrip().startswith("//"):
                continue
            for target in named_paths(here, line):
                common = 0
                while (common < min(len(target), len(here))
                       and target[common] == here[common]):
                    common += 1
                if common >= len(here) or common >= len(target):
                    continue  # names itself, an ancestor, or something inside itself
                parent = tuple(here[:common])
                a, b = here[common], target[common]
                if b in children.get(parent, ()):
                    where = f"{f.relative_to(ROOT)}:{n}: {line.strip()}"
                    graphs.setdefault(parent, {}).setdefault(a, {}).setdefault(b, where)
    return graphs


def circles(graph: dict) -> list:
    """Strongly connected groups of two or more modules (Tarjan)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    found: list = []
    nodes = set(graph) | {w for edges in graph.values() for w in edges}

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
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

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def crate_files(crate: str) -> dict:
    src = ROOT / crate / "src"
    files = {}
    for f in sorted(src.rglob("*.rs")):
        module = module_of(src, f)
        if module is not None:
            files[f] = module
    return files


def self_test() -> None:
    """A circle two levels down, through `super::` and `crate::` paths, must be found."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "src"
        (src / "outer").mkdir(parents=True)
        (src / "lib.rs").write_text("pub mod outer;\n")
        (src / "outer" / "mod.rs").write_text("pub mod a;\npub mod b;\npub mod c;\n"
                                              "pub mod d;\npub mod e;\n")
        (src / "outer" / "a.rs").write_text("use super::b::B;\n")
        (src / "outer" / "b.rs").write_text("use crate::outer::{c::C};\n")
        (src / "outer" / "c.rs").write_text("// use super::a::A; (a comment)\n"
                                            "pub fn f() { super::super::outer::a::f() }\n")
        # d and e name each other only through rustfmt's multi-line and nested groups.
        (src / "outer" / "d.rs").write_text("use crate::{\n    outer::{\n        e::E,\n"
                                            "    },\n};\n")
        (src / "outer" / "e.rs").write_text("use super::{d::{D as Renamed}, a};\n")
        global ROOT
        saved, ROOT = ROOT, pathlib.Path(tmp)
        try:
            files = {f: module_of(src, f) for f in sorted(src.rglob("*.rs"))}
            found = circles(graphs_of(files).get(("outer",), {}))
        finally:
            ROOT = saved
    assert found == [["a", "b", "c"], ["d", "e"]], found
    print("import-circles self-test: circles among a module's children are found, through "
          "super::, crate:: and multi-line, nested `use` groups")


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    self_test()
    crates = sys.argv[1:] or CRATES
    bad = 0
    for crate in crates:
        for parent, graph in sorted(graphs_of(crate_files(crate)).items()):
            where = "::".join(parent) or "the crate root"
            for group in circles(graph):
                bad += 1
                print(f"{crate}: circle under {where} between {', '.join(group)}:")
                for a in group:
                    for b, line in sorted(graph.get(a, {}).items()):
                        if b in group:
                            print(f"  {a} -> {b}  ({line})")
    if bad:
        print(f"import-circles: {bad} circle(s)")
        return 1
    print(f"import-circles: none at any depth in {', '.join(crates)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
