"""Token-budget batching: budget respected, every sentence once, reproducible, well bucketed."""

from __future__ import annotations

import numpy as np

from nmt.data.batching import ParallelData, collate, make_batches
from nmt.vocab import BOS, EOS, PAD


def _lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(2, 60, n), rng.integers(2, 60, n)


def test_batches_cover_each_sentence_once_within_budget() -> None:
    src, tgt = _lengths(500)
    batches = make_batches(src, tgt, max_tokens=400, seed=1, epoch=1)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(500))
    for b in batches:
        assert len(b) == 1 or len(b) * max(src[b].max(), tgt[b].max()) <= 400


def test_batches_are_reproducible_and_change_with_epoch() -> None:
    src, tgt = _lengths(300)
    a = make_batches(src, tgt, 500, seed=3, epoch=2)
    b = make_batches(src, tgt, 500, seed=3, epoch=2)
    c = make_batches(src, tgt, 500, seed=3, epoch=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=False))


def _fill(batches: list[np.ndarray], lengths: np.ndarray) -> float:
    return sum(int(lengths[b].sum()) for b in batches) / sum(len(b) * int(lengths[b].max()) for b in batches)


def test_bucketing_keeps_padding_small_on_both_sides() -> None:
    # translation-like lengths: the target is the source's length times a ratio near one, plus noise
    rng = np.random.default_rng(0)
    src = np.clip(rng.lognormal(3.0, 0.6, 3000).astype(np.int64), 1, 150)
    tgt = np.clip((src * rng.uniform(0.7, 1.4, 3000)).astype(np.int64) + rng.integers(0, 3, 3000), 1, 150)
    batches = make_batches(src, tgt, 2000, seed=0, epoch=1)
    assert _fill(batches, src) > 0.8 and _fill(batches, tgt) > 0.9
    sentences_per_batch = 3000 / len(batches)
    # what sorting by one side alone gives: the other side is padded far more, and fewer sentences fit the budget
    order = np.lexsort((src, tgt))
    one_side = [order[i:i + int(sentences_per_batch)] for i in range(0, 3000, int(sentences_per_batch))]
    assert _fill(one_side, src) < _fill(batches, src) - 0.1


def test_oversized_sentence_gets_its_own_batch() -> None:
    src, tgt = np.array([5, 500, 6]), np.array([5, 500, 6])
    batches = make_batches(src, tgt, 100, seed=0, epoch=1, shuffle=False)
    assert [len(b) for b in batches] == [2, 1]


def test_collate_adds_bos_eos_and_pads() -> None:
    data = ParallelData([np.array([7, 8]), np.array([9])], [np.array([10]), np.array([11, 12, 13])])
    batch = collate(data, np.array([0, 1]))
    assert batch.src.tolist() == [[7, 8, EOS], [9, EOS, PAD]]
    assert batch.tgt_in.tolist() == [[BOS, 10, PAD, PAD], [BOS, 11, 12, 13]]
    assert batch.tgt_out.tolist() == [[10, EOS, PAD, PAD], [11, 12, 13, EOS]]
    assert batch.n_tgt_tokens == 6 and batch.n_src_tokens == 5


def test_filter_max_len_counts_drops() -> None:
    data = ParallelData([np.arange(3), np.arange(10), np.arange(2)], [np.arange(2), np.arange(2), np.arange(9)])
    kept, dropped = data.filter_max_len(5)
    assert len(kept) == 1 and dropped == 2
