"""The one-sentence answer of a comparison: is a system better than the baseline, worse, or not distinguishable
from it by more than the difference its seeds could have detected?

The rule, applied the same way to every system and pair of a report (``results.md``'s "Conclusion"):

- fewer than ``MIN_SEEDS`` recorded seeds on either side: not concluded (one seed says nothing about how far the
  seed alone moves BLEU, so no difference can be told from seed noise);
- the across-seed randomization test (seeds × sentences) at p < 0.05 *and* a 95% interval of the difference that
  excludes 0: better or worse by the mean difference, with its interval and p;
- otherwise: not distinguishable by more than the detectable difference at 80% power
  (:func:`nmt.experiments.power.detectable_difference`), with the observed difference, its interval and p.
"""

from __future__ import annotations

from typing import Any

MIN_SEEDS = 2
SIGNIFICANCE_LEVEL = 0.05


def conclusion(pair: str, system: str, baseline: str, seeds: tuple[int, int], test: dict[str, Any] | None) -> str:
    """The sentence for ``system`` against ``baseline`` on ``pair``; ``seeds`` = (system's, baseline's) recorded
    seeds; ``test`` the group's ``across_seeds`` entry of :func:`nmt.experiments.report.build_results`."""
    ours, theirs = seeds
    subject = f"{pair}: {system} against {baseline}"
    if test is None or min(seeds) < MIN_SEEDS:
        return (f"{subject}: not concluded, {ours} and {theirs} seeds recorded (at least {MIN_SEEDS} each are "
                "needed to tell a difference from seed noise).")
    interval, p_value = test["interval"], test["randomization"]["p_value"]
    evidence = (f"Δ {interval['difference']:+.2f} BLEU [95% CI {interval['low']:+.2f}, {interval['high']:+.2f}], "
                f"p = {p_value:.3f}, {ours} and {theirs} seeds")
    excludes_zero = interval["low"] > 0 or interval["high"] < 0
    if p_value < SIGNIFICANCE_LEVEL and excludes_zero:
        verdict = "better" if interval["difference"] > 0 else "worse"
        return f"{subject}: {system} is {verdict} ({evidence})."
    bound = f"{test['detectable']['difference']:.2f} BLEU"  # computed wherever both sides have 2 seeds
    return (f"{subject}: not distinguishable by more than {bound}, the smallest difference these seeds detect "
            f"4 times in 5 ({evidence}).")


def conclusions(results: dict[str, Any]) -> list[str]:
    """One sentence per pair and system other than the baseline, in the report's order."""
    baseline = results["baseline"]
    counts = {(g["pair"], g["system"]): int(g["tokenized_bleu"]["n"]) for g in results["groups"]}
    return [conclusion(g["pair"], g["system"], baseline, (counts[(g["pair"], g["system"])],
                                                          counts.get((g["pair"], baseline), 0)), g["across_seeds"])
            for g in results["groups"] if g["system"] != baseline]
