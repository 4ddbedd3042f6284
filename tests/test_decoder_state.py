"""The incremental-decoding state's fast paths keep cached decoding equal to the full forward pass.

``select`` shares the cross-attention K/V between the beams of a sentence (grouped rows), prunes it only when
sentences leave, and gathers the self-attention cache into recycled buffers; every step must still match the
teacher-forced forward pass on the sequences the rows now hold.
"""

from __future__ import annotations

import pytest
import torch

from nmt import kernels
from nmt.machine import hardware
from nmt.search import beam_search
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


@pytest.mark.parametrize("variant", ["qknorm", "prenorm_fixnorm_scalenorm"])
def test_steps_after_compaction_equal_the_full_pass(variant: str) -> None:
    """Compaction (at most half the sentences live) keeps each live block's slots and back-pointers: the steps after
    it, across a cache growth and further reorders, still equal the teacher-forced pass."""
    beams = [i // 3 for i in range(12)]
    within = [1, 0, 0, 3, 5, 4, 8, 8, 6, 11, 9, 10]
    one_left = [7, 6, 8]  # of 12 rows, only the third sentence's, reordered: 1 of 4 blocks live, compacted
    _check(variant, {1: beams, 2: within, 6: within, 10: one_left, 12: [2, 0, 1], 20: [1, 1, 0]}, steps=24)


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
    pointers, block = pruned.slots[2, [1, 0]].clone(), pruned.self_kv[:, :, 2].clone()
    alone = pruned.select(torch.tensor([3, 2]))  # one of three blocks live: compact stores
    assert alone.place.blocks is None and alone.memory_kv.size(2) == 1 and alone.self_kv.size(2) == 1
    # the live block moves as it was, its rows' back-pointers reordered, not resolved: a row's history keeps its
    # order in the sums (batch-invariant rounding)
    assert torch.equal(alone.self_kv[:, :, 0], block) and torch.equal(alone.slots[0], pointers)
    assert alone.slots[0, :, :4].tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]] and alone.length == 4


@pytest.mark.parametrize("variant", VARIANTS)
def test_grouped_cross_attention_all_variants(variant: str) -> None:
    _check(variant, {1: [i // 2 for i in range(8)], 3: [1, 0, 3, 2, 5, 4, 7, 6]}, steps=5)


def _translations(model: torch.nn.Module, src: torch.Tensor) -> list[tuple[list[int], float]]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hyps = beam_search(model, src, beam=4, nbest=1, max_len_a=1.2, max_len_b=10)
    return [(n[0].tokens, n[0].score) for n in hyps]


@pytest.mark.skipif(not hardware.bf16_support().native, reason="bf16 is not native on this CPU")
def test_a_bf16_translation_does_not_depend_on_the_rest_of_its_batch() -> None:
    """Each sentence decoded alone and in a batch of sources from 3 to 37 pieces (so with 0 to 34 pads, and
    sentences leaving the search at different steps, which compacts the stores): the same tokens and the same score,
    to the bit. Unpadded keys changed bf16 scores (the keys' tail sums) and compaction that resolved back-pointers
    changed the order of a row's history in its attention sums."""
    model = kernels.accelerate(_model("qknorm", vocab=200, length=20.0, d_model=64, d_ff=128)).eval()
    torch.manual_seed(5)
    lengths = [3, 37, 9, 21, 5, 17, 30, 12, 26, 7, 15, 33]
    src = _batch(lengths, vocab=200)
    together = _translations(model, src)
    alone = [_translations(model, src[i : i + 1, :n])[0] for i, n in enumerate(lengths)]
    assert together == alone
