"""Is a difference between two systems the method or the seed? Tests over several training runs per system.

With one run per system, sacreBLEU's paired bootstrap (:func:`nmt.metrics.paired_bootstrap`) resamples the test
sentences only: it says whether *these two models* differ, not whether the *methods* do, since retraining with another
seed moves BLEU by about as much as the effects studied here. Clark et al. 2011 ("Better Hypothesis Testing for
Statistical Machine Translation: Controlling for Optimizer Instability", ACL; their tool MultEval) test over several
optimizer runs per system. This module does the same for training seeds, on the papers' tokenized BLEU:

- :func:`randomization_test`: a stratified approximate randomization test of the difference of mean BLEU. Under the
  null hypothesis the system label *and* the seed are exchangeable, so each shuffle permutes, for every test sentence
  separately, that sentence's hypotheses among all runs of both systems (MultEval's StratifiedApproximateRandomization:
  swaps between systems and between optimizer runs, stratified by sentence). p = (c + 1) / (S + 1), c the shuffles
  whose |difference| is larger than the observed one, as MultEval and sacreBLEU's paired AR count (with one run per
  system this *is* sacreBLEU's paired approximate randomization test, tested); no difference at all gives p = 1.
  One deliberate departure from MultEval: the statistic is the difference of the *mean of per-run corpus BLEU* (the
  number the report gives, and what the interval below is about), where MultEval scores the runs' pooled sufficient
  statistics.
- :func:`bootstrap_interval`: a confidence interval for the difference of means that resamples both sources of
  variation: the test sentences (one resample shared by all runs, as the paired bootstrap does) and each system's
  runs (seeds drawn with replacement).

Both work on per-sentence BLEU sufficient statistics (:func:`sentence_statistics`), summed and scored with sacreBLEU's
own functions, so every per-run BLEU here equals ``sacrebleu.corpus_score`` on the same text (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nmt.metrics import bleu_metric, check_lengths

SEED = 12345  # sacreBLEU's default SACREBLEU_SEED: the tests are reproducible
RANDOMIZATION_TEST = ("stratified approximate randomization over test sentences and training seeds "
                      "(Clark et al. 2011, MultEval)")
INTERVAL = "bootstrap over test sentences and training seeds"


def sentence_statistics(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per-sentence sufficient statistics of the papers' tokenized BLEU: an ``(N, 2 + 2 * 4)`` array (hypothesis
    length, reference length, matches and totals per n-gram order), sacreBLEU's own layout."""
    check_lengths(hypotheses, references)
    metric = bleu_metric(tokenized=True)
    return np.asarray(metric._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype=np.int64)


def corpus_bleu(summed: np.ndarray) -> np.ndarray:
    """Tokenized BLEU of each row of ``summed`` (``(..., 10)`` summed statistics), by sacreBLEU's scorer."""
    metric = bleu_metric(tokenized=True)
    flat = summed.reshape(-1, summed.shape[-1])
    scores = [metric._compute_score_from_stats(list(map(int, row))).score for row in flat]
    return np.asarray(scores, dtype=np.float64).reshape(summed.shape[:-1])


def _pool(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray]) -> np.ndarray:
    if not baseline or not system:
        raise ValueError("each side needs at least one run")
    if len({stats.shape for stats in (*baseline, *system)}) != 1:
        raise ValueError("all runs must be scored on the same test sentences")
    return np.stack([*baseline, *system])  # (runs, sentences, 10)


def mean_difference(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray]) -> float:
    """Mean corpus BLEU of the ``system`` runs minus that of the ``baseline`` runs (statistics per run)."""
    pool = _pool(baseline, system)
    bleu = corpus_bleu(pool.sum(axis=1))
    return float(bleu[len(baseline):].mean() - bleu[:len(baseline)].mean())


def randomization_test(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], n_shuffles: int = 10000,
                       seed: int = SEED) -> dict[str, Any]:
    """Stratified approximate randomization test of mean BLEU (see the module docstring).

    Args:
        baseline: per-sentence statistics (:func:`sentence_statistics`) of each baseline run.
        system: the same for each run of the system compared with it.
        n_shuffles: random shufflings.
        seed: seed of the shufflings.

    Returns:
        ``{"test", "difference", "p_value", "n_shuffles", "runs": [n_baseline, n_system], "seed"}``.
    """
    pool = _pool(baseline, system)
    n_base, runs, sentences = len(baseline), pool.shape[0], pool.shape[1]
    observed = abs(mean_difference(baseline, system))
    rng = np.random.default_rng(seed)
    columns = np.arange(sentences)[:, None]
    larger = 0
    for _ in range(n_shuffles):
        order = np.argsort(rng.random((sentences, runs)), axis=1)  # per sentence: which run's hypothesis goes where
        shuffled = pool[order, columns]  # (sentences, runs, 10)
        bleu = corpus_bleu(shuffled.sum(axis=0))
        if abs(bleu[n_base:].mean() - bleu[:n_base].mean()) > observed:
            larger += 1
    # no difference is no evidence of one (a strict count alone would give 1/(S+1) there)
    p_value = 1.0 if observed == 0 else (larger + 1) / (n_shuffles + 1)
    return {"test": RANDOMIZATION_TEST, "difference": mean_difference(baseline, system), "p_value": p_value,
            "n_shuffles": n_shuffles, "runs": [n_base, runs - n_base], "seed": seed}


def bootstrap_interval(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], n_resamples: int = 1000,
                       level: float = 0.95, seed: int = SEED) -> dict[str, Any]:
    """Percentile bootstrap interval of the difference of mean BLEU (system − baseline), resampling the test
    sentences (shared by every run) and each side's runs.

    Returns:
        ``{"method", "difference", "low", "high", "level", "n_resamples", "seed"}``.
    """
    pool = _pool(baseline, system)
    n_base, runs, sentences = len(baseline), pool.shape[0], pool.shape[1]
    rng = np.random.default_rng(seed)
    differences = np.empty(n_resamples)
    for b in range(n_resamples):
        rows = rng.integers(0, sentences, sentences)
        bleu = corpus_bleu(pool[:, rows].sum(axis=1))
        base = bleu[rng.integers(0, n_base, n_base)]
        other = bleu[n_base + rng.integers(0, runs - n_base, runs - n_base)]
        differences[b] = other.mean() - base.mean()
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(differences, [tail, 100 - tail])
    return {"method": INTERVAL, "difference": mean_difference(baseline, system), "low": float(low),
            "high": float(high), "level": level, "n_resamples": n_resamples, "seed": seed}


def spread(values: Sequence[float]) -> dict[str, Any]:
    """``{"mean", "sd", "n", "values"}``: the sample standard deviation (n − 1), None for a single value."""
    data = [float(v) for v in values]
    if not data:
        return {"mean": None, "sd": None, "n": 0, "values": []}
    mean = sum(data) / len(data)
    sd = (sum((v - mean) ** 2 for v in data) / (len(data) - 1)) ** 0.5 if len(data) > 1 else None
    return {"mean": mean, "sd": sd, "n": len(data), "values": data}
