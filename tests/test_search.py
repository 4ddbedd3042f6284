"""Beam and greedy search against scripted decoders (hand-written per-step probability tables)."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from nmt.search import SEARCHES, Hypothesis, beam_search, greedy_search, length_penalty, official
from nmt.vocab import BOS, EOS, PAD

A, B, C, D, E, F, G, H, K, J = range(4, 14)
VOCAB = 14


@dataclass
class ScriptState:
    """One row per live hypothesis: the source sentence and the prefix fed so far (BOS first)."""

    rows: list[tuple[tuple[int, ...], tuple[int, ...]]]

    def select(self, index: Tensor) -> ScriptState:
        return ScriptState([self.rows[i] for i in index.tolist()])


class ScriptedDecoder:
    """A fake Seq2Seq whose next-token distribution is a function of (source, prefix).

    ``table`` maps a prefix (generated tokens, without BOS) to ``{token: probability}``; missing tokens get
    probability 0 and a missing prefix uses ``default``. ``rows_per_step`` records how many rows each step ran on.
    """

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]] | None = None,
                 default: dict[int, float] | None = None) -> None:
        self.table = table or {}
        self.default = default or {EOS: 1.0}
        self.rows_per_step: list[int] = []

    def start(self, src: Tensor) -> ScriptState:
        return ScriptState([(tuple(row), ()) for row in src.tolist()])

    def distribution(self, src: tuple[int, ...], prefix: tuple[int, ...]) -> Tensor:
        probs = self.table.get(prefix[1:], self.default)
        out = torch.full((VOCAB,), -math.inf)
        for token, p in probs.items():
            out[token] = math.log(p)
        return out

    def step(self, prev: Tensor, state: ScriptState) -> tuple[Tensor, ScriptState]:
        self.rows_per_step.append(len(state.rows))
        rows = [(src, prefix + (token,)) for (src, prefix), token in zip(state.rows, prev.tolist())]
        log_probs = torch.stack([self.distribution(src, prefix) for src, prefix in rows])
        return log_probs, ScriptState(rows)


class PseudoRandomDecoder(ScriptedDecoder):
    """Deterministic 'random' distributions keyed by (non-pad source, prefix): the same row gives the same numbers
    whatever batch it is in, so batched and one-by-one decoding must agree exactly."""

    def __init__(self, vocab: int = 12, eos_boost: float = 0.0) -> None:
        super().__init__()
        self.vocab = vocab
        self.eos_boost = eos_boost

    def distribution(self, src: tuple[int, ...], prefix: tuple[int, ...]) -> Tensor:
        key = repr((tuple(t for t in src if t != PAD), prefix)).encode()
        gen = torch.Generator().manual_seed(zlib.crc32(key))
        logits = torch.randn(self.vocab, generator=gen) * 2
        logits[EOS] += self.eos_boost * (len(prefix) - 1)
        return torch.log_softmax(logits, dim=0)


# Step 1 has EOS ranked first (finishes [b]) and ranked below the beam (a-EOS, dropped); the penalised scores of
# [b] (p=0.32, |y|=2) and [a c] (p=0.30, |y|=3) swap order between alpha=0 and alpha=1.
TABLE = {
    (): {A: 0.6, B: 0.4},
    (A,): {EOS: 0.1, C: 0.5, D: 0.4},
    (B,): {EOS: 0.8, C: 0.2},
}


def test_exact_hypotheses_and_scores_without_length_penalty() -> None:
    model = ScriptedDecoder(TABLE)
    (hyps,) = beam_search(model, torch.tensor([[A, B]]), beam=2, lenpen=0.0, nbest=2)
    assert [h.tokens for h in hyps] == [[B], [A, C]]
    assert hyps[0].score == pytest.approx(math.log(0.32), abs=1e-5)
    assert hyps[1].score == pytest.approx(math.log(0.30), abs=1e-5)
    assert hyps[0].logprob == pytest.approx(hyps[0].score)
    assert hyps[1].positional_scores == pytest.approx([math.log(0.6), math.log(0.5), math.log(1.0)], abs=1e-5)
    # One row at step 0 (no duplicate beams), two live beams after, and nothing after the sentence is done.
    assert model.rows_per_step == [1, 2, 2]


def test_length_penalty_changes_the_winner() -> None:
    (hyps,) = beam_search(ScriptedDecoder(TABLE), torch.tensor([[A, B]]), beam=2, lenpen=1.0, nbest=2)
    assert [h.tokens for h in hyps] == [[A, C], [B]]
    assert hyps[0].score == pytest.approx(math.log(0.30) / length_penalty(3, 1.0), abs=1e-5)
    assert hyps[1].score == pytest.approx(math.log(0.32) / (7 / 6), abs=1e-5)  # |y| = 2 counts EOS
    assert hyps[0].logprob == pytest.approx(math.log(0.30), abs=1e-5)


def test_nbest_sorted_and_eos_moves_to_finished() -> None:
    (hyps,) = beam_search(ScriptedDecoder(TABLE), torch.tensor([[A]]), beam=3, lenpen=0.0, nbest=3)
    # Beam 3: step 1 candidates b-EOS .32, a-c .30, a-d .24, b-c .08, a-EOS .06; b-EOS finishes, 3 stay live.
    assert [h.tokens for h in hyps] == [[B], [A, C], [A, D]]
    scores = [h.score for h in hyps]
    assert scores == sorted(scores, reverse=True)
    for h in hyps:
        assert EOS not in h.tokens and BOS not in h.tokens
        assert len(h.positional_scores) == len(h.tokens) + 1
        assert sum(h.positional_scores) == pytest.approx(h.logprob, abs=1e-5)


class LastTokenDecoder(ScriptedDecoder):
    """Distribution depends only on the last generated token; EOS is unlikely, so only the length limit ends."""

    START = {A: 0.7, B: 0.25, EOS: 0.05}
    AFTER = {A: {A: 0.8, B: 0.15, EOS: 0.05}, B: {A: 0.5, B: 0.4, EOS: 0.1}}

    def distribution(self, src: tuple[int, ...], prefix: tuple[int, ...]) -> Tensor:
        self.table = {prefix[1:]: self.AFTER[prefix[-1]] if len(prefix) > 1 else self.START}
        return super().distribution(src, prefix)


def test_fairseq_max_length_cutoff_forces_eos() -> None:
    # step 1 keeps AA .56, BA .125; step 2 keeps AAA .448, BAA .1; step 3 (= max length) forces EOS (p .05).
    (hyps,) = beam_search(LastTokenDecoder(), torch.tensor([[A, A, A, A]]), beam=2, lenpen=0.0,
                          max_len_a=0.0, max_len_b=3, nbest=2, search="fairseq")
    assert [h.tokens for h in hyps] == [[A, A, A], [B, A, A]]
    assert hyps[0].logprob == pytest.approx(math.log(0.7 * 0.8 * 0.8 * 0.05), abs=1e-5)
    assert hyps[1].logprob == pytest.approx(math.log(0.25 * 0.5 * 0.8 * 0.05), abs=1e-5)


RARE_EOS = {A: 0.6, B: 0.3, C: 0.09, EOS: 0.01}  # EOS never within the beam: only the length limit ends


def test_max_length_is_per_sentence_non_pad_length() -> None:
    never_ends = ScriptedDecoder(default=RARE_EOS)
    src = torch.tensor([[C, C, PAD, PAD], [C, C, C, C]])
    for search in (lambda s: beam_search(never_ends, s, beam=2, lenpen=1.0, max_len_a=1.0, max_len_b=1),
                   lambda s: greedy_search(never_ends, s, lenpen=1.0, max_len_a=1.0, max_len_b=1)):
        short, long = search(src)
        assert short[0].tokens == [A] * 3 and long[0].tokens == [A] * 5


def test_fairseq_finished_sentences_leave_the_batch() -> None:
    model = ScriptedDecoder(default=RARE_EOS)
    beam_search(model, torch.tensor([[C, PAD], [C, C]]), beam=2, lenpen=0.0, max_len_a=1.0, max_len_b=0,
                search="fairseq")
    assert model.rows_per_step == [2, 4, 2]  # sentence 0 is done at step 1 (max length 1 before EOS)


def test_official_finished_sentences_leave_the_batch() -> None:
    model = ScriptedDecoder(default=RARE_EOS)
    beam_search(model, torch.tensor([[C, PAD], [C, C]]), beam=2, lenpen=0.0, max_len_a=1.0, max_len_b=0)
    assert model.rows_per_step == [2, 2]  # sentence 0 is done after 1 token, sentence 1 after 2 (limits with EOS)


def test_official_length_limit_cuts_without_eos() -> None:
    # step 0 (EOS forbidden) keeps A .7, B .25; step 1 AA .56, BA .125; step 2 AAA .448, BAA .1; 3 tokens = limit.
    (hyps,) = beam_search(LastTokenDecoder(), torch.tensor([[A, A, A, A]]), beam=2, lenpen=0.0,
                          max_len_a=0.0, max_len_b=3, nbest=2)
    assert [h.tokens for h in hyps] == [[A, A, A], [B, A, A]]
    assert hyps[0].logprob == pytest.approx(math.log(0.7 * 0.8 * 0.8), abs=1e-5)
    assert hyps[1].logprob == pytest.approx(math.log(0.25 * 0.5 * 0.8), abs=1e-5)
    assert len(hyps[0].positional_scores) == 3  # no EOS


def test_both_rule_sets_forbid_eos_at_step_0() -> None:
    """The official decoder forbids it, and so does fairseq with its default --min-len 1."""
    table = {(): {EOS: 0.9, A: 0.1}, (A,): {EOS: 1.0}}
    src = torch.tensor([[A, B]])
    for search in ("official", "fairseq"):
        for hyps in (beam_search(ScriptedDecoder(table), src, beam=2, lenpen=0.6, nbest=1, search=search),
                     greedy_search(ScriptedDecoder(table), src, lenpen=0.6, search=search)):
            assert hyps[0][0].tokens == [A] and hyps[0][0].logprob == pytest.approx(math.log(0.1), abs=1e-5)
    (fairseq,) = beam_search(ScriptedDecoder(table), src, beam=2, lenpen=0.6, nbest=2, search="fairseq")
    assert [h.tokens for h in fairseq] == [[A]]  # the empty hypothesis is not among them


# beam 2, alpha 1. Step 1: B-E (.57) and the finished A-EOS (.304) lead. Step 2: B-E-G (.2964) and B-E-H (.2736)
# both score above A-EOS once penalised (lp (5 + 3) / 6 against (5 + 2) / 6), so A-EOS falls out of the official
# beam, and every later hypothesis ends below it: the official search returns B-E-G-K, fairseq's finished list
# keeps A.
PUSH_OUT = {
    (): {A: 0.38, B: 0.6, C: 0.02},
    (A,): {EOS: 0.8, D: 0.2},
    (B,): {E: 0.95, F: 0.05},
    (B, E): {G: 0.52, H: 0.48},
    (B, E, G): {EOS: 0.3, K: 0.36, J: 0.34},
    (B, E, H): {EOS: 0.3, K: 0.36, J: 0.34},
}


def test_official_finished_entries_can_fall_out_of_the_beam() -> None:
    src = torch.tensor([[A, B]])
    model = ScriptedDecoder(PUSH_OUT)
    (official,) = beam_search(model, src, beam=2, lenpen=1.0, nbest=2)
    assert [h.tokens for h in official] == [[B, E, G, K], [B, E, G, J]]
    assert official[0].score == pytest.approx(math.log(0.6 * 0.95 * 0.52 * 0.36) / length_penalty(5, 1.0), abs=1e-5)
    assert official[1].score == pytest.approx(math.log(0.6 * 0.95 * 0.52 * 0.34) / length_penalty(5, 1.0), abs=1e-5)
    assert model.rows_per_step == [1, 2, 2, 2, 2]
    (fairseq,) = beam_search(ScriptedDecoder(PUSH_OUT), src, beam=2, lenpen=1.0, nbest=2, search="fairseq")
    assert fairseq[0].tokens == [A]
    assert fairseq[0].score == pytest.approx(math.log(0.38 * 0.8) / length_penalty(2, 1.0), abs=1e-5)


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_beam_one_equals_greedy(search: str) -> None:
    model = PseudoRandomDecoder(eos_boost=0.7)
    src = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 10], [11, 0, 0, 0]])
    beam = beam_search(model, src, beam=1, lenpen=0.6, max_len_b=10, search=search)
    greedy = greedy_search(model, src, lenpen=0.6, max_len_b=10, search=search)
    for (b,), (g,) in zip(beam, greedy):
        assert b.tokens == g.tokens
        assert b.score == pytest.approx(g.score, abs=1e-5)
        assert b.positional_scores == pytest.approx(g.positional_scores, abs=1e-5)


@pytest.mark.parametrize("search", sorted(SEARCHES))
@pytest.mark.parametrize("beam", [1, 3, 5])
def test_batched_equals_one_by_one(beam: int, search: str) -> None:
    model = PseudoRandomDecoder(eos_boost=0.5)
    src = torch.tensor([[4, 5, 6, 0, 0], [7, 8, 9, 10, 11], [11, 0, 0, 0, 0], [5, 5, 0, 0, 0]])
    batched = beam_search(model, src, beam=beam, lenpen=0.6, max_len_b=8, nbest=beam, search=search)
    for i in range(src.size(0)):
        row = src[i : i + 1, : int((src[i] != PAD).sum())]
        (single,) = beam_search(model, row, beam=beam, lenpen=0.6, max_len_b=8, nbest=beam, search=search)
        assert [h.tokens for h in single] == [h.tokens for h in batched[i]]
        assert [h.score for h in single] == pytest.approx([h.score for h in batched[i]], abs=1e-5)


def test_nbest_larger_than_beam_is_rejected() -> None:
    with pytest.raises(ValueError):
        beam_search(ScriptedDecoder(TABLE), torch.tensor([[A]]), beam=2, nbest=3)


def test_hypothesis_is_a_plain_record() -> None:
    h = Hypothesis([4, 5], -1.0, -1.5, [-0.5, -0.5, -0.5])
    assert h.tokens == [4, 5] and h.score == -1.0


def test_search_names_match_the_config() -> None:

    from nmt.config import DecodeConfig, choices

    assert choices(DecodeConfig, "search") == list(SEARCHES)  # the registry is the only list of choices
    assert DecodeConfig().search == "official"
    with pytest.raises(ValueError, match="unknown search"):
        beam_search(ScriptedDecoder(TABLE), torch.tensor([[A]]), beam=2, search="nope")


# beam 2: after step 1 the beam holds the finished A-EOS (p .81) and the live A-C (p .09), whose continuations never
# end (C or D at .5 each): the official rules would extend A-C until the length limit, though nothing it can become
# outscores A-EOS.
SETTLES = {(): {A: 0.9, B: 0.1}, (A,): {EOS: 0.9, C: 0.1}}
NEVER_ENDS = {C: 0.5, D: 0.5}


@pytest.mark.parametrize("lenpen", [0.0, 0.6, 1.0])
def test_official_stops_a_sentence_once_its_nbest_cannot_change(lenpen: float,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    src = torch.tensor([[A, B]])
    runs = {}
    for settle in (False, True):
        monkeypatch.setattr(official, "SETTLE", settle)
        model = ScriptedDecoder(SETTLES, default=NEVER_ENDS)
        runs[settle] = beam_search(model, src, beam=2, lenpen=lenpen, max_len_b=30, nbest=1), model.rows_per_step
    (hyps, rows), (reference, all_rows) = runs[True], runs[False]
    assert hyps == reference and hyps[0][0].tokens == [A]
    assert all_rows == [1] + [2] * 31  # to the limit: |src| + 30 tokens, EOS included
    assert rows == [1, 2]  # done as soon as the finished entry cannot be outscored


def test_official_does_not_stop_while_a_live_entry_can_still_win(monkeypatch: pytest.MonkeyPatch) -> None:
    """After step 1 the beam holds the finished A-EOS (p .3, score log .3 / lp(2)) and the live B-C (p .25). The
    live entry's bound ``log .25 / lp(limit)`` rises with the limit: below A-EOS's score for a limit of 3 tokens,
    above it for a long one (a continuation of probability near 1 would win there)."""
    table = {(): {A: 0.5, B: 0.5}, (A,): {EOS: 0.6, C: 0.4}, (B,): {EOS: 0.1, C: 0.5, D: 0.4}}
    monkeypatch.setattr(official, "SETTLE", True)
    src = torch.tensor([[A, B]])
    model = ScriptedDecoder(table, default=NEVER_ENDS)
    beam_search(model, src, beam=2, lenpen=1.0, max_len_b=30, nbest=1)
    assert 2 < len(model.rows_per_step) < 31  # until B-C's descendants have fallen far enough
    model = ScriptedDecoder(table, default=NEVER_ENDS)
    beam_search(model, src, beam=2, lenpen=1.0, max_len_a=0.0, max_len_b=3, nbest=1)
    assert model.rows_per_step == [1, 2]


@pytest.mark.parametrize("nbest", [1, 2, 3])
@pytest.mark.parametrize("lenpen", [0.0, 0.6, 1.0, 2.0])
def test_settling_returns_the_same_nbest_as_running_to_the_end(nbest: int, lenpen: float,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    src = torch.tensor([[4 + (i * 7 + j * 3) % 8 for j in range(1 + i % 6)] + [PAD] * (5 - i % 6) for i in range(40)])
    results, steps = {}, {}
    for settle in (False, True):
        monkeypatch.setattr(official, "SETTLE", settle)
        model = PseudoRandomDecoder(eos_boost=0.25)
        results[settle] = beam_search(model, src, beam=4, lenpen=lenpen, max_len_b=12, nbest=nbest)
        steps[settle] = sum(model.rows_per_step)
    assert results[True] == results[False]  # tokens, scores, log-probabilities, positional scores: all equal
    assert steps[True] < steps[False]


class RawLogDecoder(ScriptedDecoder):
    """Log-probabilities given as they are, a few above 0: what rounding can give a near-certain token."""

    def distribution(self, src: tuple[int, ...], prefix: tuple[int, ...]) -> Tensor:
        out = torch.full((VOCAB,), -math.inf)
        for token, value in self.table.get(prefix[1:], self.default).items():
            out[token] = value
        return out


def test_settling_does_not_trust_scores_above_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """A-EOS finishes at +0.03 and B-C stays live at +0.01; B-C's descendants keep gaining and end above A-EOS. A
    bound divided by lp(limit) holds for a negative sum only, so a positive best score must not stop the search."""
    table = {(): {A: 0.0, B: 0.01}, (A,): {EOS: 0.03, C: -3.0}, (B,): {C: 0.0, EOS: -5.0}}
    src = torch.tensor([[A, B]])
    results = {}
    for settle in (False, True):
        monkeypatch.setattr(official, "SETTLE", settle)
        model = RawLogDecoder(table, default={C: 0.01, EOS: 0.05})
        results[settle] = beam_search(model, src, beam=2, lenpen=1.0, max_len_b=10, nbest=1)
    assert results[True] == results[False] and results[True][0][0].tokens[0] == B
