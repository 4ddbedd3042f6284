"""PNG plots of training runs: dev BLEU against step per pair, and the learned QKNorm g of every attention module.

Figures are drawn on matplotlib's Agg canvas without pyplot (no global state, no display needed). matplotlib is the
optional ``plot`` extra (``pip install nmt[plot]``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nmt.errors import NmtError

# Panels of the gains plot: title → (module-name prefix, suffix), as in ``Transformer.attention_modules``.
GAIN_PANELS = {"encoder self-attention": ("encoder.", ".self_attn"),
               "decoder self-attention": ("decoder.", ".self_attn"),
               "cross-attention": ("decoder.", ".cross_attn")}


def new_figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` on the Agg canvas; a missing matplotlib is a one-line :class:`NmtError`."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise NmtError("plots need matplotlib: pip install 'nmt[plot]' (or pip install matplotlib)") from None
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Any, path: Path, dpi: int = 120) -> Path:
    """Write ``figure`` as PNG atomically (a temporary file renamed over ``path``); ``-`` is stdout."""
    if str(path) == "-":
        figure.savefig(sys.stdout.buffer, format="png", dpi=dpi)
        sys.stdout.buffer.flush()
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.png")
    try:
        figure.savefig(tmp, format="png", dpi=dpi)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise NmtError(f"cannot write plot {path}: {exc.strerror or exc}") from None
    return path


def plot_dev_bleu(curves: dict[str, Sequence[Sequence[float]]], path: Path, title: str) -> Path:
    """Dev BLEU against training step, one line per system.

    Args:
        curves: system → ``[[step, bleu], ...]`` (systems without points are listed as "no evaluations").
        path: the PNG to write.
        title: figure title (e.g. the pair).
    """
    figure = new_figure(7.0, 4.5)
    axes = figure.add_subplot()
    for system, points in curves.items():
        if points:
            steps, bleu = zip(*[(p[0], p[1]) for p in points])
            axes.plot(steps, bleu, marker="o" if len(points) < 30 else None, markersize=3, label=system)
        else:
            axes.plot([], [], label=f"{system} (no evaluations)")
    axes.set_xlabel("training step")
    axes.set_ylabel("dev BLEU (tokenized)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return save_figure(figure, path)


def _layer(name: str) -> int:
    parts = name.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0


def plot_gains(steps: Sequence[int], gains: Sequence[dict[str, float]], path: Path, title: str) -> Path:
    """The learned QKNorm g of every attention module against step: one panel per kind, one line per layer.

    Args:
        steps: evaluation steps.
        gains: for each step, module name → g (``Transformer.qknorm_gains``).
        path: the PNG to write.
        title: figure title (e.g. pair and system).
    """
    if not gains or len(steps) != len(gains):
        raise NmtError(f"no QKNorm gains to plot for {title}")
    figure = new_figure(12.0, 4.0)
    panels = figure.subplots(1, len(GAIN_PANELS), sharey=True)
    for axes, (panel, (prefix, suffix)) in zip(panels, GAIN_PANELS.items()):
        names = sorted((n for n in gains[-1] if n.startswith(prefix) and n.endswith(suffix)), key=_layer)
        for name in names:
            axes.plot(steps, [g.get(name, float("nan")) for g in gains], label=f"layer {_layer(name) + 1}")
        axes.set_title(panel)
        axes.set_xlabel("training step")
        axes.grid(alpha=0.3)
        if names:
            axes.legend(fontsize="x-small")
    panels[0].set_ylabel("learned g")
    figure.suptitle(title)
    return save_figure(figure, path)
