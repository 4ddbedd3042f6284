"""Strict text reading and parallel-corpus cleaning.

Every corpus file is read as UTF-8 one line at a time; a byte sequence that is not UTF-8 is an
:class:`~nmt.errors.NmtError` naming the file and the 1-based line number, never a silent replacement. CRLF line
endings are accepted, and so is a UTF-8 byte-order mark before the first line (removed). Lines are normalised by
:func:`normalize_line` (outer whitespace stripped, inner runs of whitespace collapsed to one space), which is also
what makes SentencePiece round trips exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nmt.atomic import atomic_write_text
from nmt.errors import NmtError


def normalize_line(line: str) -> str:
    """Strip the line and collapse any run of whitespace (tabs, CR, NBSP, ...) to one ASCII space."""
    return " ".join(line.split())


def iter_lines(path: str | Path) -> Iterator[str]:
    """Yield the lines of a UTF-8 file without their line ending (``\\n`` or ``\\r\\n``).

    Raises:
        NmtError: the file is missing or unreadable, or a line is not valid UTF-8 (naming file and line number).
    """
    path = Path(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed in the finally below, also when the generator is dropped
    except FileNotFoundError:
        raise NmtError(f"file not found: {path}") from None
    except OSError as exc:
        raise NmtError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        yield from decode_lines(handle, str(path))
    finally:
        handle.close()


MAX_LINE_BYTES = 4 * 2**20  # a longer line is an error (no sentence is 4 MiB; a 1 GB "line" must not be read whole)


def _byte_lines(stream: Iterable[bytes], name: str) -> Iterator[bytes]:
    """The lines of ``stream``, each read with at most :data:`MAX_LINE_BYTES` + 1 bytes in memory."""
    readline = getattr(stream, "readline", None)
    if readline is None:
        yield from stream
        return
    number = 0
    while raw := readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise NmtError(f"{name} line {number}: longer than {MAX_LINE_BYTES // 2**20} MiB (is this a text file "
                           "with one sentence per line?)")
        yield raw


def decode_lines(stream: Iterable[bytes], name: str) -> Iterator[str]:
    """Decode the byte lines of ``stream`` (a file or stdin) as strict UTF-8, without their line endings and without
    a leading byte-order mark; an invalid byte, or a line over :data:`MAX_LINE_BYTES`, is an :class:`NmtError`
    naming ``name`` and the 1-based line."""
    for number, raw in enumerate(_byte_lines(stream, name), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NmtError(f"{name} line {number}: invalid UTF-8 at byte {exc.start} ({exc.reason})") from None
        if number == 1 and line.startswith("\ufeff"):  # a BOM is an encoding mark, not text
            line = line[1:]
        if line.endswith("\n"):
            line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
        yield line


def read_lines(path: str | Path) -> list[str]:
    """All normalised lines of a UTF-8 file (see :func:`iter_lines`, :func:`normalize_line`)."""
    return [normalize_line(line) for line in iter_lines(path)]


@dataclass
class ParallelText:
    """Aligned source and target sentences of one split, plus how many pairs were dropped and why."""

    src: list[str]
    tgt: list[str]
    dropped: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.src)


def clean_pairs(src: list[str], tgt: list[str], dropped: Counter[str] | None = None) -> ParallelText:
    """Normalise both sides; drop pairs where either side is empty (reason ``empty``) or holds a NUL byte
    (``nul_byte``: binary garbage, and a character SentencePiece and the csv module refuse)."""
    dropped = Counter() if dropped is None else dropped
    out = ParallelText([], [], dropped)
    for s, t in zip(src, tgt, strict=True):
        if "\x00" in s or "\x00" in t:
            dropped["nul_byte"] += 1
            continue
        s, t = normalize_line(s), normalize_line(t)
        if not s or not t:
            dropped["empty"] += 1
            continue
        out.src.append(s)
        out.tgt.append(t)
    return out


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> ParallelText:
    """Read a sentence-aligned pair of files, normalised, with empty pairs dropped.

    Raises:
        NmtError: a file is missing or not UTF-8, the two files have different line counts, or no pair is left.
    """
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise NmtError(f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}")
    text = clean_pairs(src, tgt)
    if not text.src:
        raise NmtError(f"no sentence pairs in {src_path} and {tgt_path} ({text.dropped['empty']} empty pairs dropped)")
    return text


def write_lines_atomic(path: str | Path, lines: list[str]) -> None:
    """Write lines (LF endings, final newline) atomically (:mod:`nmt.atomic`)."""
    atomic_write_text(path, "".join(line + "\n" for line in lines))
