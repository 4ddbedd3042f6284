"""One module per CLI command: ``add_arguments(parser)`` and ``run(args) -> int``, no ML logic."""

from __future__ import annotations

import argparse


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: :func:`nmt.cli.main` sends the command's stderr (progress bars, log lines, notes) to
    /dev/null; errors are still printed, and files such as ``train.log`` are still written."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing on stderr but errors (no progress bars, log lines or notes)")


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json``: print ``what`` as one JSON object on stdout instead of text."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as one JSON object on stdout")
