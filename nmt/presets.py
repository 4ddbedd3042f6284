"""The configs that ship inside the package (``nmt/configs/*.yaml``) and how a name or a path finds one.

``nmt train gl-en-cpu`` (a name) and ``nmt train path/to/file.yaml`` (a path) both work from any directory: the
packaged files are read through :mod:`importlib.resources`, never through a path derived from the repository. In a
checkout, the top-level ``configs`` is a symlink to ``nmt/configs``, so ``nmt train configs/gl-en.yaml`` works too.

A pair without a CPU preset (``PAIR-cpu.yaml``) gets a CPU recipe derived from its own config: the ``model`` and
``train`` sections of the reference CPU preset (``gl-en-cpu.yaml``) as dotted overrides on top of it
(:func:`cpu_overrides`).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from nmt.errors import NmtError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable  # Python >= 3.11; annotations only

CPU_REFERENCE = "gl-en-cpu"  # the CPU preset whose model and train sections other pairs' CPU recipes reuse
NOT_RUNNABLE = ("base",)  # documentation of every key, not a recipe


def config_dir() -> Traversable:
    """The packaged configs folder (a real directory for any ordinary install)."""
    return files("nmt") / "configs"


def config_names() -> list[str]:
    """Names of the packaged configs, e.g. ``gl-en``, ``gl-en-cpu``, ``bench``."""
    return sorted(item.name[: -len(".yaml")] for item in config_dir().iterdir() if item.name.endswith(".yaml"))


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.endswith((".yaml", ".yml")) or text in (".", "..")


def find_config(name_or_path: str | Path) -> Path | Traversable:
    """A config by path (an existing file, or anything that looks like a path) or by packaged name.

    Args:
        name_or_path: ``path/to/file.yaml``, or the name of a packaged config (``gl-en``, ``gl-en-cpu``, ``bench``).

    Returns:
        The file to read: a :class:`~pathlib.Path` for a path, the packaged resource for a name.

    Raises:
        NmtError: a path that does not exist, or a name that is not a packaged config (the message lists them).
    """
    path = Path(name_or_path)
    if isinstance(name_or_path, Path) or path.is_file() or _looks_like_path(str(name_or_path)):
        if path.is_dir():
            raise NmtError(f"config {path} is a directory, not a YAML file")
        if not path.is_file():
            raise NmtError(f"config file not found: {path}")
        return path
    resource = config_dir() / f"{name_or_path}.yaml"
    if not resource.is_file():
        raise NmtError(f"no config file {name_or_path} and no packaged config named '{name_or_path}' "
                       f"(packaged: {', '.join(config_names())})")
    return resource


def pair_config(pair: str, scale: str = "paper", config_dir_override: str | Path | None = None) -> Path | Traversable:
    """The config of a language pair: ``PAIR.yaml`` (the papers' setup) or, with ``scale="cpu"``, ``PAIR-cpu.yaml``
    when that preset exists and ``PAIR.yaml`` otherwise (pair it with :func:`cpu_overrides`).

    Args:
        pair: ``src-tgt``, e.g. ``gl-en``.
        scale: ``paper`` or ``cpu``.
        config_dir_override: a folder to look in instead of the packaged configs.

    Raises:
        NmtError: the pair has no config (the message lists the pairs that have one).
    """
    directory: Path | Traversable = Path(config_dir_override) if config_dir_override else config_dir()
    names = [f"{pair}-cpu", pair] if scale == "cpu" else [pair]
    for name in names:
        candidate = directory / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    available = sorted(item.name[:-5] for item in directory.iterdir()
                       if item.name.endswith(".yaml") and item.name[:-5] not in NOT_RUNNABLE)
    tried = " or ".join(f"{name}.yaml" for name in names)
    raise NmtError(f"no config for pair {pair} at scale {scale}: no {tried} in {directory} "
                   f"(available: {', '.join(available) or 'none'})")


def is_cpu_preset(config: Path | Traversable) -> bool:
    return config.name.endswith("-cpu.yaml")


def _flatten(tree: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...')}"
                       .rstrip())
    return out


def cpu_overrides(pair: str) -> list[str]:
    """Dotted overrides that turn ``PAIR.yaml`` into a CPU recipe: the reference CPU preset's ``model`` and
    ``train`` sections (keys the pair sets and the reference does not go back to their defaults), and
    ``train.save_dir=runs/PAIR-cpu``. The data section (pair, BPE size) stays the pair's."""
    def read(name: str) -> dict[str, Any]:
        return yaml.safe_load((config_dir() / f"{name}.yaml").read_text(encoding="utf-8")) or {}

    reference, own, base = read(CPU_REFERENCE), read(pair), read("base")
    sections: dict[str, Any] = {}
    for key in ("model", "train"):
        # what the pair's config sets and the reference leaves at its default goes back to the default (base.yaml)
        unset = {k: base[key][k] for k in own.get(key) or {} if k not in (reference.get(key) or {})}
        sections[key] = {**unset, **(reference.get(key) or {})}
    sections["train"]["save_dir"] = f"runs/{pair}-cpu"
    return _flatten(sections, "")
