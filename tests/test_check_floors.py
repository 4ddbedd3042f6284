"""``scripts/check_floors`` tests every floor it claims (issue 47): it once ran without ``--torch`` and so never tested
the declared torch floor. Without ``--torch`` it now refuses a reused torch that is not at the floor."""

from __future__ import annotations

from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import torch

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = """[project]
dependencies = ["torch>=2.13,<2.15", "pyyaml>=6", "sacremoses>=0.1.1"]
[project.optional-dependencies]
plot = ["matplotlib>=3.6"]
"""


def _script() -> ModuleType:
    loader = SourceFileLoader("nmt_check_floors_script", str(ROOT / "scripts" / "check_floors"))
    module = ModuleType(loader.name)
    module.__file__ = loader.path  # the script finds pyproject.toml from its own path
    loader.exec_module(module)
    return module


def test_floors_are_pinned_to_the_oldest_release_line() -> None:
    script = _script()
    assert script.floor_pins(True, PYPROJECT) == ["torch==2.13.*", "pyyaml==6.0.*", "sacremoses==0.1.1",
                                                  "matplotlib==3.6.*"]
    assert script.floor_pins(False, PYPROJECT) == ["pyyaml==6.0.*", "sacremoses==0.1.1", "matplotlib==3.6.*"]


def test_a_reused_torch_must_be_at_its_floor() -> None:
    script = _script()
    assert script.torch_floor_problem("2.13.0+cpu", PYPROJECT) is None
    assert script.torch_floor_problem("2.13.1", PYPROJECT) is None
    for installed in ("2.14.0+cpu", "2.4.0", "2.1.3"):
        problem = script.torch_floor_problem(installed, PYPROJECT)
        assert problem is not None and installed in problem and "torch==2.13.*" in problem


def test_the_declared_torch_floor_is_the_torch_tested_here() -> None:
    """The repository's own floor: CI installs torch 2.13.0 (scripts/install), so `make floors` tests it as is."""
    assert _script().torch_floor_problem(torch.__version__) is None
