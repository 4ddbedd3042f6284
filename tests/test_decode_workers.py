"""Decoding several batches at once (``--workers``) in threads: the same results, in input order, each batch on one
thread. A translator that cannot rebuild its model elsewhere uses threads; one loaded from checkpoints uses
processes (tests/test_decode_processes.py)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import nmt.search.batches
from nmt.errors import NmtError
from nmt.inference.threads import intra_op_threads, map_ordered
from nmt.inference.translator import Translator
from tests.test_translate import synthetic_sentences, tiny_checkpoint


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    loaded = Translator.from_checkpoint(tiny_checkpoint(tmp_path_factory.mktemp("ckpt")), device="cpu")
    return Translator(loaded.model, loaded.config, loaded.tokenizer, loaded.device)  # no entries: threads


def test_workers_give_the_same_hypotheses_in_input_order(translator: Translator,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    assert translator.worker_processes(3) is None
    sources = translator.encode(synthetic_sentences(23, seed=7) + [""], pretokenized=True)
    with intra_op_threads(1):  # the arithmetic of one worker: one intra-op thread
        alone = translator.translate_ids(sources, beam=3, nbest=2, batch_size=2)
    seen: list[tuple[str, int]] = []
    decode = nmt.search.batches.decode

    def recording(*args: object, **kwargs: object) -> object:
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        time.sleep(0.01)  # let the other workers take batches
        return decode(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(nmt.search.batches, "decode", recording)
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
