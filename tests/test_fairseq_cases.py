"""fairseq's own beam-search unit tests (``tests/test_sequence_generator.py``, ``TestSequenceGenerator``: beam 2 over
the fixed probability tables of ``tests/utils.py::sequence_generator_setup``) run against ``--search fairseq`` with
``length_norm: fairseq``: the expected hypotheses, positional scores and scores are fairseq's. Plus fairseq's
``finalize_hypos`` rule that a sentence keeps at most ``beam`` finished hypotheses.

The tables give each step's probabilities per beam row; their comments name the prefix each row holds, and the toy
model here keys the same numbers by that prefix, so the test does not depend on how rows are ordered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from nmt.search import beam_search
from nmt.vocab import BOS, EOS

W1, W2 = 4, 5
VOCAB = 6
# sentence -> prefix -> {token: probability}; a prefix past the tables gives EOS probability 1 (as fairseq's toy)
TABLES: list[dict[tuple[int, ...], dict[int, float]]] = [
    {(): {W1: 0.9, W2: 0.1},
     (W1,): {EOS: 1.0}, (W2,): {W1: 0.9, W2: 0.1},
     (W2, W1): {W1: 0.1, W2: 0.9}, (W2, W2): {EOS: 0.6, W1: 0.2, W2: 0.2},
     (W2, W1, W2): {EOS: 1.0}, (W2, W1, W1): {EOS: 1.0}},
    {(): {W1: 0.7, W2: 0.3},
     (W1,): {EOS: 0.25, W1: 0.35, W2: 0.4}, (W2,): {W1: 0.1, W2: 0.9},
     (W1, W2): {EOS: 0.6, W1: 0.4}, (W2, W2): {EOS: 0.01, W2: 0.99},
     (W2, W2, W2): {EOS: 0.1, W1: 0.5, W2: 0.4}, (W1, W2, W1): {EOS: 1.0}},
]


@dataclass(frozen=True)
class ToyState:
    sentence: tuple[int, ...]
    prefix: tuple[tuple[int, ...], ...]

    def select(self, index: Tensor) -> ToyState:
        rows = index.tolist()
        return ToyState(tuple(self.sentence[i] for i in rows), tuple(self.prefix[i] for i in rows))


class ToyModel:
    """Next-token probabilities looked up by (sentence, prefix)."""

    def __init__(self, tables: list[dict[tuple[int, ...], dict[int, float]]]) -> None:
        self.tables = tables

    def start(self, src: Tensor) -> ToyState:
        return ToyState(tuple(range(src.size(0))), tuple(() for _ in range(src.size(0))))

    def step(self, prev: Tensor, state: ToyState) -> tuple[Tensor, ToyState]:
        prefixes = tuple(p if t == BOS else (*p, t) for p, t in zip(state.prefix, prev.tolist(), strict=True))
        probs = torch.zeros(len(prefixes), VOCAB)
        for row, (sentence, prefix) in enumerate(zip(state.sentence, prefixes, strict=True)):
            for token, p in self.tables[sentence].get(prefix, {EOS: 1.0}).items():
                probs[row, token] = p
        return probs.log(), ToyState(state.sentence, prefixes)


SRC = torch.tensor([[W1, W2, EOS], [W1, W2, EOS]])


def search(tables: list[dict[tuple[int, ...], dict[int, float]]] = TABLES, lenpen: float = 1.0,
           max_len_b: int = 200, nbest: int = 2) -> list[list[tuple[list[int], list[float], float]]]:
    hyps = beam_search(ToyModel(tables), SRC, beam=2, lenpen=lenpen, max_len_a=0.0, max_len_b=max_len_b,
                       nbest=nbest, search="fairseq", length_norm="fairseq")
    return [[(h.tokens, h.positional_scores, h.score) for h in sentence] for sentence in hyps]


def check(hyp: tuple[list[int], list[float], float], tokens: list[int], probs: list[float], lenpen: float) -> None:
    """fairseq's assertHypoTokens + assertHypoScore (its tokens end with EOS, ours leave it out)."""
    assert hyp[0] + [EOS] == tokens
    expected = [math.log(p) for p in probs]
    assert hyp[1] == pytest.approx(expected, abs=1e-4)
    assert hyp[2] == pytest.approx(sum(expected) / len(expected) ** lenpen, abs=1e-6)


