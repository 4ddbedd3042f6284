"""Average the model parameters of several checkpoints of the same model (e.g. the last few saved during training)
into one checkpoint that `nmt translate` can load. The optimizer and other training state are dropped.

With --num-update-checkpoints N (fairseq's flag), the one argument is a run's directory and the N newest
checkpoint_<step>.pt files that train.save_every kept there are averaged; --checkpoint-upper-bound STEP takes the N
newest at or before STEP instead."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nmt.checkpoint.average import average_checkpoints, last_checkpoints
from nmt.checkpoint.files import checkpoint_bytes, save_checkpoint
from nmt.errors import NmtError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoints", nargs="+", metavar="CKPT",
                        help="checkpoints to average, or with --num-update-checkpoints one run directory")
    parser.add_argument("--output", required=True, help="where to write the averaged checkpoint; - is stdout")
    parser.add_argument("--num-update-checkpoints", type=int, default=None, metavar="N",
                        help="average the N newest checkpoint_<step>.pt of the directory given")
    parser.add_argument("--checkpoint-upper-bound", type=int, default=None, metavar="STEP",
                        help="with --num-update-checkpoints: only checkpoints at or before STEP")


def selected(args: argparse.Namespace) -> list[str]:
    """The checkpoint paths to average: as given, or the newest N of one directory."""
    if args.num_update_checkpoints is None:
        if args.checkpoint_upper_bound is not None:
            raise NmtError("--checkpoint-upper-bound needs --num-update-checkpoints")
        return list(args.checkpoints)
    if len(args.checkpoints) != 1:
        raise NmtError(f"--num-update-checkpoints takes one run directory, got {len(args.checkpoints)} paths")
    paths = last_checkpoints(args.checkpoints[0], args.num_update_checkpoints, args.checkpoint_upper_bound)
    return [str(path) for path in paths]


def run(args: argparse.Namespace) -> int:
    args.checkpoints = selected(args)
    payload = average_checkpoints(args.checkpoints)
    if args.output == "-":
        sys.stdout.buffer.write(checkpoint_bytes(payload))
        sys.stdout.buffer.flush()
        return 0
    try:
        save_checkpoint(args.output, payload)
    except OSError as exc:
        raise NmtError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    names = ", ".join(Path(path).name for path in args.checkpoints)
    print(f"averaged {len(args.checkpoints)} checkpoints ({names}) into {args.output}", file=sys.stderr)
    return 0
