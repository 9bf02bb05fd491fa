#!/usr/bin/env python3
"""Import cycles between the source files, and between the sibling modules (folders), of every
workspace crate: exit 1 if there are any.

    python3 scripts/import_cycles.py              self-test, then check every crate
    python3 scripts/import_cycles.py --self-test  only the resolver's own tests
    python3 scripts/import_cycles.py --verbose    also list paths that did not resolve

A file a.rs depends on b.rs when a `use` statement or an inline path in a.rs that starts with
`crate::`, `super::` or `self::` names an item defined in b.rs (or the module b.rs is). Paths are
resolved the way rustc does, through `mod` declarations and re-exports: `use crate::Engine` is an
edge to the file that defines `Engine`, not to the lib.rs that re-exports it. A `pub use` in a
crate root or in a file that has child module files (mod.rs, or foo.rs beside foo/) is such a
facade and makes no edge itself; `mod x;` makes none either. Comments and string literals are
stripped first. Every strongly connected component of more than one file is printed as one line:
a closed walk through its files, each step with the path that made the edge.

Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tempfile
import tomllib
import unittest
from dataclasses import dataclass, field
from pathlib import Path

KEYWORDS = {
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move",
    "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true",
    "type", "union", "unsafe", "use", "where", "while",
}
ITEM_KEYWORDS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}
PATH_STARTS = {"crate", "super", "self"}
# Token-generating macros: their paths belong to the code a proc macro emits, not to its crate.
QUOTE_MACROS = {"quote", "quote_spanned", "parse_quote", "parse_quote_spanned"}
RAW_STRING = re.compile(r'b?r(#*)"')
CHAR_LITERAL = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")


# ---- stripping comments and literals ----

def strip_code(text: str) -> str:
    """`text` with comments (doc comments too) and string, char and raw-string literals blanked
    to spaces; newlines stay, so positions keep their line numbers."""
    out: list[str] = []
    i, n = 0, len(text)

    def blank(s: str) -> str:
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (m := RAW_STRING.match(text, i)) and not _ident_char_before(text, i):
            close = '"' + m.group(1)
            j = text.find(close, m.end())
            j = n if j < 0 else j + len(close)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and not _ident_char_before(text, i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(blank(text[i:j]))
            i = j
        elif c == "'":
            m = CHAR_LITERAL.match(text, i)
            if m:  # a char literal; otherwise a lifetime or label, which stays
                out.append(blank(m.group(0)))
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _ident_char_before(text: str, i: int) -> bool:
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|::|\S")


def tokens(code: str) -> list[tuple[str, int]]:
    """Identifiers, `::` and single punctuation characters, with their line numbers."""
    line_starts = [0] + [m.end() for m in re.finditer("\n", code)]
    out, line = [], 0
    for m in TOKEN.finditer(code):
        while line + 1 < len(line_starts) and line_starts[line + 1] <= m.start():
            line += 1
        out.append((m.group(0), line + 1))
    return out


# ---- the module tree ----

@dataclass(eq=False)
class Module:
    """One module: a file's top-level module or an inline `mod x { ... }` inside it."""
    name: str
    file: Path
    parent: Module | None
    folder: Path  # where its `mod child;` files are looked for
    children: dict[str, Module] = field(default_factory=dict)
    items: set[str] = field(default_factory=set)
    uses: dict[str, list[str]] = field(default_factory=dict)  # name -> path it binds
    globs: list[list[str]] = field(default_factory=list)  # `use path::*` prefixes

    @property
    def root(self) -> Module:
        m = self
        while m.parent is not None:
            m = m.parent
        return m


@dataclass
class Ref:
    """A path in a file that may make an edge."""
    module: Module
    path: list[str]
    line: int


@dataclass
class Crate:
    """One crate's files and the paths in them, across all its roots (lib, main, bins)."""
    name: str
    dir: Path
    files: set[Path] = field(default_factory=set)
    refs: list[Ref] = field(default_factory=list)


