"""Command-line entry point: ``nmt COMMAND ...``.

Each command lives in ``nmt/commands/<name>.py`` with ``add_arguments(parser)`` and ``run(args) -> int``; this file
only wires them up, turns :class:`~nmt.errors.NmtError` into one line ``error: ...`` with exit status 2, and applies
``--quiet`` (see :func:`nmt.commands.add_quiet`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence

from nmt import __version__
from nmt.errors import NmtError
from nmt.machine.allocator import reexec_with_allocator

COMMANDS: dict[str, str] = {
    "prepare": "download and prepare a corpus (TED talks pairs, IWSLT'15 en-vi, or local files)",
    "train": "train a model from a YAML config",
    "translate": "translate a file or stdin with a checkpoint",
    "serve": "serve a checkpoint over HTTP: a JSON API and a web page, batching concurrent requests",
    "score": "score translations with a checkpoint (force-decoding: log-probability of each target)",
    "evaluate": "score hypotheses against references (sacreBLEU, chrF, tokenized BLEU, bootstrap)",
    "average": "average the parameters of several checkpoints",
    "bench": "measure training and decoding speed on prepared data",
    "attention": "plot attention heatmaps for one sentence",
    "launch": "run train under torchrun (several processes or machines, restarts) with one-line errors",
}


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; only the ``selected`` command's module is imported (keeps start-up fast)."""
    parser = argparse.ArgumentParser(prog="nmt", description="Neural machine translation with pluggable normalization.")
    parser.add_argument("--version", action="version", version=f"nmt {__version__} (qknorm-nmt)")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        if name != selected:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(f"nmt.commands.{name}")
        command = sub.add_parser(name, help=help_text, description=module.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # run as the program: re-execute with TCMalloc preloaded where found (nmt/machine/allocator.py)
        try:
            reexec_with_allocator()
        except NmtError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(selected if selected in COMMANDS else None)
    if selected == "launch" and not {"-h", "--help"} & set(argv[:argv.index("launch") + 2]):
        # torchrun's options are not nmt's: everything after `launch` goes to it untouched
        at = argv.index("launch")
        module = importlib.import_module("nmt.commands.launch")
        args = argparse.Namespace(torchrun=argv[at + 1:], debug="--debug" in argv[:at], quiet=False, _run=module.run)
    else:
        args = parser.parse_args(argv)
    try:
        with _quiet(getattr(args, "quiet", False)):
            return int(args._run(args) or 0)
    except NmtError as exc:
        if args.debug:
            raise
        message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())  # always one line
        print(f"error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1
    except OSError as exc:  # the machine, not the input: a full disk, a lost permission, a vanished file
        if args.debug:
            raise
        where = exc.filename if exc.filename is not None else "a file"
        print(f"error: {where}: {exc.strerror or exc}; nothing partial was kept (files are written whole or not "
              "at all): fix the cause and rerun", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


@contextlib.contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    """``--quiet``: the command's stderr goes to /dev/null; errors are printed after it returns."""
    if not enabled:
        yield
        return
    with open(os.devnull, "w", encoding="utf-8") as devnull, contextlib.redirect_stderr(devnull):
        yield


if __name__ == "__main__":
    raise SystemExit(main())
