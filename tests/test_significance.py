"""Tests over several seeds per system (nmt.experiments.significance): BLEU from sufficient statistics is sacreBLEU's,
the randomization test is sacreBLEU's paired AR with one run a side, and it and the interval behave under the null and
under a clear difference."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sacrebleu.significance import PairedTest

from nmt.experiments.significance import (
    bootstrap_interval,
    corpus_bleu,
    mean_difference,
    randomization_test,
    sentence_statistics,
    spread,
)
from nmt.metrics import bleu_metric, tokenized_bleu

WORDS = "the a cat dog sat ran on under mat tree big small red blue green old new".split()


def references(n: int = 80) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 10))) for _ in range(n)]


def noisy(lines: list[str], rate: float, seed: int) -> list[str]:
    """Each word replaced with probability ``rate`` (a 'training run' of a system whose quality is ``rate``)."""
    rng = random.Random(seed)
    return [" ".join("xyz" if rng.random() < rate else word for word in line.split()) for line in lines]


def stats_of(runs: list[list[str]], refs: list[str]) -> list[np.ndarray]:
    return [sentence_statistics(hyps, refs) for hyps in runs]


def test_bleu_from_statistics_is_sacrebleus_corpus_bleu() -> None:
    refs = references()
    for rate, seed in ((0.1, 1), (0.3, 2), (0.6, 3)):
        hyps = noisy(refs, rate, seed)
        stats = sentence_statistics(hyps, refs)
        assert stats.shape == (len(refs), 10)
        assert float(corpus_bleu(stats.sum(axis=0))) == pytest.approx(tokenized_bleu(hyps, refs), abs=1e-9)
        half = stats[: len(refs) // 2].sum(axis=0)
        assert float(corpus_bleu(half)) == pytest.approx(tokenized_bleu(hyps[:40], refs[:40]), abs=1e-9)


def test_one_run_a_side_is_sacrebleus_paired_approximate_randomization() -> None:
    """With one run per system, the stratified test reduces to the paired AR test; sacreBLEU's p and ours agree
    within Monte Carlo error (different random streams)."""
    refs = references()
    base, other = noisy(refs, 0.30, 1), noisy(refs, 0.27, 2)
    test = PairedTest([("baseline", base), ("system", other)], {"BLEU": bleu_metric(tokenized=True)}, [refs],
                      test_type="ar", n_samples=4000)
    _, results = test()
    theirs = float(results["BLEU"][1].p_value)
    ours = randomization_test(stats_of([base], refs), stats_of([other], refs), n_shuffles=4000)
    assert 0.02 < theirs < 0.9  # a case where the p-value is informative, not pinned at an end
    assert ours["p_value"] == pytest.approx(theirs, abs=0.04)
    assert ours["difference"] == pytest.approx(tokenized_bleu(other, refs) - tokenized_bleu(base, refs))


def test_identical_systems_give_p_one_and_a_zero_interval() -> None:
    refs = references()
    runs = stats_of([noisy(refs, 0.3, seed) for seed in (1, 2, 3)], refs)
    test = randomization_test(runs, runs, n_shuffles=200)
    assert test["p_value"] == 1.0 and test["difference"] == 0.0
    interval = bootstrap_interval(runs, runs, n_resamples=100)
    assert interval["difference"] == 0.0 and interval["low"] <= 0.0 <= interval["high"]


def test_a_clear_difference_is_significant_and_inside_its_interval() -> None:
    refs = references()
    base = stats_of([noisy(refs, 0.40, seed) for seed in (1, 2, 3)], refs)
    better = stats_of([noisy(refs, 0.15, seed) for seed in (11, 12, 13)], refs)
    test = randomization_test(base, better, n_shuffles=500)
    assert test["p_value"] < 0.01 and test["runs"] == [3, 3]
    interval = bootstrap_interval(base, better, n_resamples=300)
    assert 0.0 < interval["low"] < interval["difference"] < interval["high"]
    assert interval["difference"] == pytest.approx(mean_difference(base, better)) and interval["difference"] > 10


def test_the_same_method_with_other_seeds_is_not_significant() -> None:
    """Two 'systems' that are one method trained with different seeds: H0 holds, the test must not reject it."""
    refs = references()
    first = stats_of([noisy(refs, 0.3, seed) for seed in (1, 2, 3)], refs)
    second = stats_of([noisy(refs, 0.3, seed) for seed in (4, 5, 6)], refs)
    assert randomization_test(first, second, n_shuffles=500)["p_value"] > 0.05
    interval = bootstrap_interval(first, second, n_resamples=300)
    assert interval["low"] < 0.0 < interval["high"]


def test_seed_variation_widens_the_interval() -> None:
    """Resampling the seeds is what makes the interval account for the optimizer: with runs that disagree a lot
    the interval is wider than with runs that agree, at the same mean difference."""
    refs = references()
    steady_base = stats_of([noisy(refs, 0.3, s) for s in (1, 2, 3)], refs)
    steady = stats_of([noisy(refs, 0.2, s) for s in (4, 5, 6)], refs)
    wild_base = stats_of([noisy(refs, r, s) for r, s in ((0.15, 1), (0.3, 2), (0.45, 3))], refs)
    wild = stats_of([noisy(refs, r, s) for r, s in ((0.05, 4), (0.2, 5), (0.35, 6))], refs)
    narrow = bootstrap_interval(steady_base, steady, n_resamples=300)
    wide = bootstrap_interval(wild_base, wild, n_resamples=300)
    assert wide["high"] - wide["low"] > 1.5 * (narrow["high"] - narrow["low"])


def test_spread() -> None:
    assert spread([1.0, 2.0, 3.0]) == {"mean": 2.0, "sd": 1.0, "n": 3, "values": [1.0, 2.0, 3.0]}
    assert spread([4.0]) == {"mean": 4.0, "sd": None, "n": 1, "values": [4.0]}
    assert spread([])["n"] == 0
    with pytest.raises(ValueError, match="same test sentences"):
        mean_difference([np.zeros((3, 10), dtype=np.int64)], [np.zeros((4, 10), dtype=np.int64)])