# (fairseq test, lenpen: 0 is normalize_scores=False, max_len_b, expected [sentence][rank] = (tokens, probs))
CASES = [
    ("test_with_normalization", 1.0, 200, [
        [([W1, EOS], [0.9, 1.0]), ([W2, W1, W2, EOS], [0.1, 0.9, 0.9, 1.0])],
        [([W1, W2, W1, EOS], [0.7, 0.4, 0.4, 1.0]), ([W1, W2, EOS], [0.7, 0.4, 0.6])]]),
    ("test_without_normalization", 0.0, 200, [
        [([W1, EOS], [0.9, 1.0]), ([W2, W1, W2, EOS], [0.1, 0.9, 0.9, 1.0])],
        [([W1, W2, EOS], [0.7, 0.4, 0.6]), ([W1, W2, W1, EOS], [0.7, 0.4, 0.4, 1.0])]]),
    ("test_with_lenpen_favoring_short_hypos", 0.6, 200, [
        [([W1, EOS], [0.9, 1.0]), ([W2, W1, W2, EOS], [0.1, 0.9, 0.9, 1.0])],
        [([W1, W2, EOS], [0.7, 0.4, 0.6]), ([W1, W2, W1, EOS], [0.7, 0.4, 0.4, 1.0])]]),
    ("test_with_lenpen_favoring_long_hypos", 5.0, 200, [
        [([W2, W1, W2, EOS], [0.1, 0.9, 0.9, 1.0]), ([W1, EOS], [0.9, 1.0])],
        [([W1, W2, W1, EOS], [0.7, 0.4, 0.4, 1.0]), ([W1, W2, EOS], [0.7, 0.4, 0.6])]]),
    ("test_maxlen", 1.0, 2, [
        [([W1, EOS], [0.9, 1.0]), ([W2, W2, EOS], [0.1, 0.1, 0.6])],
        [([W1, W2, EOS], [0.7, 0.4, 0.6]), ([W2, W2, EOS], [0.3, 0.9, 0.01])]]),
    ("test_generation_with_additional_input", 1.0, 200, [[([W1, EOS], [0.9, 1.0])]]),  # its one assertion
]


@pytest.mark.parametrize(("name", "lenpen", "max_len_b", "expected"), CASES, ids=[c[0] for c in CASES])
def test_fairseq_sequence_generator_case(name: str, lenpen: float, max_len_b: int,
                                         expected: list[list[tuple[list[int], list[float]]]]) -> None:
    hyps = search(lenpen=lenpen, max_len_b=max_len_b)
    for sentence, wanted in enumerate(expected):
        for rank, (tokens, probs) in enumerate(wanted):
            check(hyps[sentence][rank], tokens, probs, lenpen)


def test_a_sentence_keeps_at_most_beam_finished_hypotheses() -> None:
    """One hypothesis ends at step 1, two at step 2 with one place left: fairseq keeps the better of the two only,
    so the n-best holds the step-1 hypothesis (without the cap the second step-2 one would push it out)."""
    tables = [{(): {W1: 0.6, W2: 0.4},
               (W1,): {EOS: 0.55, W1: 0.45}, (W2,): {W1: 0.6, W2: 0.4},
               (W1, W1): {EOS: 0.9, W2: 0.1}, (W2, W1): {EOS: 0.9, W2: 0.1}}]
    src = SRC[:1]
    hyps = beam_search(ToyModel(tables), src, beam=2, lenpen=1.0, max_len_a=0.0, max_len_b=200, nbest=2,
                       search="fairseq", length_norm="fairseq")
    assert [h.tokens for h in hyps[0]] == [[W1, W1], [W1]]
    assert hyps[0][1].score == pytest.approx((math.log(0.6) + math.log(0.55)) / 2)


def test_the_gnmt_penalty_ranks_sentence_two_the_other_way() -> None:
    """What decode.length_norm changes: with alpha 1 the default GNMT penalty ((5 + |y|) / 6) favours the shorter of
    sentence 2's hypotheses, fairseq's |y| the longer; sentence 1 ranks alike."""
    gnmt = beam_search(ToyModel(TABLES), SRC, beam=2, lenpen=1.0, max_len_a=0.0, max_len_b=200, nbest=2,
                       search="fairseq")
    fairseq = search()
    assert [h.tokens for h in gnmt[0]] == [h[0] for h in fairseq[0]]
    assert [h.tokens for h in gnmt[1]] == [h[0] for h in reversed(fairseq[1])] == [[W1, W2], [W1, W2, W1]]
    assert gnmt[1][0].score == pytest.approx((math.log(0.7) + math.log(0.4) + math.log(0.6)) / (8 / 6))
