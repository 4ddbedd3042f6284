"""``-`` as a file name: standard input for files that are read, standard output for files that are written.

Every command's file arguments go through here, so ``nmt translate --input - --output -`` and
``... | nmt evaluate --hyp - --ref test.en`` fit in shell pipes. Standard input is decoded as strict UTF-8 like files
are (:func:`nmt.data.text.iter_lines`): a bad byte is an error naming ``<stdin>`` and the line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from nmt.data.text import decode_lines, iter_lines
from nmt.errors import NmtError

STD = "-"


def is_std(name: str | Path | None) -> bool:
    """Whether a file argument means standard input/output."""
    return name is not None and str(name) == STD


def stdin_lines() -> Iterator[str]:
    """Lines of stdin without their line endings, read lazily; invalid UTF-8 is an error naming the line."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath (e.g. io.StringIO)
        for line in sys.stdin:
            yield line.rstrip("\r\n")
        return
    yield from decode_lines(stream, "<stdin>")


def input_lines(name: str | Path) -> Iterator[str]:
    """Lines of a UTF-8 file, or of stdin for ``-``, read lazily."""
    return stdin_lines() if is_std(name) else iter_lines(name)


def read_text(name: str | Path) -> str:
    """The whole text of a UTF-8 file, or of stdin for ``-``."""
    if is_std(name):
        return "".join(line + "\n" for line in stdin_lines())
    try:
        return Path(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NmtError(f"file not found: {name}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NmtError(f"cannot read {name}: {exc}") from None


def one_stdin(**arguments: str | None) -> None:
    """Refuse more than one argument reading stdin (``--hyp - --ref -``): stdin can be read only once."""
    named = [f"--{key.replace('_', '-')}" for key, value in arguments.items() if is_std(value)]
    if len(named) > 1:
        raise NmtError(f"{' and '.join(named)} are all '-'; only one input can come from stdin")
