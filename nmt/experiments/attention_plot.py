"""Attention heatmaps for one sentence (the papers' Figures 1–2): translate it, recompute the attention weights of
the source and the produced translation through ``Transformer.attention_maps``, and draw one layer as a heatmap with
the subword pieces as tick labels.

Rows are queries, columns keys: encoder (source × source), decoder (target × target, causal), cross (target ×
source). Target rows are labelled with the piece each position predicts (the translation, then ``</s>``); the
decoder's columns with its inputs (``<s>``, then the translation). Without a head, the heads are averaged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmt.errors import NmtError
from nmt.experiments.plots import new_figure, save_figure
from nmt.inference.translator import Translator
from nmt.model.transformer import attention_site
from nmt.vocab import BOS, EOS

KINDS = ("encoder", "decoder", "cross")


@dataclass(frozen=True)
class AttentionView:
    """One heatmap: weights (queries × keys) with their labels, a title and the translation it was computed on."""

    title: str
    weights: np.ndarray
    rows: list[str]
    cols: list[str]
    translation: str


def select(maps: dict[str, list[torch.Tensor]], kind: str, layer: int | None, head: int | None
           ) -> tuple[np.ndarray, int]:
    """The (Tq, Tk) weights of one layer (negative counts from the end; default last) and one head (default mean).

    Returns:
        The weights and the layer's 0-based index.

    Raises:
        NmtError: unknown kind, or a layer/head index outside the model.
    """
    if kind not in KINDS:
        raise NmtError(f"--kind {kind!r} is not one of {', '.join(KINDS)}")
    layers = maps[kind]
    index = len(layers) - 1 if layer is None else layer
    if not -len(layers) <= index < len(layers):
        raise NmtError(f"--layer {layer} is out of range: the model has {len(layers)} {kind} layers "
                       f"(0..{len(layers) - 1}, or negative from the end)")
    weights = layers[index][0]  # (H, Tq, Tk) of the only sentence
    n_heads = weights.shape[0]
    if head is not None and not 0 <= head < n_heads:
        raise NmtError(f"--head {head} is out of range: the model has {n_heads} heads (0..{n_heads - 1})")
    chosen = weights.mean(0) if head is None else weights[head]
    return chosen.float().cpu().numpy(), index % len(layers)


def attention_view(translator: Translator, sentence: str, kind: str = "cross", layer: int | None = None,
                   head: int | None = None, beam: int | None = None, pretokenized: bool = False,
                   label: str = "") -> AttentionView:
    """Translate ``sentence`` and return the chosen attention map over its source and translation pieces."""
    (src_ids,) = translator.encode([sentence], pretokenized)
    if not src_ids:
        raise NmtError("--src is empty")
    ((best, *_),) = translator.translate_ids([src_ids], beam=beam, nbest=1)
    model = translator.model
    if not hasattr(model, "attention_maps"):
        raise NmtError("this model does not expose attention maps")
    device = translator.device
    src = torch.tensor([[*src_ids, EOS]], dtype=torch.long, device=device)
    tgt_in = torch.tensor([[BOS, *best.tokens]], dtype=torch.long, device=device)
    maps = model.attention_maps(src, tgt_in)
    weights, index = select(maps, kind, layer, head)
    pieces = [piece for piece, _ in translator.tokenizer.piece_scores()]
    src_labels = [pieces[i] for i in src_ids] + ["</s>"]
    out_labels = [pieces[i] for i in best.tokens] + ["</s>"]
    in_labels = ["<s>"] + [pieces[i] for i in best.tokens]
    rows, cols = {"encoder": (src_labels, src_labels), "decoder": (out_labels, in_labels),
                  "cross": (out_labels, src_labels)}[kind]
    gain = _gain(translator, kind, index)
    heads = "mean of heads" if head is None else f"head {head}"
    title = f"{label + ': ' if label else ''}{kind} layer {index}, {heads}{gain}"
    (translation,) = translator.decode([best.tokens], pretokenized)
    return AttentionView(title, weights, rows, cols, translation)


def _gain(translator: Translator, kind: str, layer: int) -> str:
    gains_of = getattr(translator.model, "qknorm_gains", None)
    if gains_of is None:
        return ""
    name = attention_site(kind, layer)
    gains = gains_of()
    return f" (QKNorm g = {gains[name]:.2f})" if name in gains else ""


def plot_views(views: Sequence[AttentionView], path: Path) -> Path:
    """Draw the views side by side (one panel each, shared colour scale 0–1) and write a PNG."""
    longest = max(max(len(v.rows), len(v.cols)) for v in views)
    size = min(max(4.0, 0.3 * longest + 2.0), 16.0)
    figure = new_figure(size * len(views), size)
    panels = figure.subplots(1, len(views), squeeze=False)[0]
    image = None
    for axes, view in zip(panels, views):
        image = axes.imshow(view.weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axes.set_xticks(range(len(view.cols)), view.cols, rotation=90, fontsize="small")
        axes.set_yticks(range(len(view.rows)), view.rows, fontsize="small")
        axes.set_xlabel("keys")
        axes.set_ylabel("queries")
        axes.set_title(view.title, fontsize="medium")
    figure.colorbar(image, ax=list(panels), shrink=0.8, label="attention weight")
    return save_figure(figure, path)