def parse_use_tree(toks: list[str]) -> list[tuple[list[str], str | None]]:
    """`a::b::{c, d as e, f::*, self}` -> [(path, bound name)]; a glob's bound name is '*'."""
    out: list[tuple[list[str], str | None]] = []

    def walk(i: int, prefix: list[str]) -> int:
        path = list(prefix)
        while i < len(toks):
            t = toks[i]
            if t == "{":
                i += 1
                while i < len(toks) and toks[i] != "}":
                    i = walk(i, path)
                    if i < len(toks) and toks[i] == ",":
                        i += 1
                return i + 1
            if t == "*":
                out.append((path, "*"))
                return i + 1
            if t in (",", "}"):
                break
            if t == "::":
                i += 1
                continue
            if t == "as":
                out.append((path, toks[i + 1]))
                return i + 2
            path.append(t)
            i += 1
        if path and path != prefix:
            out.append((path, prefix[-1] if path[-1] == "self" and prefix else path[-1]))
        return i

    walk(0, [])
    return [(p[:-1] if p and p[-1] == "self" else p, name) for p, name in out]


def module_file(folder: Path, name: str) -> tuple[Path, Path] | None:
    """The file of `mod name;` declared in a module whose children live in `folder`, and the
    folder of its own children."""
    if (folder / f"{name}.rs").is_file():
        return folder / f"{name}.rs", folder / name
    if (folder / name / "mod.rs").is_file():
        return folder / name / "mod.rs", folder / name
    return None


def load_file(crate: Crate, module: Module, facade: bool) -> None:
    """Parse `module.file`: its items, uses, inline and file child modules, and its paths."""
    crate.files.add(module.file)
    toks = tokens(strip_code(module.file.read_text(encoding="utf-8", errors="replace")))
    stack: list[tuple[Module, int]] = [(module, 0)]  # the module in scope and the depth it opened at
    depth = 0
    i = 0
    while i < len(toks):
        t, line = toks[i]
        cur = stack[-1][0]
        nxt = toks[i + 1][0] if i + 1 < len(toks) else ""
        prev = toks[i - 1][0] if i else ""
        if t in QUOTE_MACROS and nxt == "!":
            i = _skip_group(toks, i + 2)
            continue
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if len(stack) > 1 and depth < stack[-1][1]:
                stack.pop()
        elif t == "mod" and re.match(r"[A-Za-z_]", nxt) and prev != "::":
            name = nxt
            after = toks[i + 2][0] if i + 2 < len(toks) else ""
            if after == "{":
                child = Module(name, module.file, cur, cur.folder / name)
                cur.children[name] = child
                depth += 1
                stack.append((child, depth))
                i += 3
                continue
            if after == ";":
                found = module_file(cur.folder, name)
                if found:
                    child = Module(name, found[0], cur, found[1])
                    cur.children[name] = child
                    load_file(crate, child, facade=child.folder.is_dir())
            i += 3
            continue
        elif t == "use" and prev != "::":
            j = i + 1
            while j < len(toks) and toks[j][0] != ";":
                j += 1
            body = [x for x, _ in toks[i + 1:j]]
            is_pub = prev == "pub" or (prev == ")" and _pub_group_before(toks, i))
            for path, name in parse_use_tree(body):
                if not path:
                    continue
                if name == "*":
                    cur.globs.append(path)
                else:
                    cur.uses[name] = path
                if not (is_pub and facade):
                    crate.refs.append(Ref(cur, path, line))
            i = j + 1
            continue
        elif t in ITEM_KEYWORDS and re.match(r"[A-Za-z_]", nxt) and nxt not in KEYWORDS:
            cur.items.add(nxt)
        elif t == "macro_rules" and nxt == "!" and i + 2 < len(toks):
            name = toks[i + 2][0]
            cur.items.add(name)
            if _macro_export_before(toks, i):  # `crate::name!` then means this file's macro
                cur.root.uses.setdefault(name, _absolute(cur) + [name])
        elif t in PATH_STARTS and nxt == "::" and prev not in ("::", "$", "in"):
            path, j = [t], i + 1
            while j + 1 < len(toks) and toks[j][0] == "::" and re.match(r"[A-Za-z_]", toks[j + 1][0]):
                path.append(toks[j + 1][0])
                j += 2
            crate.refs.append(Ref(cur, path, line))
            i = j
            continue
        i += 1


