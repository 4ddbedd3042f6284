"""A full disk, by fault injection: every atomic write draws on a budget of free bytes and fails with ENOSPC once
it is spent. ``prepare`` and ``translate --output`` then stop with one line naming the file (exit 2, no traceback),
leave nothing that passes for complete (no ``meta.json``; no partial output file), and succeed once space is freed.
Training's full disk is in tests/test_run_safety.py."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from nmt import cli
from tests.synthetic import write_corpus
from tests.test_translate import synthetic_sentences, tiny_checkpoint


class _Budget:
    def __init__(self, free: int) -> None:
        self.free = free


class _LimitedFile:
    """A binary file whose writes fail with ENOSPC once the shared budget is spent (what was written stays)."""

    def __init__(self, handle: Any, budget: _Budget) -> None:
        self._handle, self._budget = handle, budget

    def write(self, data: bytes) -> int:
        size = len(memoryview(data))
        if size > self._budget.free:
            self._handle.write(bytes(memoryview(data)[: self._budget.free]))
            self._budget.free = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget.free -= size
        return int(self._handle.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _LimitedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


@contextmanager
def disk_with(monkeypatch: pytest.MonkeyPatch, free: int) -> Iterator[None]:
    import nmt.atomic

    real = os.fdopen
    budget = _Budget(free)
    with monkeypatch.context() as patch:
        patch.setattr(nmt.atomic.os, "fdopen", lambda fd, *a, **k: _LimitedFile(real(fd, *a, **k), budget))
        yield


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_prepare_on_a_full_disk_names_the_file_and_is_never_taken_as_prepared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_corpus(tmp_path / "corpus", {"train": 300, "dev": 10, "test": 10})
    data = tmp_path / "data"
    argv = ["prepare", "xx-yy", "--data-dir", str(data), "--from-dir", str(corpus), "--bpe-size", "48",
            "--no-progress"]
    capsys.readouterr()
    with disk_with(monkeypatch, free=20_000):  # the SentencePiece model and some splits fit, the rest does not
        assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(data / "xx-yy") in line and "No space left on device" in line
    assert not (data / "xx-yy" / "meta.json").exists()
    assert not list((data / "xx-yy").rglob("*.tmp"))
    assert cli.main(argv) == 0  # space freed: the same command prepares it
    assert (data / "xx-yy" / "meta.json").is_file()


def test_translate_output_on_a_full_disk_is_one_line_and_no_partial_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = tiny_checkpoint(tmp_path)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(synthetic_sentences(40, seed=3)) + "\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--output", str(output),
            "--device", "cpu", "--pretokenized", "--buffer-size", "8", "--quiet"]
    capsys.readouterr()
    with disk_with(monkeypatch, free=100):
        assert cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(output) in line and "No space left on device" in line
    assert not output.exists() and not list(tmp_path.glob(".out.txt.*"))
    output.write_text("an earlier translation\n", encoding="utf-8")
    with disk_with(monkeypatch, free=100):
        assert cli.main(argv) == 2
    assert output.read_text(encoding="utf-8") == "an earlier translation\n"  # the old file is untouched
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert len(output.read_text(encoding="utf-8").splitlines()) == 40
