"""One module per CLI command: ``add_arguments(parser)`` and ``run(args) -> int``, no ML logic."""

from __future__ import annotations

import argparse
import os

from nmt.errors import NmtError


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: :func:`nmt.cli.main` sends the command's stderr (progress bars, log lines, notes) to
    /dev/null; errors are still printed, and files such as ``train.log`` are still written."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing on stderr but errors (no progress bars, log lines or notes)")


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json``: print ``what`` as one JSON object on stdout instead of text."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as one JSON object on stdout")


def add_checkpoints(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint`` (alias fairseq's ``--path``), repeatable, each value possibly a ``:``-separated list: one
    checkpoint, or an ensemble of several."""
    parser.add_argument("--checkpoint", "--path", dest="checkpoint", action="append", required=True,
                        help="checkpoint written by `nmt train` or `nmt average`; repeat it (or give A:B, fairseq's "
                             "--path) for an ensemble that averages the models' probabilities at every step")


def checkpoint_paths(args: argparse.Namespace) -> list[str]:
    """Every checkpoint of ``--checkpoint``, in order (``A:B`` split on the path separator, as fairseq does)."""
    paths = [path for value in args.checkpoint for path in value.split(os.pathsep) if path]
    if not paths:
        raise NmtError("--checkpoint is empty")
    return paths
