"""PNG plots of training runs: dev BLEU against step per pair (every seed, their mean and range), and the learned
QKNorm g of every attention module.

Figures are drawn on matplotlib's Agg canvas without pyplot (no global state, no display needed). matplotlib is the
optional ``plot`` extra (``pip install nmt[plot]``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nmt.atomic import atomic_open
from nmt.errors import NmtError
from nmt.model.transformer import site_of

# Panels of the gains plot: kind of attention (``nmt.model.transformer.ATTENTION_SITES``) → title.
GAIN_PANELS = {"encoder": "encoder self-attention", "decoder": "decoder self-attention", "cross": "cross-attention"}


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
    try:
        with atomic_open(path) as handle:
            figure.savefig(handle, format="png", dpi=dpi)
    except OSError as exc:
        raise NmtError(f"cannot write plot {path}: {exc.strerror or exc}") from None
    return path


Band = tuple[list[int], list[float], list[float], list[float]]


def seed_band(curves: Mapping[str, Sequence[Sequence[float]]]) -> Band:
    """Steps every seed evaluated at, with the mean, min and max dev BLEU over the seeds there."""
    by_seed = [{int(p[0]): float(p[1]) for p in points} for points in curves.values() if points]
    if not by_seed:
        return [], [], [], []
    steps = sorted(set.intersection(*(set(c) for c in by_seed)))
    values = [[c[step] for c in by_seed] for step in steps]
    return steps, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values]


def plot_dev_bleu(curves: Mapping[str, Mapping[str, Sequence[Sequence[float]]]], path: Path, title: str,
                  x_label: str = "training step") -> Path:
    """Dev BLEU against training step (or another x): per system a thin line for every seed, the mean over the
    seeds and a band from their minimum to their maximum.

    Args:
        curves: system → seed label → ``[[x, bleu], ...]`` (systems without points are listed as "no
            evaluations"); the band needs the seeds to share their x values.
        path: the PNG to write.
        title: figure title (e.g. the pair).
        x_label: what x is.
    """
    figure = new_figure(7.0, 4.5)
    axes = figure.add_subplot()
    for index, (system, seeds) in enumerate(curves.items()):
        color = f"C{index % 10}"
        drawn = {seed: points for seed, points in seeds.items() if points}
        if not drawn:
            axes.plot([], [], color=color, label=f"{system} (no evaluations)")
            continue
        for points in drawn.values():
            axes.plot([p[0] for p in points], [p[1] for p in points], color=color, linewidth=0.6, alpha=0.45)
        steps, mean, low, high = seed_band(drawn)
        if len(drawn) > 1 and steps:
            axes.fill_between(steps, low, high, color=color, alpha=0.15, linewidth=0)
        axes.plot(steps, mean, color=color, linewidth=1.8, marker="o" if len(steps) < 30 else None, markersize=3,
                  label=f"{system} (mean of {len(drawn)} seed{'s' if len(drawn) > 1 else ''})")
    axes.set_xlabel(x_label)
    axes.set_ylabel("dev BLEU (tokenized)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return save_figure(figure, path)


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
    sites = {name: site for name in gains[-1] if (site := site_of(name)) is not None}
    for axes, (kind, panel) in zip(panels, GAIN_PANELS.items()):
        layers = sorted((layer, name) for name, (k, layer) in sites.items() if k == kind)
        for layer, name in layers:
            axes.plot(steps, [g.get(name, float("nan")) for g in gains], label=f"layer {layer + 1}")
        axes.set_title(panel)
        axes.set_xlabel("training step")
        axes.grid(alpha=0.3)
        if layers:
            axes.legend(fontsize="x-small")
    panels[0].set_ylabel("learned g")
    figure.suptitle(title)
    return save_figure(figure, path)
