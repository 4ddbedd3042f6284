"""The CLI in pipes and teams: ``-`` for stdin/stdout, ``--version``, ``--quiet``, ``--json``, ``--path``,
``--device mps``, files created with the user's umask, and streaming translation in bounded memory."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import nmt
from nmt import cli
from nmt.atomic import atomic_write_bytes, current_umask
from nmt.checkpoint.files import load_checkpoint, save_checkpoint
from nmt.config import load_config
from nmt.errors import NmtError
from nmt.inference.translator import Translator
from nmt.machine.runtime import resolve_device
from nmt.search.batches import decode_batches
from nmt.training.run_log import RunLog
from tests.synthetic import write_corpus
from tests.test_translate import FakeStdin, synthetic_sentences, tiny_checkpoint

LINES = ["the cat sat .", "", "a dog ran under the tree .", "red", "big small mat ,", "the tree"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("pipes"))


@pytest.fixture(scope="module")
def translator(checkpoint: Path) -> Translator:
    return Translator.from_checkpoint(checkpoint, device="cpu")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"nmt {nmt.__version__} (qknorm-nmt)\n"


def test_translate_dash_is_stdin_and_stdout_and_path_is_checkpoint(
        checkpoint: Path, translator: Translator, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin("\n".join(LINES).encode() + b"\n"))
    assert cli.main(["translate", "--path", str(checkpoint), "--input", "-", "--output", "-", "--device", "cpu",
                     "--buffer-size", "2", "--batch-size", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [n[0][0] for n in translator.translate(LINES)]


def test_evaluate_reads_hypotheses_from_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    hyp, ref = tmp_path / "hyp.en", tmp_path / "ref.en"
    hyp.write_text("the cat sat on the mat .\na dog ran .\n", encoding="utf-8")
    ref.write_text("the cat sat on a mat .\nthe dog ran .\n", encoding="utf-8")
    assert cli.main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    monkeypatch.setattr("sys.stdin", FakeStdin(hyp.read_bytes()))
    assert cli.main(["evaluate", "--hyp", "-", "--ref", str(ref), "--json"]) == 0
    from_stdin = json.loads(capsys.readouterr().out)
    assert from_stdin["bleu"] == from_file["bleu"] and from_stdin["hyp"] == "-" and 0 < from_stdin["bleu"] < 100
    assert cli.main(["evaluate", "--hyp", "-", "--ref", "-"]) == 2
    assert capsys.readouterr().err == "error: --hyp and --ref are all '-'; only one input can come from stdin\n"


def test_config_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b"data:\n  pair: ab-cd\nmodel:\n  d_model: 64\n"))
    cfg = load_config("-", ["model.n_heads=4"])
    assert cfg.data.pair == "ab-cd" and cfg.model.d_model == 64 and cfg.model.n_heads == 4
    monkeypatch.setattr("sys.stdin", FakeStdin(b"model:\n  colour: red\n"))
    with pytest.raises(NmtError, match=r"^<stdin>: unknown config key 'model.colour'"):
        load_config("-")


def test_average_writes_to_stdout(checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert cli.main(["average", str(checkpoint), str(checkpoint), "--output", "-"]) == 0
    written = tmp_path / "avg.pt"
    written.write_bytes(capsysbinary.readouterr().out)
    averaged, original = load_checkpoint(written)["model"], load_checkpoint(checkpoint)["model"]
    assert all(torch.equal(averaged[k], original[k]) for k in original)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_files_get_the_users_umask(umask: int, checkpoint: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """mkstemp alone would leave checkpoints and translations -rw------- whatever the umask."""
    old = os.umask(umask)
    try:
        assert current_umask() == umask
        save_checkpoint(tmp_path / "c.pt", load_checkpoint(checkpoint))
        atomic_write_bytes(tmp_path / "x.bin", b"x")
        source = tmp_path / "in.txt"
        source.write_text("the cat .\n", encoding="utf-8")
        assert cli.main(["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--output",
                         str(tmp_path / "out.txt"), "--device", "cpu", "--quiet"]) == 0
    finally:
        os.umask(old)
    for name in ("c.pt", "x.bin", "out.txt", "in.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


class CountingLines:
    """An input of many lines that records how many were read."""

    def __init__(self, lines: list[str]) -> None:
        self.lines, self.consumed = lines, 0

    def __iter__(self) -> Iterator[str]:
        for line in self.lines:
            self.consumed += 1
            yield line


def test_translate_stream_reads_one_buffer_at_a_time(translator: Translator) -> None:
    lines = synthetic_sentences(23, seed=3) + ["", "the cat ."]
    expected = translator.translate(lines)
    for buffer_size, batch_size in [(1, None), (4, 2), (7, 1), (100, None)]:
        source = CountingLines(lines)
        stream = translator.translate_stream(source, buffer_size, batch_size=batch_size)
        first = next(stream)
        assert source.consumed == min(buffer_size, len(lines))  # nothing past the first buffer was read
        got = [first, *stream]  # input order, whatever the buffer and batch sizes (scores up to batch-shape rounding)
        assert [[text for text, _ in n] for n in got] == [[text for text, _ in n] for n in expected]
        assert [s for n in got for _, s in n] == pytest.approx([s for n in expected for _, s in n], abs=1e-4)
    with pytest.raises(NmtError, match="--buffer-size 0"):
        next(translator.translate_stream(lines, 0))


def test_decode_batches_respects_batch_size() -> None:
    lengths = [5, 3, 9, 1, 4, 4, 7, 2, 8, 6]
    for max_sentences in (1, 2, 3):
        batches = decode_batches(lengths, max_tokens=10_000, max_sentences=max_sentences)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert max(len(b) for b in batches) == max_sentences


class _Stdin:
    def __init__(self, source: CountingLines) -> None:
        self.buffer = (line.encode() + b"\n" for line in source)

    def isatty(self) -> bool:
        return False


class _Stdout:
    """A binary stdout that records, at each flush, how many input lines had been read."""

    def __init__(self, source: CountingLines) -> None:
        self.source, self.data, self.flushes = source, bytearray(), []

    @property
    def buffer(self) -> _Stdout:
        return self

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def flush(self) -> None:
        self.flushes.append((self.source.consumed, self.data.count(b"\n")))


def test_cli_streams_and_flushes_each_buffer(checkpoint: Path, translator: Translator,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    lines = synthetic_sentences(10, seed=5)
    source = CountingLines(lines)
    out = _Stdout(source)
    monkeypatch.setattr(sys, "stdin", _Stdin(source))
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["translate", "--checkpoint", str(checkpoint), "--device", "cpu", "--buffer-size", "4"]) == 0
    assert out.data.decode().splitlines() == [n[0][0] for n in translator.translate(lines)]
    # after buffer k (4 lines each) was written, at most the lines of buffer k had been read
    assert out.flushes[:3] == [(4, 4), (8, 8), (10, 10)]


def test_quiet_silences_stderr_but_not_errors(checkpoint: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.txt"
    source.write_text("the cat .\na dog .\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--output", str(tmp_path / "o")]
    assert cli.main(argv) == 0
    assert "translated 2 lines" in capsys.readouterr().err
    assert cli.main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main([*argv, "--quiet", "--beam", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --beam 0")


def test_prepare_json_and_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_corpus(tmp_path / "corpus", {"train": 200, "dev": 10, "test": 10})
    assert cli.main(["prepare", "xx-yy", "--from-dir", str(corpus), "--data-dir", str(tmp_path / "data"),
                     "--bpe-size", "40", "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    meta = json.loads(captured.out)
    assert captured.err == ""
    assert meta == json.loads((tmp_path / "data" / "xx-yy" / "meta.json").read_text(encoding="utf-8"))
    assert meta["splits"]["train"]["lines"] == 200


def test_mps_device(monkeypatch: pytest.MonkeyPatch, checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not torch.backends.mps.is_available():
        monkeypatch.setattr("sys.stdin", FakeStdin(b"a cat\n"))
        assert cli.main(["translate", "--checkpoint", str(checkpoint), "--device", "mps"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: device 'mps' requested") and err.count("\n") == 1
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("mps") == torch.device("mps")


def test_training_runs_without_tensorboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import raises ImportError
    log = RunLog(tmp_path, True, 10, 0, False, True)
    log.scalars(1, {"loss": 1.0}, "train")
    log.close()
    assert log.writer is None and not (tmp_path / "tensorboard").exists()
    assert "tensorboard is not installed" in (tmp_path / "train.log").read_text(encoding="utf-8")


def test_stdin_helpers_reject_bad_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    from nmt.stdio import input_lines

    monkeypatch.setattr("sys.stdin", FakeStdin(b"ok\n\xff\n"))
    with pytest.raises(NmtError, match="<stdin> line 2"):
        list(input_lines("-"))
    monkeypatch.setattr("sys.stdin", io.StringIO("a\nb\n"))
    assert list(input_lines("-")) == ["a", "b"]


def test_attention_png_to_stdout(checkpoint: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    pytest.importorskip("matplotlib")
    assert cli.main(["attention", "--checkpoint", str(checkpoint), "--src", "the cat sat .", "--output", "-",
                     "--device", "cpu", "--pretokenized"]) == 0
    captured = capsysbinary.readouterr()
    assert captured.out[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"translation:" in captured.err  # the text moves to stderr, out of the image's way


def test_attention_json(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "a.png"
    assert cli.main(["attention", "--checkpoint", str(checkpoint), "--src", "the cat sat .", "--output", str(out),
                     "--device", "cpu", "--pretokenized", "--kind", "encoder", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (panel,) = result["panels"]
    assert result["output"] == str(out) and out.is_file()
    assert len(panel["weights"]) == len(panel["queries"]) == len(panel["keys"])  # encoder: source x source
    assert all(abs(sum(row) - 1.0) < 1e-4 for row in panel["weights"])  # each query's weights are a distribution
