"""Decoding several batches at once (``--workers``): the same results, in input order, each batch on one thread."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

import nmt.translate
from nmt.decode_workers import intra_op_threads, map_ordered
from nmt.errors import NmtError
from nmt.translate import Translator
from tests.test_translate import FakeStdin, run_cli, synthetic_sentences, tiny_checkpoint


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    return Translator.from_checkpoint(tiny_checkpoint(tmp_path_factory.mktemp("ckpt")), device="cpu")


def test_workers_give_the_same_hypotheses_in_input_order(translator: Translator,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    sources = translator.encode(synthetic_sentences(23, seed=7) + [""], pretokenized=True)
    with intra_op_threads(1):  # the arithmetic of one worker: one intra-op thread
        alone = translator.translate_ids(sources, beam=3, nbest=2, batch_size=2)
    seen: list[tuple[str, int]] = []
    decode = nmt.translate.decode

    def recording(*args: object, **kwargs: object) -> object:
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        time.sleep(0.01)  # let the other workers take batches
        return decode(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(nmt.translate, "decode", recording)
    with intra_op_threads(2):  # the tests run on one thread: give the process two, which the workers set aside
        parallel = translator.translate_ids(sources, beam=3, nbest=2, batch_size=2, workers=3)
        assert torch.get_num_threads() == 2  # restored
    assert len(seen) == 12 and {n for _, n in seen} == {1}  # 23 sentences in batches of 2, one thread each
    assert len({name for name, _ in seen}) == 3 and all(name.startswith("nmt-decode") for name, _ in seen)
    assert [[h.tokens for h in n] for n in parallel] == [[h.tokens for h in n] for n in alone]
    assert [[h.score for h in n] for n in parallel] == [[h.score for h in n] for n in alone]  # bitwise
    assert parallel[-1][0].tokens == [] and len(parallel) == len(sources)


def test_map_ordered_keeps_order_and_raises_the_first_error() -> None:
    def slow_first(x: int) -> int:
        time.sleep(0.05 if x == 0 else 0.0)
        if x == 5:
            raise ValueError("five")
        return x * x

    assert list(map_ordered(slow_first, [0, 1, 2, 3], 3)) == [(0, 0), (1, 1), (2, 4), (3, 9)]
    with intra_op_threads(2):
        with pytest.raises(ValueError, match="five"):
            list(map_ordered(slow_first, list(range(8)), 2))
        assert torch.get_num_threads() == 2  # restored after the error too
    with pytest.raises(NmtError, match="--workers 0 must be at least 1"):
        list(map_ordered(slow_first, [1], 0))


def test_cli_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = tiny_checkpoint(tmp_path)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(synthetic_sentences(9, seed=3)) + "\n", encoding="utf-8")
    outputs = []
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}.txt"
        args = ["translate", "--checkpoint", str(checkpoint), "--device", "cpu", "--input", str(source),
                "--output", str(out), "--batch-size", "2", "--workers", workers, "--quiet"]
        with intra_op_threads(1):
            assert run_cli(args, monkeypatch) == 0
        outputs.append(out.read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == 9
    monkeypatch.setattr("sys.stdin", FakeStdin(b"a cat\n"))
    assert run_cli(["translate", "--checkpoint", str(tmp_path / "missing.pt"), "--workers", "0"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --workers 0 must be at least 1") and err.count("\n") == 1
