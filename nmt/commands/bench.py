"""Measure speed on prepared data: ``nmt bench CONFIG [--steps N | --epoch] [--repeats R] [--json] [--set k=v]``.

Training throughput (source+target tokens/s, target tokens/s, sentences/s from wall clock over ``--steps`` updates,
or the whole first epoch with ``--epoch``, after ``--warmup``), peak memory (RSS; CUDA max allocated on a GPU) and
the training step against its matmul roof (its matmuls replayed alone with the same shapes, ``--roof-samples``
updates), decoding speed (sentences/s at ``--beam`` and greedy on ``--sentences`` test sentences), each the median of
``--repeats`` runs with its spread, and the machine's load average before and after. Example:
``nmt bench bench --set system=prenorm_fixnorm_layernorm``.
"""

from __future__ import annotations

import argparse

from nmt.commands import add_quiet
from nmt.config import TrainConfig, choices
from nmt.perf.bench import BenchSettings

_DEFAULTS = BenchSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config",
                        help="YAML config of the model, data and batch size, or a packaged config's name (e.g. bench)")
    parser.add_argument("--device", choices=choices(TrainConfig, "device"), default=None, help="override train.device")
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--steps", type=int, default=_DEFAULTS.steps, help="timed training updates per repeat")
    steps.add_argument("--epoch", action="store_true",
                       help="time one whole epoch instead (every batch once: no batch-sampling noise)")
    parser.add_argument("--warmup", type=int, default=_DEFAULTS.warmup, help="untimed updates before timing")
    parser.add_argument("--repeats", type=int, default=_DEFAULTS.repeats, help="repeats of every measurement")
    parser.add_argument("--sentences", type=int, default=_DEFAULTS.decode_sentences,
                        help="test sentences decoded per repeat (0: skip decoding)")
    parser.add_argument("--beam", type=int, default=_DEFAULTS.beam, help="beam size of the beam-search measurement")
    parser.add_argument("--checkpoint", default=None,
                        help="decode with this checkpoint's weights (default: the model after the timed steps)")
    parser.add_argument("--roof-samples", type=int, default=_DEFAULTS.roof_samples,
                        help="updates on which the training step is compared with its matmul roof (0: skip)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON instead of a table")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (repeatable), e.g. --set system=qknorm")
    add_quiet(parser)


def run(args: argparse.Namespace) -> int:
    from nmt.config import load_config
    from nmt.errors import NmtError
    from nmt.perf.bench import format_report, run_bench, to_json

    for name in ("steps", "repeats", "beam") if not args.epoch else ("repeats", "beam"):
        if getattr(args, name) < 1:
            raise NmtError(f"--{name} {getattr(args, name)} must be at least 1")
    if args.warmup < 0 or args.sentences < 0 or args.roof_samples < 0:
        raise NmtError("--warmup, --sentences and --roof-samples must be >= 0")
    overrides = ["train.progress=false", "train.tensorboard=false", *args.overrides]
    if args.device:
        overrides.append(f"train.device={args.device}")
    cfg = load_config(args.config, overrides)
    settings = BenchSettings(steps=None if args.epoch else args.steps, warmup=args.warmup, repeats=args.repeats,
                             decode_sentences=args.sentences, beam=args.beam, checkpoint=args.checkpoint,
                             roof_samples=args.roof_samples)
    result = run_bench(cfg, settings)
    result["config"] = args.config
    result["overrides"] = args.overrides
    print(to_json(result) if args.json else format_report(result))
    return 0
