"""Plot attention heatmaps for one sentence: ``nmt attention --checkpoint CKPT [--checkpoint CKPT2] --src TEXT
--output FILE.png``.

The sentence is translated (beam search with the checkpoint's decoding settings, or --beam), then the attention
weights over the source and the produced translation are recomputed and one layer is drawn with the subword pieces
as tick labels: --kind encoder (source × source), decoder (translation × translation) or cross (translation ×
source, the default). --layer picks the layer (default: the last; negative counts from the end), --head one head
(default: the mean over heads). Two checkpoints are drawn side by side, each with its own translation (e.g. the
baseline and QKNorm, as in the papers' Figures 1–2); QKNorm panels show the learned g of the plotted module.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nmt.commands import add_json
from nmt.config import TrainConfig, choices


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", action="append", required=True,
                        help="checkpoint to plot (give it twice for two panels side by side)")
    parser.add_argument("--src", required=True, help="the source sentence")
    parser.add_argument("--output", required=True, help="PNG file to write; - is stdout (the text then goes to stderr)")
    parser.add_argument("--kind", choices=["encoder", "decoder", "cross"], default="cross",
                        help="which attention to draw (default: cross)")
    parser.add_argument("--layer", type=int, help="layer index, 0-based; negative from the end (default: last)")
    parser.add_argument("--head", type=int, help="head index, 0-based (default: mean over heads)")
    parser.add_argument("--beam", type=int, help="beam size for the translation (default: decode.beam)")
    parser.add_argument("--pretokenized", action="store_true",
                        help="the sentence is Moses-tokenized already (as in the papers' corpora)")
    parser.add_argument("--device", choices=choices(TrainConfig, "device"), default="auto")
    add_json(parser, "each panel's title, translation, query and key pieces and weights")


def run(args: argparse.Namespace) -> int:
    from nmt.errors import NmtError
    from nmt.experiments.attention_plot import attention_view, plot_views
    from nmt.inference.translator import Translator

    if len(args.checkpoint) > 2:
        raise NmtError(f"--checkpoint given {len(args.checkpoint)} times; at most two are drawn side by side")
    output = Path(args.output)
    to_stdout = args.output == "-"
    if not to_stdout and output.suffix.lower() != ".png":
        raise NmtError(f"--output {output} must end in .png")
    views = []
    for checkpoint in args.checkpoint:
        translator = Translator.from_checkpoint(checkpoint, args.device)
        label = f"{Path(checkpoint).parent.name}/{Path(checkpoint).name} ({translator.config.system})"
        views.append(attention_view(translator, args.src, args.kind, args.layer, args.head, args.beam,
                                    args.pretokenized, label))
    plot_views(views, output)
    text = sys.stderr if to_stdout else sys.stdout
    if args.json:
        panels = [{"title": v.title, "translation": v.translation, "queries": v.rows, "keys": v.cols,
                   "weights": v.weights.tolist()} for v in views]
        print(json.dumps({"output": args.output, "panels": panels}, ensure_ascii=False), file=text)
        return 0
    for view in views:
        print(f"{view.title}\n  translation: {view.translation}", file=text)
    if not to_stdout:
        print(f"wrote {output}")
    return 0