def _skip_group(toks: list[tuple[str, int]], i: int) -> int:
    """The index after the bracketed group that starts at `i` (a quote!'s `{...}`, `(...)`)."""
    opening, closing, level = "([{", ")]}", 0
    while i < len(toks):
        t = toks[i][0]
        if t in opening:
            level += 1
        elif t in closing:
            level -= 1
            if level == 0:
                return i + 1
        i += 1
    return i


def _pub_group_before(toks: list[tuple[str, int]], i: int) -> bool:
    """`pub(crate) use`, `pub(super) use`, `pub(in path) use`."""
    j = i - 1
    while j >= 0 and toks[j][0] != "(":
        j -= 1
    return j > 0 and toks[j - 1][0] == "pub"


def _macro_export_before(toks: list[tuple[str, int]], i: int) -> bool:
    j = i - 1
    while j >= 0 and toks[j][0] not in (";", "}", "{"):
        if toks[j][0] == "macro_export":
            return True
        j -= 1
    return False


def _absolute(m: Module) -> list[str]:
    names = []
    while m.parent is not None:
        names.append(m.name)
        m = m.parent
    return ["crate"] + names[::-1]


def load_crate(name: str, crate_dir: Path) -> Crate:
    """Every file reachable by `mod` declarations from the crate's roots, parsed."""
    crate = Crate(name, crate_dir)
    src = crate_dir / "src"
    roots = [src / "lib.rs", src / "main.rs"]
    if (src / "bin").is_dir():
        roots += sorted((src / "bin").glob("*.rs")) + sorted((src / "bin").glob("*/main.rs"))
    for root in roots:
        if root.is_file():
            # A crate root's `mod x;` files sit beside it, as a mod.rs's do.
            module = Module("crate", root, None, root.parent)
            load_file(crate, module, facade=True)
    return crate


# ---- resolving paths ----

class Item:
    """A path's end that is not a module: something defined in `file`."""

    def __init__(self, file: Path):
        self.file = file


def lookup(module: Module, name: str, seen: set) -> Module | Item | None:
    """What `name` means inside `module`: a child module, an item, or what a use binds."""
    if name in module.children:
        return module.children[name]
    if name in module.items:
        return Item(module.file)
    key = (id(module), name)
    if key in seen:
        return None
    seen = seen | {key}
    if name in module.uses:
        target, _ = resolve(module, module.uses[name], seen)
        # A name bound from another crate is, for this crate's graph, defined where it is bound.
        return target if target is not None else Item(module.file)
    for glob in module.globs:
        target, complete = resolve(module, glob, seen)
        if complete and isinstance(target, Module):
            found = lookup(target, name, seen)
            if found is not None:
                return found
    return None


def resolve(module: Module, path: list[str], seen: set = frozenset()) -> tuple[Module | Item | None, bool]:
    """Where `path`, written in `module`, leads: the item it names (the first segment that is
    not a module; the rest are associated items), or the deepest module it reached, and whether
    every segment up to there resolved."""
    head = path[0]
    if head == "crate":
        cur, rest = module.root, path[1:]
    elif head in ("self", "super"):
        cur, rest = module, path
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                if cur.parent is None:
                    return None, False
                cur = cur.parent
            rest = rest[1:]
    else:  # a `use` path relative to the module (2018 uniform paths); else another crate's
        first = lookup(module, head, seen)
        if first is None:
            return None, False
        if isinstance(first, Item):
            return first, True
        cur, rest = first, path[1:]
    for name in rest:
        found = lookup(cur, name, seen)
        if found is None:
            return cur, False
        if isinstance(found, Item):
            return found, True
        cur = found
    return cur, True


# ---- the graph and its cycles ----

def edges_of(crate: Crate, unresolved: list[str]) -> dict[Path, dict[Path, str]]:
    """file -> {file it depends on -> the first path that made that edge}."""
    graph: dict[Path, dict[Path, str]] = {f: {} for f in crate.files}
    for ref in crate.refs:
        target, complete = resolve(ref.module, ref.path)
        if target is None:
            continue
        text = "::".join(ref.path)
        if not complete:
            unresolved.append(f"{crate.name}: {rel(crate, ref.module.file)}:{ref.line}: {text}")
        if target.file != ref.module.file:
            graph[ref.module.file].setdefault(target.file, text)
    return graph


