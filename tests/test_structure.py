"""The package's layering, read from the source (AST), not from what happens to be imported at run time.

``LAYERS`` is the table of which package may import which (every ``nmt`` package, with the root modules as one
group); a package not in a row's set is an arrow the design forbids. In words:

- ``modules/`` is plain maths; the plain model (``model/``) builds on it and never imports the speed wing
  (``kernels/``), which works on the model from above;
- ``checkpoint/`` (the file format and averaging) imports neither the model nor the data: checkpoints are plain
  tensors and dicts;
- ``data/`` never imports checkpoints, inference or training;
- ``training/`` reaches decoding only through ``search/``, never through ``inference/``;
- the study (``experiments/``), the measurements (``perf/``) and the GPU check (``gpucheck/``) sit above the core,
  beside the command line (``commands/``): nothing in the core imports them;
- no import cycle among ``nmt``'s modules (imports inside functions included: a cycle hidden in a function body is
  still a cycle in the design); no module at the root beyond ``ROOT_MODULES``; no class over 200 lines;
- module paths written as strings (``Registry("nmt.training.optim", ...)``, ``-m nmt.inference.processes``) resolve.

Each rule is also checked to fail on a planted violation.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nmt"
ROOT = "root"  # the modules directly in nmt/: what every layer uses
ROOT_MODULES = {"__init__", "__main__", "atomic", "cli", "config", "errors", "metrics", "presets", "stdio", "vocab"}
CORE = {"modules", "model", "kernels", "machine", "checkpoint", "data", "search", "inference", "training"}
ABOVE = {"commands", "experiments", "perf", "gpucheck", "serve"}
# package -> the packages it may import (its own and the root's always allowed, except as noted for the root)
LAYERS: dict[str, set[str]] = {
    ROOT: {"data", "machine", "commands"},  # metrics and stdio read text through data/; cli starts the commands
    "modules": set(),
    "model": {"modules"},
    "kernels": {"model", "modules", "machine"},
    "machine": set(),
    "checkpoint": set(),
    "data": {"machine"},
    "search": {"model", "machine", "data"},
    "inference": {"model", "kernels", "modules", "machine", "checkpoint", "data", "search"},
    "training": {"model", "kernels", "modules", "machine", "checkpoint", "data", "search"},
    "perf": CORE,
    "experiments": CORE | {"perf"},
    "gpucheck": CORE | {"perf", "experiments"},
    "serve": CORE,
    "commands": CORE | {"perf", "experiments", "gpucheck", "serve"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> set[str]:
    """The ``nmt`` modules ``path`` imports (``from nmt.x import y`` counts ``nmt.x.y`` when that is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    # a package's __init__ importing its own submodules is how a package exposes them, not a layering edge
    return {name: {m for m in imported(path, modules) if m != name and not m.startswith(f"{name}.")}
            for name, path in paths.items()}


def package_of(module: str) -> str:
    """``nmt.training.loop`` -> ``training``; ``nmt.config`` and ``nmt`` -> the root group."""
    parts = module.split(".")
    if len(parts) >= 2 and (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return ROOT


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses packages against :data:`LAYERS` (a package missing from the table is one too)."""
    found = []
    for name, targets in graph.items():
        source = package_of(name)
        if source not in LAYERS:
            found.append(f"{name}: package {source} has no row in LAYERS")
            continue
        for target in targets:
            dest = package_of(target)
            if dest != source and dest != ROOT and dest not in LAYERS[source]:
                found.append(f"{name} imports {target} ({source} -> {dest})")
    return sorted(found)


def test_every_package_has_a_row_and_imports_follow_the_table() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages | {ROOT} == set(LAYERS)
    assert layer_violations(import_graph()) == []


PLANTED = [  # (importer, imported): one arrow each rule forbids
    ("nmt.model.transformer", "nmt.kernels.linear"),  # the plain model never imports the speed wing
    ("nmt.modules.attention", "nmt.kernels.linear"),
    ("nmt.checkpoint.files", "nmt.model.transformer"),  # checkpoint files: neither model ...
    ("nmt.checkpoint.average", "nmt.data.bpe"),  # ... nor data
    ("nmt.data.prepare", "nmt.checkpoint.files"),  # data: never checkpoints ...
    ("nmt.data.corpora", "nmt.inference.translator"),  # ... nor inference
    ("nmt.training.dev", "nmt.inference.translator"),  # training decodes through search/ only
    ("nmt.inference.translator", "nmt.experiments.pipeline"),  # the core never imports what sits above it
    ("nmt.training.loop", "nmt.perf.bench"),
    ("nmt.search.official", "nmt.gpucheck.runner"),
]


@pytest.mark.parametrize(("source", "target"), PLANTED)
def test_a_planted_violation_of_each_rule_is_found(source: str, target: str) -> None:
    graph = {name: set(targets) for name, targets in import_graph().items()}
    assert source in graph and target in graph, "the planted modules must exist"
    graph[source].add(target)
    assert any(v.startswith(f"{source} imports {target}") for v in layer_violations(graph))


def test_an_unknown_package_is_a_violation() -> None:
    graph = {name: set(targets) for name, targets in import_graph().items()}
    graph["nmt.commands.x"] = set()
    original = dict(LAYERS)
    try:
        del LAYERS["commands"]
        assert any("has no row" in v for v in layer_violations(graph))
    finally:
        LAYERS.clear()
        LAYERS.update(original)


def root_extras(names: set[str]) -> set[str]:
    return names - ROOT_MODULES


def test_the_root_holds_only_the_named_modules() -> None:
    assert root_extras({p.stem for p in PACKAGE.glob("*.py")}) == set()
    assert root_extras({p.stem for p in PACKAGE.glob("*.py")} | {"translate"}) == {"translate"}  # planted


def test_modules_are_plain_maths() -> None:
    functions = []
    for path in (PACKAGE / "modules").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(base).endswith("autograd.Function")
                                                      for base in node.bases):
                functions.append(f"{path.name}:{node.name}")
    assert functions == []


MODULE_STRING = re.compile(r"^(?:-m )?(nmt(?:\.\w+)+)$")
SEARCHED = [PACKAGE, PACKAGE.parent / "tests", PACKAGE.parent / "scripts", PACKAGE.parent / "fidelity"]


def module_strings(paths: list[Path]) -> dict[str, list[str]]:
    """String constants naming an ``nmt`` module (``"nmt.x.y"``, ``"-m nmt.x"``, argv lists ``["-m", "nmt.x"]``) and
    ``Registry("nmt.x", "NAME")`` pairs, each with where it was found."""
    found: dict[str, list[str]] = {}
    for root in paths:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file() and (
            p.suffix == ".py" or (p.parent.name == "scripts" and not p.suffix))]
        for path in files:
            if path.resolve() == Path(__file__).resolve():  # this file plants names on purpose
                continue
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Registry") and len(node.args) == 2:
                    module, name = (a.value if isinstance(a, ast.Constant) else None for a in node.args)
                    if isinstance(module, str) and isinstance(name, str):
                        found.setdefault(f"{module}:{name}", []).append(f"{path.name}:{node.lineno}")
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if (m := MODULE_STRING.match(node.value)) and m.group(1) != "nmt.nonexistent":
                        found.setdefault(m.group(1), []).append(f"{path.name}:{node.lineno}")
    return found


def unresolved(names: dict[str, list[str]]) -> list[str]:
    bad = []
    for name, where in names.items():
        module, _, attribute = name.partition(":")
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            # not a module: an attribute path such as "nmt.kernels.linear.drop_packs" must name a module's attribute
            parent, _, last = module.rpartition(".")
            try:
                ok = importlib.util.find_spec(parent) is not None and hasattr(importlib.import_module(parent), last)
            except ModuleNotFoundError:
                ok = False
            if not ok:
                bad.append(f"{name} ({', '.join(where)})")
        elif attribute and not hasattr(importlib.import_module(module), attribute):
            bad.append(f"{name} ({', '.join(where)})")
    return bad


def test_module_paths_written_as_strings_resolve() -> None:
    found = module_strings(SEARCHED)
    assert "nmt.inference.processes" in found and "nmt.training.optim:SCHEDULES" in found
    assert unresolved(found) == []
    assert unresolved({"nmt.decode_processes": ["planted"], "nmt.training.optim:NOPE": ["planted"]}) == [
        "nmt.decode_processes (planted)", "nmt.training.optim:NOPE (planted)"]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_cycle() -> None:
    assert find_cycle(import_graph()) is None


@pytest.mark.parametrize(("graph", "has_cycle"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"a": {"a"}}, True),
])
def test_find_cycle(graph: dict[str, set[str]], has_cycle: bool) -> None:
    assert (find_cycle(graph) is not None) == has_cycle


MAX_CLASS_LINES = 200


def test_no_class_is_over_200_lines() -> None:
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long.append(f"{module_name(path)}.{node.name}: {lines} lines")
    assert long == []
