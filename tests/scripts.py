"""The repository's extension-less scripts (``scripts/NAME``) imported as modules, for tests of their functions."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str, module_name: str | None = None) -> ModuleType:
    """``scripts/name`` executed as a fresh module named ``module_name`` (default: ``name``)."""
    loader = importlib.machinery.SourceFileLoader(module_name or name, str(SCRIPTS / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