def strongly_connected(graph: dict[Path, dict[Path, str]]) -> list[list[Path]]:
    """Tarjan's algorithm, iterative; components in a stable order."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    on_stack: set[Path] = set()
    stack: list[Path] = []
    out: list[list[Path]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    component.append(n)
                    if n == node:
                        break
                out.append(sorted(component))
    return sorted(out)


def closed_walk(graph: dict[Path, dict[Path, str]], component: list[Path]) -> list[Path]:
    """A walk from the component's first file through all its files and back, by shortest hops."""
    inside = set(component)
    start = component[0]
    walk, todo = [start], inside - {start}
    while todo:
        steps = shortest_hops(graph, inside, walk[-1], todo)
        walk += steps
        todo -= set(steps)
    return walk + shortest_hops(graph, inside, walk[-1], {start})


def shortest_hops(graph: dict[Path, dict[Path, str]], inside: set[Path], a: Path, goals: set[Path]) -> list[Path]:
    """The files after `a` on a shortest path inside the component to the nearest of `goals`."""
    prev: dict[Path, Path | None] = {a: None}
    frontier = [a]
    while frontier:
        nxt = []
        for n in frontier:
            for m in sorted(graph[n]):
                if m in goals:
                    path = [m, n]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1][1:]
                if m in inside and m not in prev:
                    prev[m] = n
                    nxt.append(m)
        frontier = nxt
    return []


def rel(crate: Crate, file: Path) -> str:
    return file.relative_to(crate.dir).as_posix()


def module_graph(crate: Crate, graph: dict[Path, dict[Path, str]]) -> dict[Path, dict[Path, str]]:
    """Sibling modules -> {sibling module it depends on -> the path that made the first edge}.

    A module is a child of a folder: a file `x.rs` and a folder `x/` together are module `x`.
    Module `a` depends on its sibling `b` when a file inside `a` uses a file inside `b`; a
    folder's own file (mod.rs, or x.rs beside x/) is the parent, not a sibling, so its edges
    into its children make no module edge. Unit-test files (`tests.rs`, `*_tests.rs`, the
    `#[cfg(test)] mod tests;` of a module) make no module edge either: they are not on the data
    path and may check a kernel against the driver that uses it (file cycles still count)."""
    src = crate.dir / "src"
    out: dict[Path, dict[Path, str]] = {}
    for a, targets in graph.items():
        if a.name == "tests.rs" or a.name.endswith("_tests.rs"):
            continue
        pa = a.relative_to(src).with_suffix("").parts
        for b, text in targets.items():
            pb = b.relative_to(src).with_suffix("").parts
            i = 0
            while i < min(len(pa), len(pb)) and pa[i] == pb[i]:
                i += 1
            # One is the other's parent (or its own file): no sibling edge.
            if i >= len(pa) or i >= len(pb):
                continue
            ma, mb = pa[i], pb[i]
            if ma in ("mod", "lib", "main") or mb in ("mod", "lib", "main"):
                continue
            folder = Path("src", *pa[:i])
            na, nb = folder / ma, folder / mb
            out.setdefault(na, {})
            out.setdefault(nb, {})
            out[na].setdefault(nb, f"{rel(crate, a)}: {text}")
    return out


def module_cycle_lines(crate: Crate) -> list[str]:
    """One line per cycle among sibling modules (a closed walk, each step with its first edge)."""
    lines = []
    modules = module_graph(crate, edges_of(crate, []))
    for component in strongly_connected(modules):
        if len(component) < 2:
            continue
        walk = closed_walk(modules, component)
        text = walk[0].as_posix() + "/"
        for a, b in zip(walk, walk[1:]):
            text += f" -> {b.as_posix()}/ ({modules[a][b]})"
        lines.append(f"{crate.name}: modules {text}")
    return lines


def cycle_lines(crate: Crate, unresolved: list[str]) -> list[str]:
    graph = edges_of(crate, unresolved)
    lines = []
    for component in strongly_connected(graph):
        if len(component) < 2:
            continue
        walk = closed_walk(graph, component)
        text = rel(crate, walk[0])
        for a, b in zip(walk, walk[1:]):
            text += f" -> {rel(crate, b)} ({graph[a][b]})"
        lines.append(f"{crate.name}: {text}")
    return lines


# ---- the workspace ----

