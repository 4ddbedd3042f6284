"""Translate raw text with a checkpoint: one output line per input line, in order (empty lines stay empty).

Input is --input FILE or stdin (``-``, the default); output is --output FILE or stdout (``-``, the default). The input
is read lazily, --buffer-size lines at a time: each buffer is translated in batches (--max-tokens padded source
tokens, at most --batch-size sentences) and written in input order and flushed before the next buffer is read, so a
multi-GB input translates in bounded memory and a pipe sees output as it goes. An --output FILE is written to a
temporary file renamed at the end, so a crash never leaves a partial file. From an interactive terminal each line
is translated as soon as it is entered. Decoding settings default to the checkpoint's `decode` section. With
--nbest K > 1, each input gives K lines `INDEX<TAB>SCORE<TAB>TEXT` (INDEX = 0-based input line, SCORE =
length-penalised log-probability), best first. --sampling draws each token instead of searching (top-k, top-p,
temperature, seed as in fairseq; --nbest K gives K samples per input; reproducible for a seed whatever the batching).
With --input, or interactively, stderr first says the decoding precision and why (e.g. ``precision fp32 (set by
decode.precision)``); --quiet silences it.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from nmt.atomic import atomic_open
from nmt.commands import add_checkpoints, add_quiet, checkpoint_paths
from nmt.config import DecodeConfig, TrainConfig, choices
from nmt.errors import NmtError
from nmt.inference.request import DecodeRequest, call_settings
from nmt.inference.translator import Translator
from nmt.search import Sampling
from nmt.stdio import input_lines, is_std

BUFFER_SIZE = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_checkpoints(parser)
    parser.add_argument("--input", default="-", help="UTF-8 text, one sentence per line; - is stdin (default)")
    parser.add_argument("--output", default="-", help="where to write translations; - is stdout (default)")
    parser.add_argument("--beam", type=int, help="beam size (default: the checkpoint's decode.beam)")
    parser.add_argument("--lenpen", type=float, help="GNMT length penalty alpha (default: decode.lenpen)")
    parser.add_argument("--search", choices=choices(DecodeConfig, "search"),
                        help="beam-search rules (default: decode.search); official: the papers' decoder")
    parser.add_argument("--length-norm", choices=choices(DecodeConfig, "length_norm"),
                        help="with --search fairseq: fairseq's score / length^lenpen instead of the GNMT penalty")
    parser.add_argument("--nbest", type=int, help="translations per input; K > 1 prints INDEX\\tSCORE\\tTEXT lines")
    parser.add_argument("--pretokenized", action="store_true",
                        help="input is Moses-tokenized already: skip Moses tokenization and detokenization")
    parser.add_argument("--max-tokens", type=int, help="padded source tokens per batch (default: decode.max_tokens)")
    parser.add_argument("--batch-size", type=int, help="at most this many sentences per batch (default: no limit)")
    parser.add_argument("--workers", type=int, default=1,
                        help="batches decoded at a time, each on one core (CTranslate2's inter_threads): on a CPU "
                             "in that many processes, each with a copy of the model; as many as cores keeps them "
                             "busy (default: %(default)s)")
    parser.add_argument("--buffer-size", type=int, default=BUFFER_SIZE,
                        help="input lines read and translated at a time; bounds memory (default: %(default)s)")
    parser.add_argument("--sampling", action="store_true",
                        help="draw each token from the model's distribution instead of searching (fairseq's flag); "
                             "--nbest K gives K samples per input")
    parser.add_argument("--sampling-topk", type=int, default=0,
                        help="with --sampling: draw among the K most probable tokens (default: 0, all)")
    parser.add_argument("--sampling-topp", type=float, default=1.0,
                        help="with --sampling: draw among the smallest set of tokens with probability P (nucleus)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="with --sampling: divide the log-probabilities by T (<1 sharper, >1 flatter)")
    parser.add_argument("--seed", type=int, default=0,
                        help="with --sampling: the samples' seed; the same seed gives the same samples whatever "
                             "the batching")
    parser.add_argument("--device", choices=choices(TrainConfig, "device"), default="auto")
    parser.add_argument("--precision", choices=choices(DecodeConfig, "precision"), default=None,
                        help="decoding arithmetic (default: decode.precision, fp32); bf16 is ~1.3x faster on CPUs "
                             "with native bf16 (AVX-512 BF16, AMX) and much slower elsewhere, fp16 needs CUDA, int8 "
                             "(CPU) quantizes the Linear layers, auto is bf16 on GPUs and on a CPU the fastest of "
                             "fp32, native bf16 and int8 by a short probe")
    add_quiet(parser)


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


def _write(results: Iterator[list[tuple[str, float]]], sink: BinaryIO | TextIO, with_scores: bool,
           buffer_size: int) -> int:
    """Write translations as they come (UTF-8), flushing after each buffer, so after every line when
    ``buffer_size`` is 1. Returns the number of input lines."""
    binary = not isinstance(sink, io.TextIOBase)
    count = 0
    for count, nbest in enumerate(results, start=1):
        text = "".join(out + "\n" for out in _format(count - 1, nbest, with_scores))
        sink.write(text.encode("utf-8") if binary else text)  # type: ignore[arg-type]
        if count % buffer_size == 0:
            sink.flush()
    sink.flush()
    return count


def sampling_of(args: argparse.Namespace) -> Sampling | None:
    """The --sampling settings, or None; a sampling option without --sampling is an error."""
    if not args.sampling:
        given = [flag for flag, value, default in (("--sampling-topk", args.sampling_topk, 0),
                                                   ("--sampling-topp", args.sampling_topp, 1.0),
                                                   ("--temperature", args.temperature, 1.0)) if value != default]
        if given:
            raise NmtError(f"{', '.join(given)} needs --sampling")
        return None
    try:
        return Sampling(args.sampling_topk, args.sampling_topp, args.temperature, args.seed)
    except ValueError as exc:
        raise NmtError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    request = DecodeRequest(args.pretokenized, args.batch_size, args.workers, sampling_of(args),
                            progress=not is_std(args.input) and not args.quiet)  # checked before the model loads
    output = None if is_std(args.output) else Path(args.output)
    if output is not None:
        _check_writable(output)
    interactive = is_std(args.input) and output is None and sys.stdin.isatty()
    buffer_size = 1 if interactive else args.buffer_size
    if buffer_size < 1:
        raise NmtError(f"--buffer-size {buffer_size} must be at least 1")
    lines = input_lines(args.input)
    # the first buffer is read before the model loads: a missing or undecodable input fails at once
    first = [] if interactive else list(itertools.islice(lines, buffer_size))
    translator = Translator.from_checkpoints(checkpoint_paths(args), args.device, args.precision)
    settings = call_settings(translator.config.decode, args.beam, args.lenpen, args.nbest, args.max_tokens, args.search,
                             args.length_norm)
    if (interactive or not is_std(args.input)) and not args.quiet:  # not when filtering stdin to stdout
        print(f"precision {translator.runtime.describe_precision()}", file=sys.stderr)
    lines = itertools.chain(first, lines)
    with translator:  # stops the decoding processes of --workers
        return _translate(translator, lines, output, buffer_size, settings, request)


def _translate(translator: Translator, lines: Iterator[str], output: Path | None, buffer_size: int,
               settings: DecodeConfig, request: DecodeRequest) -> int:
    with_scores = settings.nbest > 1
    results = translator.translate_stream(lines, buffer_size, settings=settings, request=request)
    if output is None:
        _write(results, getattr(sys.stdout, "buffer", sys.stdout), with_scores, buffer_size)
        return 0
    try:
        with atomic_open(output) as sink:
            count = _write(results, sink, with_scores, buffer_size)
    except OSError as exc:
        raise NmtError(f"cannot write output {output}: {exc.strerror or exc}") from None
    print(f"translated {count} lines into {output}", file=sys.stderr)
    return 0
