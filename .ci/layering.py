#!/usr/bin/env python3
"""Fails if the crates stop following the harness's layering (README, "Architecture").

Reads `cargo metadata` and checks each workspace crate's normal (non-dev, non-build)
dependencies, direct and transitive:
  - conformance-core reaches no Kubernetes client (kube, k8s-openapi) and no other harness crate;
  - kube-emulator reaches no harness crate, not even in its tests;
  - conformance-catalog depends on conformance-core and no other harness crate;
  - each crate depends only on the harness crates below it in the flow.
"""

import json
import subprocess
import sys

# What each workspace crate may depend on (normal dependencies), among the workspace's crates.
ALLOWED = {
    "conformance-core": set(),
    "kube-emulator": set(),
    # Finds real tools for tests; a dev-dependency only, and itself depends on nothing.
    "conformance-testtools": set(),
    # OpenShell's gRPC schema and generated code; holds no harness logic.
    "conformance-openshell-api": set(),
    # Containers as host processes: the OS side only (namespaces, mounts, links), no cluster.
    "conformance-node": set(),
    "conformance-observe": {"conformance-core"},
    "conformance-models": {
        "conformance-core",
        "kube-emulator",
        "conformance-observe",
        "conformance-openshell-api",
        "conformance-node",
    },
    "conformance-real": {"conformance-core", "conformance-observe", "conformance-openshell-api"},
    "conformance-catalog": {"conformance-core"},
    "openshell-conformance": {
        "conformance-core",
        "conformance-catalog",
        "kube-emulator",
        "conformance-models",
        "conformance-real",
        "conformance-observe",
        "conformance-node",
    },
}
# Crates that must not be reached at all, even transitively, through normal dependencies.
FORBIDDEN_TRANSITIVE = {
    "conformance-core": {"kube", "k8s-openapi", "kube-client", "kube-runtime"},
    "conformance-catalog": {"kube", "k8s-openapi", "kube-client", "kube-runtime"},
    "conformance-node": {"kube", "k8s-openapi", "kube-client", "kube-runtime"},
}
# Crates whose tests (dev-dependencies) must not reach a harness crate either.
NO_HARNESS_IN_TESTS = {"kube-emulator"}
# Crates that hold no harness code, only test support.
TEST_ONLY = {"conformance-testtools"}


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
            tests = {name_of[d] for d in deps(pkg_id, {None, "dev"})} & ws_names - TEST_ONLY
            if tests:
                problems.append(f"{name} (or its tests) depends on harness crates {sorted(tests)}")
    for p in problems:
        print(f"layering: {p}", file=sys.stderr)
    if not problems:
        print(f"layering: {len(ws_names)} crates follow the flow")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
