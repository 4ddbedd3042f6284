"""Corpus scores over sacreBLEU: detokenized BLEU and chrF with signatures, the papers' tokenized BLEU, and
sacreBLEU's paired bootstrap resampling test between two systems.

- Detokenized BLEU: sacreBLEU defaults (``13a`` tokenizer, mixed case, ``exp`` smoothing), reported with its
  signature so numbers are comparable across papers (Post 2018, arXiv:1804.08771).
- Tokenized BLEU: what the papers report, multi-bleu.perl on Moses-tokenized text. That is sacreBLEU with
  ``tokenize='none'`` (split on whitespace) and no smoothing (multi-bleu.perl gives 0 when an n-gram order has no
  match).
- chrF: sacreBLEU's chrF2 (Popović 2015) on detokenized text.

These functions are shared by ``nmt evaluate``, the trainer's validation and the reproduction report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest, Result

from nmt.data.tokenize import moses_detokenize
from nmt.errors import NmtError


def check_lengths(hypotheses: Sequence[str], references: Sequence[str], hyp_name: str = "hypotheses",
                  ref_name: str = "references") -> None:
    """Raise :class:`NmtError` naming both counts unless there is one hypothesis per reference."""
    if len(hypotheses) != len(references):
        raise NmtError(f"{hyp_name} has {len(hypotheses)} lines but {ref_name} has {len(references)}")


def bleu_metric(tokenized: bool = False) -> BLEU:
    """sacreBLEU's BLEU: ``13a`` + exp smoothing, or (``tokenized``) multi-bleu.perl: whitespace, no smoothing."""
    if tokenized:
        return BLEU(tokenize="none", smooth_method="none", force=True)
    return BLEU()


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """The papers' BLEU (multi-bleu.perl) on tokenized text, BPE removed."""
    check_lengths(hypotheses, references)
    return bleu_metric(tokenized=True).corpus_score(list(hypotheses), [list(references)]).score


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], tokenized: bool = False,
                  lang: str = "en") -> dict[str, Any]:
    """All corpus scores of one system.

    Args:
        hypotheses: one system output per line.
        references: one reference per line, aligned with ``hypotheses``.
        tokenized: the text is Moses-tokenized (as the papers' corpora are): also compute the papers' tokenized BLEU
            on it as given, and compute sacreBLEU and chrF on its Moses-detokenized form, as sacreBLEU requires.
        lang: language of the text, for Moses detokenization when ``tokenized``.

    Returns:
        ``{"bleu", "bleu_signature", "bleu_detail", "chrf", "chrf_signature", "lines"}`` plus ``"tokenized_bleu"``
        and ``"tokenized_bleu_signature"`` when ``tokenized``. ``bleu_detail`` holds the n-gram precisions, brevity
        penalty, and system/reference lengths.

    Raises:
        NmtError: the two sides have different line counts.
    """
    check_lengths(hypotheses, references)
    hyps, refs = list(hypotheses), [list(references)]
    if tokenized:
        hyps, refs = moses_detokenize(hyps, lang), [moses_detokenize(refs[0], lang)]
    bleu = bleu_metric()
    bleu_score = bleu.corpus_score(hyps, refs)
    chrf_metric = CHRF()
    scores: dict[str, Any] = {
        "lines": len(hyps),
        "bleu": bleu_score.score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_detail": {"precisions": list(bleu_score.precisions), "bp": bleu_score.bp,
                        "sys_len": bleu_score.sys_len, "ref_len": bleu_score.ref_len},
        "chrf": chrf_metric.corpus_score(hyps, refs).score,
        "chrf_signature": str(chrf_metric.get_signature()),
    }
    if tokenized:
        tok = bleu_metric(tokenized=True)
        scores["tokenized_bleu"] = tok.corpus_score(list(hypotheses), [list(references)]).score
        scores["tokenized_bleu_signature"] = str(tok.get_signature())
    return scores


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                     tokenized: bool = False, n_samples: int = 1000) -> dict[str, Any]:
    """sacreBLEU's paired bootstrap resampling test of BLEU between two systems on the same references.

    The p-value estimates the probability that the observed BLEU difference arises by chance (Koehn 2004);
    resampling uses sacreBLEU's fixed seed (env ``SACREBLEU_SEED``, default 12345), so results are reproducible.

    Args:
        baseline: outputs of the baseline system.
        system: outputs of the system compared with it.
        references: the shared references.
        tokenized: test the papers' tokenized BLEU instead of detokenized sacreBLEU.
        n_samples: bootstrap resamples.

    Returns:
        ``{"metric", "signature", "baseline": {"score", "mean", "ci"}, "system": {...}, "p_value", "n_samples"}``.

    Raises:
        NmtError: the three inputs do not have the same number of lines.
    """
    check_lengths(baseline, references, "baseline", "references")
    check_lengths(system, references, "system", "references")
    metrics: dict[str, Metric] = {"BLEU": bleu_metric(tokenized)}
    test = PairedTest([("baseline", list(baseline)), ("system", list(system))], metrics, [list(references)],
                      test_type="bs", n_samples=n_samples)
    signatures, results = test()
    (name,) = signatures
    base, other = (cast(Result, result) for result in results[name])

    def summary(result: Result) -> dict[str, float | None]:
        return {"score": float(result.score), "mean": _float(result.mean), "ci": _float(result.ci)}

    return {"metric": "tokenized BLEU" if tokenized else "BLEU", "signature": str(signatures[name]),
            "baseline": summary(base), "system": summary(other), "p_value": float(cast(float, other.p_value)),
            "n_samples": n_samples}


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
