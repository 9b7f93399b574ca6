#!/usr/bin/env python3
"""Fails if the crates stop following the harness's layering (docs/architecture.md, "The layering rules").

Reads `cargo metadata` and checks each workspace crate's normal (non-dev, non-build)
dependencies, direct and transitive:
  - conformance-core reaches no Kubernetes client (kube, k8s-openapi) and no other harness crate;
  - kube-emulator reaches no harness crate, not even in its tests (emulator-shell, the shell
    its execs run, is no harness crate: it depends on no workspace crate);
  - conformance-catalog depends on conformance-core and no other harness crate;
  - each crate depends only on the harness crates below it in the flow.

And, inside each crate named in MODULE_CHECKED, that no modules import each other in a loop
(see `module_loops`). `--self-test` checks that module check against small crates it writes
to a temporary directory.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

# What each workspace crate may depend on (normal dependencies), among the workspace's crates.
ALLOWED = {
    "conformance-core": set(),
    # The POSIX shell subset an exec runs; knows nothing of Kubernetes or the harness.
    "emulator-shell": set(),
    "kube-emulator": {"emulator-shell"},
    # Finds real tools for tests; a dev-dependency only, and itself depends on nothing.
    "conformance-testtools": set(),
    # OpenShell's gRPC schema and generated code; holds no harness logic.
    "conformance-openshell-api": set(),
    # Containers as host processes: the OS side only (namespaces, mounts, links), no cluster.
    "conformance-node": set(),
    # The names upstream gives its objects (docs/upstream-facts.md), shared by models and real.
    "conformance-upstream": set(),
    "conformance-observe": {"conformance-core", "conformance-upstream"},
    # Kubelet, controllers, processes and network: the Kubernetes side, which knows no OpenShell.
    "conformance-kube-models": {"conformance-core", "kube-emulator", "conformance-upstream"},
    "conformance-models": {
        "conformance-core",
        "conformance-kube-models",
        "kube-emulator",
        "conformance-observe",
        "conformance-openshell-api",
        "conformance-node",
        "conformance-upstream",
    },
    "conformance-real": {
        "conformance-core",
        "conformance-observe",
        "conformance-openshell-api",
        "conformance-upstream",
    },
    "conformance-catalog": {"conformance-core"},
    "openshell-conformance": {
        "conformance-core",
        "conformance-catalog",
        "kube-emulator",
        "conformance-models",
        "conformance-real",
        "conformance-observe",
        "conformance-node",
        "conformance-upstream",
    },
}
# Crates that must not be reached at all, even transitively, through normal dependencies.
FORBIDDEN_TRANSITIVE = {
    "conformance-core": {"kube", "k8s-openapi", "kube-client", "kube-runtime"},
    "conformance-catalog": {"kube", "k8s-openapi", "kube-client", "kube-runtime"},
    "conformance-node": {"kube", "k8s-openapi", "kube-client", "kube-runtime"},
    "emulator-shell": {"kube", "k8s-openapi", "kube-client", "kube-runtime"},
}
# Crates whose tests (dev-dependencies) must not reach a harness crate either.
NO_HARNESS_IN_TESTS = {"kube-emulator", "emulator-shell"}
# Crates that hold no harness code, only test support.
TEST_ONLY = {"conformance-testtools"}
# Crates that hold no harness code: the emulator's building blocks, which NO_HARNESS_IN_TESTS
# crates may use.
NOT_HARNESS = {"emulator-shell"}



# ---- module level -----------------------------------------------------------------------------
#
# Inside a crate, modules must not import each other in a loop: file A uses B and B uses A,
# directly or through a chain. The graph has one node per module file (inline modules belong to
# their file) and an arrow A -> B when A names B through `use crate::...`, `use super::...`,
# `use self::...`, a `use` or a path in code that starts with one of A's own child modules, or a
# `crate::`/`super::`/`self::` path in code. The file a module lives in is found from its `mod`
# declaration (and `#[path]`), which is not an arrow itself: a parent that declares a child and a
# child that uses its parent's items are no loop. Test code is left out: modules declared under
# `#[cfg(test)]` (a module's own `tests` child, `tests/` folders) and everything inside them.
# Any group of two or more files that reach each other (a strongly connected component) fails,
# listed as `file -> file: names` for each arrow inside it.

# The crates (package names) whose modules are checked for import loops. Add a crate here once
# `python3 .ci/layering.py` shows it without loops (it lists the loops of the others as notes).
MODULE_CHECKED = [
    "conformance-catalog",
    "conformance-core",
    "conformance-kube-models",
    "conformance-models",
    "conformance-node",
    "conformance-observe",
    "conformance-openshell-api",
    "conformance-real",
    "conformance-testtools",
    "conformance-upstream",
    "emulator-shell",
    "kube-emulator",
    "openshell-conformance",
]

_TOKEN = re.compile(
    r"""
    (?P<comment>//[^\n]*)
  | (?P<block>/\*)
  | (?P<raw>\b(?:br|r)(?P<hashes>\#*)")
  | (?P<str>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])')
    """,
    re.VERBOSE | re.DOTALL,
)


def _blank(s):
    """Keeps the line breaks of `s`, replaces everything else with spaces."""
    return re.sub(r"[^\n]", " ", s)


def strip_comments_and_literals(src):
    """The source with comments, strings and char literals blanked (line numbers kept)."""
    out, i = [], 0
    while True:
        m = _TOKEN.search(src, i)
        if not m:
            out.append(src[i:])
            return "".join(out)
        out.append(src[i : m.start()])
        if m.group("block"):
            depth, j = 1, m.end()
            while depth and j < len(src):
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(_blank(src[m.start() : j]))
            i = j
        elif m.group("raw"):
            end = src.find('"' + m.group("hashes"), m.end())
            j = len(src) if end < 0 else end + 1 + len(m.group("hashes"))
            out.append(_blank(src[m.start() : j]))
            i = j
        else:
            out.append(_blank(m.group(0)))
            i = m.end()


_MOD = re.compile(
    r"(?P<attrs>(?:#\[[^\]]*(?:\[[^\]]*\][^\]]*)*\]\s*)*)"
    r"(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(?P<name>r#\w+|\w+)\s*(?P<end>[;{])"
)
_PATH_ATTR = re.compile(r'#\[\s*path\s*=\s*"([^"]*)"\s*\]')
_USE = re.compile(r"\buse\s+([^;]*);")
_CODE_PATH = re.compile(r"(?<![\w:$])((?:crate|super|self)(?:\s*::\s*\w+)+)")


def _expand_use(tree):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (`as` renames dropped)."""
    tree = re.sub(r"\s+", " ", tree.strip())
    tree = re.sub(r"\bas\s+\w+", "", tree)

    def parse(s, i):
        # Returns (paths, index after this tree).
        prefix, paths = [], []
        word = ""
        while i < len(s):
            c = s[i]
            if s.startswith("::", i):
                if word:
                    prefix.append(word.strip())
                word, i = "", i + 2
            elif c == "{":
                i += 1
                while True:
                    sub, i = parse(s, i)
                    paths.extend(prefix + p for p in sub)
                    if i >= len(s) or s[i] == "}":
                        return paths, i + 1
                    i += 1  # the comma
            elif c in ",}":
                break
            else:
                word += c
                i += 1
        if word.strip():
            paths.append(prefix + [word.strip()])
        elif prefix and not paths:
            paths.append(prefix)
        return paths, i

    out, i = [], 0
    while i < len(tree):
        paths, i = parse(tree, i)
        out.extend(paths)
        i += 1
    return [p for p in out if p]


class Crate:
    """A crate's module files, from its root file and `mod` declarations."""

    def __init__(self, root):
        self.files = {}  # module path (tuple) -> file
        self.text = {}  # file -> source without comments and literals
        self.inline = {}  # file -> [(start, end, inline module path)]
        self._load(os.path.abspath(root), ())

    def _load(self, path, modpath):
        if not os.path.isfile(path):
            return
        self.files[modpath] = path
        src = strip_comments_and_literals(open(path, encoding="utf-8").read())
        self.text[path] = src
        self.inline[path] = []
        base = os.path.basename(path)
        mod_rs = base in ("mod.rs", "lib.rs", "main.rs") or not modpath
        here = os.path.dirname(path)
        child_dir = here if mod_rs else os.path.join(here, base[: -len(".rs")])
        self._scan(path, src, 0, len(src), modpath, child_dir, here)

    def _scan(self, path, src, start, end, modpath, child_dir, here):
        """Finds the `mod` declarations between start and end (nested inline modules too)."""
        i = start
        while True:
            m = _MOD.search(src, i, end)
            if not m:
                return
            attrs, name = m.group("attrs"), m.group("name").removeprefix("r#")
            test = re.search(r"cfg\s*\(\s*test\s*\)", attrs) is not None
            if m.group("end") == "{":
                close = _matching_brace(src, m.end() - 1)
                if test:
                    # Test code is no part of the graph: blank it.
                    self.text[path] = (
                        self.text[path][: m.start()]
                        + _blank(self.text[path][m.start() : close + 1])
                        + self.text[path][close + 1 :]
                    )
                    src = self.text[path]
                else:
                    inner = modpath + (name,)
                    self.inline[path].append((m.end(), close, inner))
                    self._scan(path, src, m.end(), close, inner, os.path.join(child_dir, name), here)
                i = close + 1
                continue
            i = m.end()
            if test:
                continue
            attr = _PATH_ATTR.search(attrs)
            if attr:
                candidates = [os.path.join(here, attr.group(1))]
            else:
                candidates = [
                    os.path.join(child_dir, name + ".rs"),
                    os.path.join(child_dir, name, "mod.rs"),
                ]
            for c in candidates:
                if os.path.isfile(c):
                    self._load(c, modpath + (name,))
                    break

    def module_at(self, path, pos):
        """The module path at `pos` of `path`: its file's, or an inline module's inside it."""
        best = None
        for start, end, inner in self.inline[path]:
            if start <= pos <= end and (best is None or len(inner) > len(best)):
                best = inner
        if best is not None:
            return best
        return next(m for m, f in self.files.items() if f == path)

    def resolve(self, here, segments):
        """The module file that `segments`, written in module `here`, names, and the name it
        takes from there; or None (another crate, or an item in scope)."""
        segs = list(segments)
        if segs[0] == "crate":
            cur, segs = (), segs[1:]
        elif segs[0] in ("super", "self"):
            cur = here
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    cur = cur[:-1]
                segs = segs[1:]
        elif tuple(here) + (segs[0],) in self.files or self._inline_exists(tuple(here) + (segs[0],)):
            cur = here
        else:
            return None  # another crate, or an item in scope
        # The longest prefix that is a module; the name is what the path takes from it.
        best, k = tuple(cur), 0
        while k < len(segs):
            cand = best + (segs[k],)
            if cand not in self.files and not self._inline_exists(cand):
                break
            best, k = cand, k + 1
        name = segs[k] if k < len(segs) else (best[-1] if best else "crate")
        return self._file_of(best), name

    def _inline_exists(self, modpath):
        return any(inner == modpath for spans in self.inline.values() for _, _, inner in spans)

    def _file_of(self, modpath):
        while modpath not in self.files:
            modpath = modpath[:-1]
        return self.files[modpath]

    def arrows(self):
        """{(from file, to file): set of names used}."""
        out = {}
        for modpath, path in self.files.items():
            src = self.text[path]
            uses = []
            for m in _USE.finditer(src):
                for segs in _expand_use(m.group(1)):
                    uses.append((m.start(), segs))
            used_spans = [(m.start(), m.end()) for m in _USE.finditer(src)]
            for m in _CODE_PATH.finditer(src):
                if any(a <= m.start() < b for a, b in used_spans):
                    continue
                uses.append((m.start(), [s.strip() for s in m.group(1).split("::")]))
            # Paths in code that start with a child module of the module they are written in.
            for m in re.finditer(r"(?<![\w:$])(\w+)\s*::\s*(\w+)", src):
                if any(a <= m.start() < b for a, b in used_spans):
                    continue
                here = self.module_at(path, m.start())
                if tuple(here) + (m.group(1),) in self.files:
                    uses.append((m.start(), [m.group(1), m.group(2)]))
            for pos, segs in uses:
                here = self.module_at(path, pos)
                found = self.resolve(here, segs)
                if found is None or found[0] == path:
                    continue
                out.setdefault((path, found[0]), set()).add(found[1])
        return out


def _matching_brace(src, open_at):
    depth = 0
    for j in range(open_at, len(src)):
        if src[j] == "{":
            depth += 1
        elif src[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(src) - 1


def _components(nodes, arrows):
    """Strongly connected components (Tarjan), each a sorted list of nodes."""
    succ = {n: sorted({b for (a, b) in arrows if a == n}) for n in nodes}
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return comps


def module_loops(root, relative_to="."):
    """The import loops among the modules of the crate whose root file is `root`: for each, the
    lines `a.rs -> b.rs: names` of the arrows inside it."""
    crate = Crate(root)
    arrows = crate.arrows()
    nodes = set(crate.files.values())
    loops = []
    for comp in _components(nodes, arrows):
        if len(comp) < 2:
            continue
        members = set(comp)
        rel = lambda f: os.path.relpath(f, relative_to)
        lines = [
            f"{rel(a)} -> {rel(b)}: {', '.join(sorted(names))}"
            for (a, b), names in sorted(arrows.items())
            if a in members and b in members
        ]
        loops.append(lines)
    return loops


def check_modules(meta, problems, notes):
    """Adds the module loops of the checked crates to problems, of the others to notes."""
    root_dir = meta["workspace_root"]
    ws_ids = set(meta["workspace_members"])
    known = set()
    for pkg in sorted(meta["packages"], key=lambda p: p["name"]):
        if pkg["id"] not in ws_ids:
            continue
        known.add(pkg["name"])
        for target in pkg["targets"]:
            if not set(target["kind"]) & {"lib", "rlib", "proc-macro", "bin"}:
                continue
            loops = module_loops(target["src_path"], root_dir)
            if not loops:
                continue
            what = f"{pkg['name']} ({os.path.relpath(target['src_path'], root_dir)})"
            if pkg["name"] in MODULE_CHECKED:
                for lines in loops:
                    problems.append(
                        f"import loop between the modules of {what}:\n    " + "\n    ".join(lines)
                    )
            else:
                for lines in loops:
                    files = sorted({line.split(" -> ")[0] for line in lines})
                    notes.append(f"{what}, not checked yet: import loop between {', '.join(files)}")
    for name in sorted(set(MODULE_CHECKED) - known):
        problems.append(f"MODULE_CHECKED names {name}, which is no crate of the workspace")


def self_test():
    """Writes small crates to a temporary directory and checks what the module check says."""
    cases = {
        # name: ({file: source}, expected loops as sets of file names[, the lines of the one loop])
        "a loop through use crate:: and a path in code": (
            {
                "lib.rs": "mod a;\nmod b;\nmod c;\n",
                "a.rs": "use crate::b::B;\npub struct A;\n",
                "b.rs": "pub struct B;\nfn f() { crate::a::A; }\n",
                "c.rs": "use crate::a::A;\n",
            },
            [{"a.rs", "b.rs"}],
        ),
        "a parent calling its child that uses the parent's items": (
            {
                "lib.rs": "mod cli;\n",
                "cli/mod.rs": "mod run;\npub struct Args;\npub fn go() { run::run(); }\n",
                "cli/run.rs": "use super::Args;\npub fn run() {}\n",
            },
            [{"cli/mod.rs", "cli/run.rs"}],
            ["cli/mod.rs -> cli/run.rs: run", "cli/run.rs -> cli/mod.rs: Args"],
        ),
        "a parent declaring children that use each other one way": (
            {
                "lib.rs": "pub mod x;\n",
                "x.rs": "mod y;\nmod z;\npub use y::Y;\n",
                "x/y.rs": "use super::z::{self, Z as Zed};\npub struct Y;\n",
                "x/z.rs": "pub struct Z;\n",
            },
            [],
        ),
        "test modules, comments, strings and inline helper modules are no arrows": (
            {
                "lib.rs": "mod a;\nmod b;\n",
                "a.rs": (
                    "pub struct A;\n"
                    "// use crate::b::B;\n"
                    "const S: &str = \"crate::b::B\";\n"
                    "const R: &str = r#\"use crate::b::B;\"#;\n"
                    "mod helper { use super::A; }\n"
                    "#[cfg(test)]\nmod tests { use crate::b::B; }\n"
                    "#[cfg(test)]\nmod more_tests;\n"
                ),
                "b.rs": "use crate::a::A;\npub struct B;\n",
                "a/more_tests.rs": "use crate::b::B;\n",
            },
            [],
        ),
        "a chain of three through super:: and a use tree": (
            {
                "main.rs": "mod p;\n",
                "p/mod.rs": "mod one;\nmod two;\nmod three;\n",
                "p/one.rs": "use super::{two::Two, three};\npub struct One;\n",
                "p/two.rs": "pub struct Two;\nfn f() -> super::three::Three { todo!() }\n",
                "p/three.rs": "pub struct Three;\nuse crate::p::one::One;\n",
            },
            [{"p/one.rs", "p/two.rs", "p/three.rs"}],
        ),
    }
    failed = 0
    for name, (files, want, *lines) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            for f, src in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, f)), exist_ok=True)
                with open(os.path.join(d, f), "w", encoding="utf-8") as out:
                    out.write(src)
            root = "main.rs" if "main.rs" in files else "lib.rs"
            loops = module_loops(os.path.join(d, root), d)
            got = [{line.split(" -> ")[0] for line in lines} for lines in loops]
            ok = sorted(map(sorted, got)) == sorted(map(sorted, want))
            if ok and lines:
                # The loop is spelled out with the names that tie it.
                ok = loops == lines
            print(f"layering self-test: {'ok  ' if ok else 'FAIL'} {name}")
            if not ok:
                failed += 1
                print(f"    want {want}, got {loops}")
    print(f"layering self-test: {len(cases) - failed} of {len(cases)} cases as expected")
    return 1 if failed else 0


