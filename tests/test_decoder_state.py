"""The incremental-decoding state's fast paths keep cached decoding equal to the full forward pass.

``select`` shares the cross-attention K/V between the beams of a sentence (grouped rows), prunes it only when
sentences leave, and gathers the self-attention cache into recycled buffers; every step must still match the
teacher-forced forward pass on the sequences the rows now hold.
"""

from __future__ import annotations

import pytest
import torch

from tests.test_model import TINY, VARIANTS, _batch, _model

H = TINY["n_heads"]


def _check(variant: str, selections: dict[int, list[int]], steps: int = 40) -> None:
    model = _model(variant).eval()
    torch.manual_seed(3)
    src, tgt = _batch([7, 4, 9, 5]), _batch([steps] * 4, bos=True)  # row r decodes tgt[rows[r]]
    rows = torch.arange(4)  # the original sentence each decoder row holds
    state = model.start(src)
    for t in range(steps):
        if t in selections:
            index = torch.tensor(selections[t])
            state = state.select(index)
            rows = rows[index]
        log_probs, state = model.step(tgt[rows, t], state)
        full = model(src[rows], tgt[rows, : t + 1]).log_softmax(-1)[:, -1]
        torch.testing.assert_close(log_probs, full, atol=1e-4, rtol=1e-4, msg=f"step {t}")


@pytest.mark.parametrize("variant", ["qknorm", "prenorm_fixnorm_scalenorm"])
def test_beam_like_selections(variant: str) -> None:
    beams = [i // 3 for i in range(12)]  # every sentence expands to 3 beams: grouped rows, memory unchanged
    within = [1, 0, 0, 3, 5, 4, 8, 8, 6, 11, 9, 10]  # reorder/duplicate beams within each sentence
    drop = [0, 1, 2, 6, 7, 8]  # of 9 rows: the second sentence leaves, memory pruned, still grouped by 3
    irregular = [5, 0, 1, 2]  # not grouped: one memory row per decoder row
    _check(variant, {1: beams, 2: within, 5: within[:9], 17: drop, 18: [2, 2, 0, 5, 4, 3], 30: irregular})


def test_selections_across_cache_growth() -> None:
    perm = [3, 2, 1, 0]
    _check("qknorm", {t: perm for t in range(0, 40, 3)} | {16: [0, 0, 1, 1, 2, 2, 3, 3]})


def test_beam_reorders_move_no_cache_and_finished_sentences_stay_until_half_are_gone() -> None:
    model = _model().eval()
    state = model.start(_batch([5, 6, 4]))
    _, state = model.step(torch.full((3,), 2), state)
    memory = state.memory_kv
    beamed = state.select(torch.tensor([0, 0, 1, 1, 2, 2]))  # the beam widens: one gather, memory shared
    assert beamed.group == 2 and beamed.memory_kv is memory and beamed.self_kv.shape[2:5] == (3, H, 2)
    _, beamed = model.step(torch.full((6,), 5), beamed)
    reordered = beamed.select(torch.tensor([1, 1, 2, 3, 5, 4]))  # within sentences: only back-pointers change
    assert reordered.self_kv is beamed.self_kv and reordered.memory_kv is memory
    assert reordered.slots[0, :, 1].tolist() == [1, 1] and reordered.slots[2, :, 1].tolist() == [1, 0]
    _, reordered = model.step(torch.full((6,), 6), reordered)
    pruned = reordered.select(torch.tensor([0, 1, 4, 5]))  # one of three sentences leaves: its block stays
    assert pruned.self_kv is reordered.self_kv and pruned.memory_kv is memory
    assert pruned.place.blocks is not None and pruned.place.blocks.tolist() == [0, 2] and pruned.place.live == 2
    _, pruned = model.step(torch.full((4,), 7), pruned)
    alone = pruned.select(torch.tensor([3, 2]))  # one of three blocks live: compact stores
    assert alone.place.blocks is None and alone.memory_kv.size(2) == 1 and alone.self_kv.size(2) == 1
    assert alone.slots[0, :, :4].tolist() == [[0, 0, 0, 0], [1, 1, 1, 1]] and alone.length == 4


@pytest.mark.parametrize("variant", VARIANTS)
def test_grouped_cross_attention_all_variants(variant: str) -> None:
    _check(variant, {1: [i // 2 for i in range(8)], 3: [1, 0, 3, 2, 5, 4, 7, 6]}, steps=5)