def workspace_crates(root: Path) -> list[tuple[str, Path]]:
    """Every member crate folder with a src/, and crates nested inside members."""
    manifest = tomllib.loads((root / "Cargo.toml").read_text())
    members = []
    for pattern in manifest.get("workspace", {}).get("members", []):
        members += sorted(p for p in root.glob(pattern) if p.is_dir())
    found: dict[Path, None] = {}
    for member in members:
        for toml_file in sorted(member.rglob("Cargo.toml")):
            crate_dir = toml_file.parent
            if "target" in crate_dir.relative_to(root).parts:
                continue
            if (crate_dir / "src").is_dir():
                found[crate_dir] = None
    return [(d.relative_to(root).as_posix(), d) for d in found]


def check(root: Path, verbose: bool) -> int:
    crates = workspace_crates(root)
    lines, unresolved, files = [], [], 0
    for name, crate_dir in crates:
        crate = load_crate(name, crate_dir)
        files += len(crate.files)
        lines += cycle_lines(crate, unresolved)
        lines += module_cycle_lines(crate)
    if verbose:
        for u in unresolved:
            print(f"unresolved: {u}", file=sys.stderr)
    for line in lines:
        print(line)
    if lines:
        print(f"import cycles: {len(lines)} in {files} files of {len(crates)} crates", file=sys.stderr)
        return 1
    print(f"import cycles: none in {files} files of {len(crates)} crates")
    return 0


# ---- the resolver's own tests ----

