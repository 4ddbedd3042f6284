"""Atomic file writes that honour the user's umask.

Data goes to a temporary file in the target's directory, is fsynced and then replaces the target with
:func:`os.replace`, so readers (and a crash, even ``kill -9``) see either the old file or the whole new one.
:func:`tempfile.mkstemp` creates its file ``-rw-------``; the file is given ``0o666 & ~umask`` before the rename, the
mode :func:`open` would have given it, so a team sharing a run directory can read its checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TMP_SUFFIX = ".tmp"


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (``/proc``), else set and restored."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The permission bits a new file gets from :func:`open`: ``0o666`` less the umask."""
    return 0o666 & ~current_umask()


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """Yield a binary handle whose content replaces ``path`` when the block ends without an exception.

    The temporary file is ``.NAME.XXXX.tmp`` beside ``path``; it is deleted if the block raises, and an OSError that
    names no file (a full disk) is raised again naming ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # e.g. ENOSPC from a write, which names no file: name the target
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""
    with atomic_open(path) as handle:
        handle.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` so readers see either the old file or the whole new one."""
    atomic_write_bytes(path, text.encode("utf-8"))
