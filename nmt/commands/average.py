"""Average the model parameters of several checkpoints of the same model (e.g. the last few saved during training)
into one checkpoint that `nmt translate` can load. The optimizer and other training state are dropped."""

from __future__ import annotations

import argparse
import sys

from nmt.average import average_checkpoints
from nmt.checkpoint import checkpoint_bytes, save_checkpoint
from nmt.errors import NmtError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoints", nargs="+", metavar="CKPT", help="checkpoints to average")
    parser.add_argument("--output", required=True, help="where to write the averaged checkpoint; - is stdout")


def run(args: argparse.Namespace) -> int:
    payload = average_checkpoints(args.checkpoints)
    if args.output == "-":
        sys.stdout.buffer.write(checkpoint_bytes(payload))
        sys.stdout.buffer.flush()
        return 0
    try:
        save_checkpoint(args.output, payload)
    except OSError as exc:
        raise NmtError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"averaged {len(args.checkpoints)} checkpoints into {args.output}", file=sys.stderr)
    return 0
