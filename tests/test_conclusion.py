"""The comparison's one-sentence answer (:mod:`nmt.experiments.conclusion`): each branch of the rule, and one
sentence per system other than the baseline."""

from __future__ import annotations

from typing import Any

from nmt.experiments.conclusion import conclusion, conclusions


def _test(difference: float, low: float, high: float, p_value: float, detectable: float | None) -> dict[str, Any]:
    return {"interval": {"difference": difference, "low": low, "high": high}, "randomization": {"p_value": p_value},
            "detectable": None if detectable is None else {"difference": detectable}}


def test_too_few_seeds_is_not_concluded_whatever_the_p() -> None:
    sentence = conclusion("gl-en", "qknorm", "base", (1, 6), _test(0.9, 0.4, 1.4, 0.001, None))
    assert sentence.startswith("gl-en: qknorm against base: not concluded, 1 and 6 seeds recorded")
    assert "not concluded" in conclusion("gl-en", "qknorm", "base", (6, 6), None)


def test_better_and_worse_need_both_the_p_and_the_interval() -> None:
    better = conclusion("gl-en", "qknorm", "base", (6, 6), _test(0.62, 0.21, 1.05, 0.004, 0.55))
    assert better == ("gl-en: qknorm against base: qknorm is better (Δ +0.62 BLEU [95% CI +0.21, +1.05], "
                      "p = 0.004, 6 and 6 seeds).")
    worse = conclusion("gl-en", "qknorm", "base", (6, 6), _test(-0.62, -1.05, -0.21, 0.004, 0.55))
    assert ": qknorm is worse (Δ -0.62" in worse
    # significant p but an interval that holds 0 (or the reverse): not distinguishable
    for test in (_test(0.4, -0.1, 0.9, 0.03, 0.7), _test(0.4, 0.1, 0.9, 0.2, 0.7)):
        sentence = conclusion("gl-en", "qknorm", "base", (6, 6), test)
        assert "not distinguishable by more than 0.70 BLEU" in sentence and "Δ +0.40" in sentence


def test_not_distinguishable_names_the_detectable_difference() -> None:
    sentence = conclusion("gl-en", "qknorm", "base", (6, 3), _test(0.1, -0.4, 0.6, 0.61, 0.83))
    assert sentence == ("gl-en: qknorm against base: not distinguishable by more than 0.83 BLEU, the smallest "
                        "difference these seeds detect 4 times in 5 (Δ +0.10 BLEU [95% CI -0.40, +0.60], p = 0.610, "
                        "6 and 3 seeds).")


def test_one_sentence_per_system_other_than_the_baseline() -> None:
    def group(pair: str, system: str, n: int, test: dict[str, Any] | None) -> dict[str, Any]:
        return {"pair": pair, "system": system, "tokenized_bleu": {"n": n}, "across_seeds": test}

    results = {"baseline": "base", "groups": [group("gl-en", "base", 6, None),
                                              group("gl-en", "qknorm", 6, _test(0.1, -0.4, 0.6, 0.6, 0.8)),
                                              group("gl-en", "control", 2, _test(0.1, -0.4, 0.6, 0.6, 1.9)),
                                              group("en-vi", "qknorm", 3, _test(0.1, -0.4, 0.6, 0.6, 0.8))]}
    sentences = conclusions(results)
    assert [s.split(":")[1] for s in sentences] == [" qknorm against base", " control against base",
                                                    " qknorm against base"]
    assert "0.80 BLEU" in sentences[0] and "1.90 BLEU" in sentences[1]
    assert "3 and 0 seeds" in sentences[2]  # no baseline on en-vi: not concluded
