"""Train a model: ``nmt train CONFIG [--set section.key=value ...] [--resume]``.

CONFIG is a YAML file (a run's saved ``config.yaml`` too; ``-`` reads it from stdin) or the name of a packaged
config: gl-en, gl-en-cpu, sk-en, en-vi, en-he, ar-en, bench (``nmt train gl-en-cpu`` works from any directory).

Under ``torchrun --nproc_per_node=N -m nmt train CONFIG`` every process trains with DDP (nccl on GPU, gloo on CPU).
SIGINT/SIGTERM save checkpoint_last.pt and stop; ``--resume`` continues from it exactly.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nmt.commands import add_json, add_quiet
from nmt.errors import NmtError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config",
                        help="YAML config file, or a packaged config's name (e.g. gl-en-cpu); every option: base")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (repeatable), e.g. --set train.max_steps=1000")
    parser.add_argument("--resume", action="store_true", help="continue from train.save_dir/checkpoint_last.pt")
    parser.add_argument("--init-from", metavar="CKPT",
                        help="warm start (train.init_from): a new run with CKPT's weights; optimizer, schedule, step, "
                             "epoch and best score start fresh (fairseq's --restore-file with every --reset-*)")
    add_quiet(parser)
    add_json(parser, "the final summary (steps, epoch, best dev BLEU and its step, stop reason, seconds)")


def run(args: argparse.Namespace) -> int:
    from nmt.config import load_config
    from nmt.training.loop import train

    overrides = [*args.overrides, "train.progress=false"] if args.quiet else list(args.overrides)
    if args.init_from:
        overrides.append(f"train.init_from={args.init_from}")
    config = load_config(args.config, overrides)
    if args.init_from and args.resume and (Path(config.train.save_dir) / "checkpoint_last.pt").exists():
        raise NmtError(f"--init-from starts a new run but {config.train.save_dir} already holds one; drop --resume "
                       "and set another train.save_dir, or drop --init-from to continue that run")
    result = train(config, resume=args.resume)
    if args.json:
        print(json.dumps(result), flush=True)
    return 128 + int(result["signal"]) if result["signal"] else 0
