"""BPE-dropout drawn by nmt.data.bpe_dropout: SentencePiece's segmentation at alpha 0, SentencePiece's sampling
distribution at alpha > 0 (both checked against the exact distribution of the merge-skipping process), and the same
draws in every process for a seed."""

from __future__ import annotations

import io
import json
import math
import random
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import sentencepiece as spm

from nmt.data.bpe import SentencePieceTokenizer, train_sentencepiece
from nmt.data.bpe_dropout import SPACE, BpeDropout
from nmt.errors import NmtError

WORDS = ["normalization", "translation", "transformer", "international", "information", "formation", "national",
         "attention", "station", "transform", "normal", "nation", "format", "inform", "tension", "trains", "rational",
         "hmmm", "shhh"]  # runs of one letter: equal-score pairs overlap, the leftmost merges first
EDGES = ["", "   ", "a  b   c ", "☃", "x ☃☃ y ☃x☃", "ab☃☃☃cd", f"{SPACE}{SPACE}nation", "Ünïcödé tränslätion",
         "hmmmmmm shhhhh mmm"]


def corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))) for _ in range(n)]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bpe")
    train_sentencepiece(corpus(2000, 0), out, vocab_size=120)
    return out / "spm.model"


@pytest.fixture(scope="module")
def processor(model_path: Path) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(model_path))


def test_alpha_zero_is_sentencepiece_encode(processor: spm.SentencePieceProcessor) -> None:
    text = corpus(300, 1) + EDGES + [w[::-1] for w in WORDS]  # unseen orders, unknown characters, odd spaces
    assert BpeDropout(processor).encode(text, 0.0, seed=1) == [processor.Encode(t) for t in text]


def exact_distribution(processor: spm.SentencePieceProcessor, word: str, alpha: float) -> dict[tuple[str, ...], float]:
    """The probability of each segmentation of ``word`` when each merge about to be made is skipped with
    probability ``alpha`` and a skipped pair of symbols is never proposed again (brute force over every decision)."""
    scores = {processor.IdToPiece(i): processor.GetScore(i) for i in range(processor.GetPieceSize())
              if not (processor.IsControl(i) or processor.IsUnknown(i))}
    outcomes: defaultdict[tuple[str, ...], float] = defaultdict(float)

    def walk(symbols: tuple[tuple[int, int], ...], skipped: frozenset[tuple[tuple[int, int], ...]], p: float) -> None:
        pairs = [(scores[word[a[0]:b[1]]], -i, (a, b)) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))
                 if word[a[0]:b[1]] in scores and (a, b) not in skipped]
        if not pairs:
            outcomes[tuple(word[a:b] for a, b in symbols)] += p
            return
        _, neg_i, pair = max(pairs)
        i = -neg_i
        walk(symbols[:i] + ((pair[0][0], pair[1][1]),) + symbols[i + 2:], skipped, p * (1 - alpha))
        walk(symbols, skipped | {pair}, p * alpha)

    walk(tuple((i, i + 1) for i in range(len(word))), frozenset(), 1.0)
    return dict(outcomes)


@pytest.mark.parametrize(("word", "alpha"), [("international", 0.3), ("normalization", 0.1), ("transformer", 0.5)])
def test_draws_follow_sentencepiece_distribution(processor: spm.SentencePieceProcessor, word: str,
                                                 alpha: float) -> None:
    exact = exact_distribution(processor, SPACE + word, alpha)
    assert abs(sum(exact.values()) - 1.0) < 1e-9 and len(exact) > 3
    n = 4000
    ours = Counter(tuple(processor.IdToPiece(i) for i in ids)
                   for ids in BpeDropout(processor).encode([word] * n, alpha, seed=5))
    theirs = Counter(tuple(processor.Encode(word, out_type=str, enable_sampling=True, alpha=alpha, nbest_size=-1))
                     for _ in range(n))
    for drawn in (ours, theirs):  # SentencePiece's sampler vouches for the process, ours must match it
        assert set(drawn) <= set(exact)
        for pieces, p in exact.items():
            assert abs(drawn[pieces] / n - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-3, (pieces, drawn[pieces] / n, p)


def test_draws_are_a_pure_function_of_seed_in_every_process(model_path: Path) -> None:
    text = corpus(200, 2)
    script = ("import json, sys\nfrom nmt.data.bpe import SentencePieceTokenizer\n"
              f"tok = SentencePieceTokenizer({str(model_path)!r})\n"
              f"print(json.dumps(tok.encode_sampled({text!r}, 0.2, seed=9)))\n")
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                      check=True).stdout) for _ in range(2)]
    tokenizer = SentencePieceTokenizer(model_path)
    here = tokenizer.encode_sampled(text, 0.2, seed=9)
    assert runs[0] == runs[1] == here
    assert tokenizer.encode_sampled(text, 0.2, seed=10) != here
    assert [tokenizer.decode(ids) for ids in here] == text
    assert sum(map(len, here)) > sum(len(tokenizer.encode(t)) for t in text)


def test_cache_limit_keeps_the_draws(processor: spm.SentencePieceProcessor, monkeypatch: pytest.MonkeyPatch) -> None:
    text = corpus(100, 3)
    expected = [BpeDropout(processor).encode(text, 0.4, seed=s) for s in (1, 2)]
    monkeypatch.setattr("nmt.data.bpe_dropout.MAX_CACHED", 5)  # the cache is cleared between calls
    dropout = BpeDropout(processor)
    assert [dropout.encode(text, 0.4, seed=s) for s in (1, 2)] == expected


def test_pieces_across_words_are_refused() -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.Train(sentence_iterator=iter(["the cat sat", "the cat ran"] * 200), model_writer=model,
                                   vocab_size=30, model_type="bpe", split_by_whitespace=False, minloglevel=2)
    with pytest.raises(NmtError, match="never span a word boundary, but piece [0-9]+ is"):
        BpeDropout(spm.SentencePieceProcessor(model_proto=model.getvalue()))


def test_alpha_outside_zero_one_is_refused(processor: spm.SentencePieceProcessor) -> None:
    for alpha in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\), got"):
            BpeDropout(processor).encode(["nation"], alpha, seed=0)
