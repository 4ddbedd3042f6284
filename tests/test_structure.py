"""The package's layering, read from the source (AST), not from what happens to be imported at run time:

- the core of ``nmt`` never imports the reproduction study (``nmt.experiments``), the measurement package
  (``nmt.perf``) or the GPU check (``nmt.gpucheck``); only those, and the command-line layer (``nmt.commands``), do;
- ``nmt.modules`` is plain maths: no ``torch.autograd.Function``, and none of the speed wing (``nmt.kernels``), the
  hardware probe, the allocator, the runtime or the measurement package;
- no class over 200 lines;
- no import cycle among ``nmt``'s modules (imports inside functions included: a cycle hidden in a function body is
  still a cycle in the design).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nmt"
EXPERIMENTS = "nmt.experiments"
# the study, the measurements and the GPU check sit above the core, beside the command line
OUTSIDE_CORE = ("nmt.experiments", "nmt.perf", "nmt.gpucheck", "nmt.commands")
MODULES = "nmt.modules"
NOT_IN_MODULES = ("nmt.kernels", "nmt.machine", "nmt.perf", "nmt.gpucheck")


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


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in packages)


def test_core_never_imports_the_study_the_measurements_or_the_gpu_check() -> None:
    outside = ("nmt.experiments", "nmt.perf", "nmt.gpucheck")
    offenders = sorted(f"{name} imports {target}" for name, targets in import_graph().items()
                       if not _within(name, OUTSIDE_CORE)
                       for target in targets if _within(target, outside))
    assert offenders == []


def test_the_measurements_never_import_the_study_except_the_gpu_check() -> None:
    offenders = sorted(f"{name} imports {target}" for name, targets in import_graph().items()
                       if _within(name, ("nmt.perf",)) for target in targets if _within(target, (EXPERIMENTS,)))
    assert offenders == []


def test_modules_are_plain_maths() -> None:
    graph = import_graph()
    offenders = sorted(f"{name} imports {target}" for name, targets in graph.items() if _within(name, (MODULES,))
                       for target in targets if _within(target, NOT_IN_MODULES))
    assert offenders == []
    functions = []
    for path in (PACKAGE / "modules").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(base).endswith("autograd.Function")
                                                      for base in node.bases):
                functions.append(f"{path.name}:{node.name}")
    assert functions == []


def test_no_measurement_module_at_the_top_level() -> None:
    assert not (PACKAGE / "bench.py").exists() and not (PACKAGE / "roof.py").exists()


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