class SelfTest(unittest.TestCase):
    """Small synthetic crates: what is an edge, what is a cycle, what is neither."""

    def crate(self, files: dict[str, str]) -> list[str]:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp) / "demo"
            for name, text in files.items():
                path = base / "src" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            return cycle_lines(load_crate("demo", base), [])

    def test_modules_in_a_cycle_though_their_files_are_not(self):
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp) / "demo"
            files = {
                "lib.rs": "mod a;\nmod b;\n",
                "a/mod.rs": "mod x;\nmod y;\n",
                "a/x.rs": "pub fn f() { crate::b::p::g() }\n",
                "a/y.rs": "pub fn h() {}\n",
                "b/mod.rs": "pub mod p;\nmod q;\n",
                "b/p.rs": "pub fn g() {}\n",
                "b/q.rs": "fn k() { crate::a::y::h() }\n",
            }
            for name, text in files.items():
                path = base / "src" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            crate = load_crate("demo", base)
            self.assertEqual(cycle_lines(crate, []), [])
            self.assertEqual(module_cycle_lines(crate), [
                "demo: modules src/a/ -> src/b/ (src/a/x.rs: crate::b::p::g) -> src/a/ (src/b/q.rs: crate::a::y::h)"])

    def test_two_files_using_each_other_through_crate_paths(self):
        lines = self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::g;\npub fn f() { g() }\n",
            "b.rs": "pub fn g() { crate::a::f() }\n",
        })
        self.assertEqual(lines, ["demo: src/a.rs -> src/b.rs (crate::b::g) -> src/a.rs (crate::a::f)"])

    def test_cycle_through_super(self):
        lines = self.crate({
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod k;\npub struct S;\nfn use_it() { self::k::helper(); }\n",
            "m/k.rs": "use super::S;\npub fn helper() -> Option<S> { None }\n",
        })
        self.assertEqual(lines, ["demo: src/m/k.rs -> src/m/mod.rs (super::S) -> src/m/k.rs (self::k::helper)"])

    def test_reexport_through_lib_resolves_to_the_defining_file(self):
        lines = self.crate({
            "lib.rs": "mod engine;\nmod forward;\npub use engine::Engine;\npub use forward::step;\n",
            "engine.rs": "pub struct Engine;\nimpl Engine { fn go(&self) { crate::step(); } }\n",
            "forward.rs": "pub fn step() {}\n",
        })
        self.assertEqual(lines, [])

    def test_reexported_name_still_makes_the_real_cycle(self):
        lines = self.crate({
            "lib.rs": "mod engine;\nmod forward;\npub use engine::{Engine as Machine};\n",
            "engine.rs": "pub struct Engine;\nfn f() { crate::forward::step(); }\n",
            "forward.rs": "use crate::Machine;\npub fn step() {}\n",
        })
        self.assertEqual(lines, [
            "demo: src/engine.rs -> src/forward.rs (crate::forward::step) -> src/engine.rs (crate::Machine)"
        ])

    def test_inline_test_module_using_super_is_no_edge(self):
        lines = self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::g;\npub fn f() { g() }\n#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test] fn t() { f(); super::f(); }\n}\n",
            "b.rs": "pub fn g() {}\n",
        })
        self.assertEqual(lines, [])

    def test_glob_reexports(self):
        files = {
            "lib.rs": "mod kernels;\nmod simd;\npub use simd::*;\n",
            "simd/mod.rs": "mod x86;\npub use x86::*;\n",
            "simd/x86.rs": "pub fn dot() { crate::kernels::scalar(); }\n",
            "kernels.rs": "pub fn scalar() {}\n",
        }
        self.assertEqual(self.crate(files), [])
        files["kernels.rs"] = "pub fn scalar() { crate::dot(); }\n"
        self.assertEqual(self.crate(files), [
            "demo: src/kernels.rs -> src/simd/x86.rs (crate::dot) -> src/kernels.rs (crate::kernels::scalar)"
        ])

    def test_comments_and_strings_are_not_paths(self):
        lines = self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::g;\npub fn f() { g() }\n",
            "b.rs": '/// see crate::a::f\npub fn g() { let _ = "crate::a::f"; let _ = r#"crate::a::f"#; /* crate::a::f */ }\n',
        })
        self.assertEqual(lines, [])

    def test_file_with_a_folder_and_a_three_file_cycle(self):
        lines = self.crate({
            "lib.rs": "mod a;\nmod c;\n",
            "a.rs": "mod b;\npub fn f() { self::b::g() }\n",
            "a/b.rs": "pub fn g() { crate::c::h() }\n",
            "c.rs": "use crate::a;\npub fn h() { a::f() }\n",
        })
        self.assertEqual(lines, [
            "demo: src/a/b.rs -> src/c.rs (crate::c::h) -> src/a.rs (crate::a) -> src/a/b.rs (self::b::g)"
        ])

    def test_char_literals_go_and_lifetimes_stay(self):
        code = "let c = '\\''; let q = '\"'; fn f<'a>(x: &'a str) { crate::x::y } // crate::z"
        self.assertEqual(strip_code(code).split(), "let c = ; let q = ; fn f<'a>(x: &'a str) { crate::x::y }".split())

    def test_paths_inside_quote_are_the_generated_code_s(self):
        lines = self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::g;\npub fn f() { g() }\n",
            "b.rs": "pub fn g() -> T { quote! { crate::a::f() } }\n",
        })
        self.assertEqual(lines, [])

    def test_exported_macro_is_the_defining_file_s(self):
        lines = self.crate({
            "lib.rs": "mod a;\nmod log;\npub fn root_fn() { crate::a::f() }\n",
            "log.rs": "#[macro_export]\nmacro_rules! note { () => {} }\n",
            "a.rs": "pub fn f() { crate::note!(); }\n",
        })
        self.assertEqual(lines, [])

    def test_use_trees(self):
        self.assertEqual(parse_use_tree("a :: { b , c :: { self , d as e } , * }".split()), [
            (["a", "b"], "b"), (["a", "c"], "c"), (["a", "c", "d"], "e"), (["a"], "*"),
        ])


def self_test(verbose: bool) -> bool:
    """Run the tests above; their report goes to stderr when verbose or when one fails."""
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(SelfTest)
    report = io.StringIO()
    ok = unittest.TextTestRunner(verbosity=2 if verbose else 1, stream=report).run(suite).wasSuccessful()
    if verbose or not ok:
        sys.stderr.write(report.getvalue())
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true", help="only run the resolver's tests")
    parser.add_argument("--verbose", action="store_true", help="list paths that did not resolve")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the workspace (default: this script's checkout)")
    args = parser.parse_args()
    if args.self_test:
        return 0 if self_test(verbose=True) else 1
    if not self_test(verbose=False):
        print("import cycles: the resolver's self-test failed", file=sys.stderr)
        return 1
    return check(args.root, args.verbose)


if __name__ == "__main__":
    sys.exit(main())
