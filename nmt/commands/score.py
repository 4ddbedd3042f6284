"""Score translations with a checkpoint (force-decoding): one output line per --src/--tgt pair, in input order.

Each line is `SCORE<TAB>MEAN<TAB>TOKENS`: the sum of the natural-log probabilities the model gives the target's pieces
and EOS (no label smoothing, dropout off), its mean per token, and the token count (pieces + EOS); with --json one
JSON object a line, `{"line", "score", "mean", "tokens"}` (line is 1-based). Higher is more probable. Either input
may be `-` (stdin); the output is --output FILE (written to a temporary file renamed at the end) or stdout. Inputs
are read --buffer-size lines at a time, so memory stays bounded whatever their size. Text is Moses-tokenized and
cut into the checkpoint's pieces as `nmt translate` does (--pretokenized: already Moses-tokenized).
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from nmt.atomic import atomic_open
from nmt.commands import add_checkpoints, add_quiet, checkpoint_paths
from nmt.commands.translate import _check_writable
from nmt.config import DecodeConfig, TrainConfig, choices
from nmt.errors import NmtError
from nmt.inference.scoring import PairScore
from nmt.inference.translator import Translator
from nmt.stdio import input_lines, is_std, one_stdin

BUFFER_SIZE = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_checkpoints(parser)
    parser.add_argument("--src", required=True, help="source sentences, one per line; - is stdin")
    parser.add_argument("--tgt", required=True, help="their translations to score, one per line; - is stdin")
    parser.add_argument("--output", default="-", help="where to write the scores; - is stdout (default)")
    parser.add_argument("--json", action="store_true", help="one JSON object a line: line, score, mean, tokens")
    parser.add_argument("--pretokenized", action="store_true", help="both sides are Moses-tokenized already")
    parser.add_argument("--max-tokens", type=int, help="padded tokens per batch (default: the checkpoint's "
                                                       "train.max_tokens)")
    parser.add_argument("--batch-size", type=int, help="at most this many pairs per batch (default: no limit)")
    parser.add_argument("--buffer-size", type=int, default=BUFFER_SIZE,
                        help="pairs read and scored at a time; bounds memory (default: %(default)s)")
    parser.add_argument("--device", choices=choices(TrainConfig, "device"), default="auto")
    parser.add_argument("--precision", choices=choices(DecodeConfig, "precision"), default=None,
                        help="arithmetic (default: the checkpoint's decode.precision, fp32)")
    add_quiet(parser)


def pairs(src: str, tgt: str) -> Iterator[tuple[str, str]]:
    """The two inputs line by line; a different number of lines is a one-line error naming both."""
    sentinel = object()
    for number, (source, target) in enumerate(itertools.zip_longest(input_lines(src), input_lines(tgt),
                                                                      fillvalue=sentinel), start=1):
        if source is sentinel or target is sentinel:
            short, other = (src, tgt) if source is sentinel else (tgt, src)
            raise NmtError(f"{short} has {number - 1} lines but {other} has more")
        yield str(source), str(target)


def format_score(line: int, score: PairScore, as_json: bool) -> str:
    if as_json:
        return json.dumps({"line": line, "score": score.score, "mean": score.mean, "tokens": score.tokens})
    return f"{score.score:.4f}\t{score.mean:.4f}\t{score.tokens}"


def _write(translator: Translator, args: argparse.Namespace, sink: TextIO) -> int:
    stream = pairs(args.src, args.tgt)
    count = 0
    while buffer := list(itertools.islice(stream, args.buffer_size)):
        sources, targets = zip(*buffer, strict=True)
        scores = translator.score(list(sources), list(targets), args.pretokenized, args.max_tokens,
                                  args.batch_size, first_line=count + 1)
        sink.write("".join(format_score(count + i, s, args.json) + "\n" for i, s in enumerate(scores, start=1)))
        sink.flush()
        count += len(buffer)
    return count


def run(args: argparse.Namespace) -> int:
    one_stdin(src=args.src, tgt=args.tgt)
    if args.buffer_size < 1:
        raise NmtError(f"--buffer-size {args.buffer_size} must be at least 1")
    for name in (args.src, args.tgt):
        if not is_std(name) and not Path(name).is_file():
            raise NmtError(f"file not found: {name}" if not Path(name).exists() else f"{name} is not a file")
    output = None if is_std(args.output) else Path(args.output)
    if output is not None:
        _check_writable(output)
    translator = Translator.from_checkpoints(checkpoint_paths(args), args.device, args.precision)
    if output is None:
        _write(translator, args, sys.stdout)
        return 0
    try:
        with atomic_open(output) as handle:
            text = io.TextIOWrapper(handle, encoding="utf-8", newline="\n")
            count = _write(translator, args, text)
            text.detach()  # flushed by _write; atomic_open closes and renames the file
    except OSError as exc:
        raise NmtError(f"cannot write output {output}: {exc.strerror or exc}") from None
    print(f"scored {count} pairs into {output}", file=sys.stderr)
    return 0

