"""The layers import only downward: kernelflow's commands (cli, deploy, export) -> flows (Prefect only there) ->
artifacts (the store) -> stages (contracts and the six stages, over their helper sub-packages). Checked twice: on the
source (every import statement, function-level ones included; no cycle between files or packages) and by importing
each layer in a fresh process with the layers above it, and Prefect for all but flows, made unimportable."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kernelflow"
LAYERS = ("stages", "artifacts", "flows", "commands")  # bottom to top
STAGES = ("generate", "compile", "verify", "benchmark", "profile", "refine")  # the top of kernelflow.stages
BASE = ("contracts", "errors", "entry")  # kernelflow.stages' own modules every helper may use


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name (stages/, artifacts/ and flows/ through kernelflow's links)."""
    found = {}
    for dirpath, _, files in os.walk(PACKAGE, followlinks=True):
        for name in files:
            if name.endswith(".py"):
                path = Path(dirpath) / name
                dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found[dotted.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules a file imports, anywhere in it (a name imported from a package that is a module of its
    own counts as that module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        for name in names:
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known:
                out.add(name)
    return out


def layer(module: str) -> str:
    part = module.split(".")[1] if module.count(".") else ""
    return part if part in LAYERS[:3] else "commands"


def unit(module: str) -> str:
    """A file's package for the cycle check: a sub-package of a layer, or the layer's own module."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 2 and parts[1] in LAYERS[:3] else ".".join(parts[:2])


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Imports that go up a layer, and helpers of kernelflow.stages that import a stage."""
    found = []
    for source, targets in edges.items():
        for target in targets:
            if LAYERS.index(layer(target)) > LAYERS.index(layer(source)):
                found.append(f"{source} imports {target}, a layer above it")
            helper = layer(source) == "stages" and source.count(".") > 2
            if helper and target.split(".")[-1] in STAGES and target.count(".") == 2:
                found.append(f"{source}, a helper, imports the stage {target}")
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(path, set(found)) - {name} for name, path in found.items()}


def test_no_import_goes_up_a_layer_and_no_helper_imports_a_stage():
    assert violations(graph()) == []


def test_no_cycle_between_files_or_packages():
    edges = graph()
    packages: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        packages[unit(source)] |= {unit(t) for t in targets} - {unit(source)}
    assert cycles(edges) == [] and cycles(dict(packages)) == []


def test_the_checks_catch_a_stage_that_imports_a_flow_or_the_store():
    edges = {"kernelflow.stages.verify": {"kernelflow.artifacts.store"},
             "kernelflow.stages.harness.audit": {"kernelflow.flows.run", "kernelflow.stages.verify"},
             "kernelflow.artifacts.winner": {"kernelflow.cli"}, "kernelflow.flows.run": {"kernelflow.stages.verify"}}
    assert len(violations(edges)) == 4
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


BLOCKER = textwrap.dedent('''
    import importlib, importlib.abc, pkgutil, sys
    blocked = {blocked!r}
    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in blocked):
                raise ImportError(f"{{name}} is above this layer")
            return None
    sys.meta_path.insert(0, Blocker())
    sys.path.insert(0, {extra!r})
    import kernelflow
    for name in {names!r}:
        importlib.import_module(name)
    print("imported", len({names!r}))
''')


def import_with(names: list[str], blocked: list[str], extra: str = "") -> subprocess.CompletedProcess:
    script = BLOCKER.format(blocked=blocked, names=names, extra=extra)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", LAYERS)
def test_each_layer_imports_with_the_layers_above_it_blocked(name: str):
    above = [f"kernelflow.{m}" for m in ("cli", "deploy", "export", "export_op", "export_replay")]
    above += [f"kernelflow.{upper}" for upper in LAYERS[LAYERS.index(name) + 1:3]]
    above += [] if name in ("flows", "commands") else ["prefect"]
    names = sorted(m for m in modules() if layer(m) == name and m != "kernelflow")
    done = import_with(names, [] if name == "commands" else above)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_blocker_stops_a_stage_that_imports_the_store(tmp_path: Path):
    (tmp_path / "kf_rogue_stage.py").write_text("import kernelflow.artifacts.store\n")
    done = import_with(["kf_rogue_stage"], ["kernelflow.artifacts", "kernelflow.flows", "prefect"], str(tmp_path))
    assert done.returncode != 0 and "kernelflow.artifacts is above this layer" in done.stderr
