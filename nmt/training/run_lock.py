"""One trainer per run directory: ``train.save_dir/.lock``, held with ``flock`` while ``nmt train`` runs.

A second ``nmt train`` (with or without ``--resume``) on a directory whose lock is held is refused in one line naming
the holder's pid, and the live run is untouched. The kernel releases an ``flock`` when its process dies, however it
dies (``kill -9`` included), so a lock left by a killed run never blocks a resume: the file stays, the lock does not.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from nmt.errors import NmtError

LOCK_NAME = ".lock"


class RunLock:
    """The lock of ``directory`` (created if missing); :meth:`acquire` or a one-line error, :meth:`release`."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        self.handle: IO[str] | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise NmtError(f"{self.path.parent} is in use by another nmt train (pid {holder}); wait for it to end "
                           "or set another train.save_dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self.handle = handle
        return self

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None