def main() -> int:
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--all-features"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    ws_ids = set(meta["workspace_members"])
    name_of = {p["id"]: p["name"] for p in meta["packages"]}
    ws_names = {name_of[i] for i in ws_ids}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}

    def deps(pkg_id, kinds):
        for d in nodes[pkg_id]["deps"]:
            if any(k["kind"] in kinds for k in d["dep_kinds"]):
                yield d["pkg"]

    def closure(pkg_id):
        seen, todo = set(), [pkg_id]
        while todo:
            for d in deps(todo.pop(), {None}):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return {name_of[i] for i in seen}

    problems = []
    unknown = ws_names - ALLOWED.keys()
    if unknown:
        problems.append(f"workspace crates without a layering rule: {sorted(unknown)}")
    for pkg_id in sorted(ws_ids, key=name_of.get):
        name = name_of[pkg_id]
        if name not in ALLOWED:
            continue
        direct = {name_of[d] for d in deps(pkg_id, {None})} & ws_names
        if direct & TEST_ONLY:
            problems.append(f"{name} depends on test-only {sorted(direct & TEST_ONLY)} outside its tests")
        extra = direct - ALLOWED[name]
        if extra:
            problems.append(f"{name} depends on {sorted(extra)}; allowed: {sorted(ALLOWED[name])}")
        reached = closure(pkg_id) & FORBIDDEN_TRANSITIVE.get(name, set())
        if reached:
            problems.append(f"{name} reaches {sorted(reached)} through its dependencies")
        if name in NO_HARNESS_IN_TESTS:
            tests = {name_of[d] for d in deps(pkg_id, {None, "dev"})} & ws_names - TEST_ONLY - NOT_HARNESS
            if tests:
                problems.append(f"{name} (or its tests) depends on harness crates {sorted(tests)}")
    notes = []
    check_modules(meta, problems, notes)
    for n in notes:
        print(f"layering: note: {n}")
    for p in problems:
        print(f"layering: {p}", file=sys.stderr)
    if not problems:
        print(
            f"layering: {len(ws_names)} crates follow the flow; no import loop between the "
            f"modules of {', '.join(MODULE_CHECKED)}"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else main())
