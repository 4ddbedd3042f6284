"""Translate raw text with a checkpoint: one output line per input line, in order (empty lines stay empty).

Input is --input FILE or stdin; output is --output FILE (written to a temporary file and renamed at the end, so a
crash never leaves a partial file) or stdout. From an interactive terminal each line is translated as soon as it is
entered. Decoding settings default to the checkpoint's `decode` section. With --nbest K > 1, each input gives K
lines `INDEX<TAB>SCORE<TAB>TEXT` (INDEX = 0-based input line, SCORE = length-penalised log-probability), best first.
With --input, or interactively, stderr first says the decoding precision and why (e.g. ``precision fp32 (set by
decode.precision)``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from nmt.checkpoint import atomic_write_bytes
from nmt.data.text import iter_lines
from nmt.errors import NmtError
from nmt.translate import Translator


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint written by `nmt train` or `nmt average`")
    parser.add_argument("--input", help="UTF-8 text, one sentence per line (default: stdin)")
    parser.add_argument("--output", help="where to write translations (default: stdout)")
    parser.add_argument("--beam", type=int, help="beam size (default: the checkpoint's decode.beam)")
    parser.add_argument("--lenpen", type=float, help="GNMT length penalty alpha (default: decode.lenpen)")
    parser.add_argument("--nbest", type=int, help="translations per input; K > 1 prints INDEX\\tSCORE\\tTEXT lines")
    parser.add_argument("--pretokenized", action="store_true",
                        help="input is Moses-tokenized already: skip Moses tokenization and detokenization")
    parser.add_argument("--max-tokens", type=int, help="padded source tokens per batch (default: decode.max_tokens)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16", "int8"], default=None,
                        help="decoding arithmetic (default: decode.precision, fp32); bf16 is ~1.3x faster on CPUs "
                             "with native bf16 (AVX-512 BF16, AMX) and much slower elsewhere, fp16 needs CUDA, int8 "
                             "(CPU) quantizes the Linear layers, auto is bf16 on GPUs and on a CPU the fastest of "
                             "fp32, native bf16 and int8 by a short probe")


def _stdin_lines() -> Iterator[str]:
    """Lines of stdin as text; invalid UTF-8 is an error naming the line."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath (e.g. io.StringIO)
        for line in sys.stdin:
            yield line.rstrip("\r\n")
        return
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NmtError(f"<stdin> line {number}: invalid UTF-8 at byte {exc.start} ({exc.reason})") from None
        yield line.rstrip("\r\n")


def _check_writable(path: Path) -> None:
    """Fail before decoding if ``path`` cannot be created or replaced."""
    if path.is_dir():
        raise NmtError(f"output {path} is a directory")
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise NmtError(f"cannot write output {path}: {parent} is not a writable directory")


def _format(index: int, nbest: list[tuple[str, float]], with_scores: bool) -> Iterable[str]:
    if not with_scores:
        return [nbest[0][0]]
    return [f"{index}\t{score:.4f}\t{text}" for text, score in nbest]


def _stream(translator: Translator, args: argparse.Namespace) -> None:
    """Interactive use: translate and print each line as soon as it arrives."""
    for index, line in enumerate(_stdin_lines()):
        (nbest,) = translator.translate([line], args.beam, args.lenpen, args.nbest, args.max_tokens, args.pretokenized,
                                        first_line=index + 1)
        for out in _format(index, nbest, len(nbest) > 1):
            print(out, flush=True)


def run(args: argparse.Namespace) -> int:
    output = Path(args.output) if args.output else None
    if output is not None:
        _check_writable(output)
    interactive = args.input is None and output is None and sys.stdin.isatty()
    lines = [] if interactive else list(iter_lines(args.input) if args.input else _stdin_lines())
    translator = Translator.from_checkpoint(args.checkpoint, args.device, args.precision)
    if interactive or args.input is not None:  # not when filtering stdin to stdout
        print(f"precision {translator.runtime.describe_precision()}", file=sys.stderr)
    if interactive:
        _stream(translator, args)
        return 0
    results = translator.translate(lines, args.beam, args.lenpen, args.nbest, args.max_tokens, args.pretokenized,
                                   progress=args.input is not None)
    with_scores = (args.nbest or translator.config.decode.nbest) > 1
    text = "".join(out + "\n" for i, nbest in enumerate(results) for out in _format(i, nbest, with_scores))
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    try:
        atomic_write_bytes(output, text.encode("utf-8"))
    except OSError as exc:
        raise NmtError(f"cannot write output {output}: {exc.strerror or exc}") from None
    print(f"translated {len(lines)} lines into {output}", file=sys.stderr)
    return 0
