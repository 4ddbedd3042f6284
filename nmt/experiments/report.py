"""The reproduction report: run records → one results tree (``results.json``) → ``results.md`` and plots.

The report is built from run records alone (:mod:`nmt.experiments.records`: ``record.json`` and ``test.hyp`` per
pair × system × seed), never from run directories, so it can be rebuilt on any machine once the records are
committed. Per pair and system it gives mean ± sample standard deviation over seeds of test BLEU (the papers'
tokenized BLEU, and sacreBLEU), every seed's figure, best dev BLEU, steps and training time; each system is compared
with the TwT baseline (``prenorm_fixnorm_scalenorm``):

- across seeds (:mod:`nmt.experiments.significance`): a stratified approximate randomization test of the difference
  of mean BLEU over test sentences and seeds (Clark et al. 2011), and a bootstrap interval of that difference;
- per seed: sacreBLEU's paired bootstrap between the two runs of the same seed (test sentences only);
- the smallest difference of mean BLEU these seeds could have detected with 80% power (:mod:`nmt.experiments.power`).

The published number beside each result comes from :data:`nmt.experiments.published.PUBLISHED`; QKNorm's per-pair
numbers other than en-vi were not published, so for them the report shows the TwT baseline's published number plus
QKNorm's average gain, labelled ``expected``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.atomic import atomic_write_text
from nmt.experiments.power import detectable_difference
from nmt.experiments.published import BASELINE, QKNORM_AVERAGE_GAIN, reference_score
from nmt.experiments.significance import bootstrap_interval, randomization_test, sentence_statistics, spread
from nmt.metrics import paired_bootstrap
from nmt.model.transformer import site_of

# Label of each kind of attention (``nmt.model.transformer.ATTENTION_SITES``) in the gain summary.
GAIN_KINDS = {"encoder": "encoder self", "decoder": "decoder self", "cross": "cross"}


@dataclass(frozen=True)
class Expected:
    """One run the report expects (a record may or may not exist for it)."""

    name: str
    pair: str
    system: str
    seed: int | None


@dataclass(frozen=True)
class Resampling:
    """How hard the significance tests work."""

    bootstrap_samples: int = 1000  # sacreBLEU's paired bootstrap (per seed) and the interval's resamples
    shuffles: int = 10000  # the randomization test's shuffles (MultEval's default)


def gain_summary(gains: dict[str, float]) -> dict[str, Any]:
    """Mean/min/max of the learned g overall and per kind of attention (encoder self, decoder self, cross)."""
    def stats(values: list[float]) -> dict[str, float]:
        return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}

    groups: dict[str, list[float]] = {label: [] for label in GAIN_KINDS.values()}
    for name, gain in gains.items():
        if (site := site_of(name)) is not None:
            groups[GAIN_KINDS[site[0]]].append(gain)
    return {"all": stats(list(gains.values())), **{kind: stats(v) for kind, v in groups.items() if v}}


def run_entry(expected: Expected, record: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON entry of one run: its record's figures, or ``status: missing``."""
    entry: dict[str, Any] = {"name": expected.name, "pair": expected.pair, "system": expected.system,
                             "seed": expected.seed, "status": "missing" if record is None else "recorded"}
    if record is None:
        return entry
    gains = record.get("gains")
    entry.update(
        test=record["test"], config=record.get("config"), machines=record.get("machines", []),
        training={key: record.get(key) for key in ("steps", "epoch", "train_seconds", "best_dev_bleu", "best_step")},
        dev_curve=record.get("dev_curve", []),
        gains=None if not gains else {**gains, "initial": gains["history"][0], "final": gains["history"][-1],
                                      "summary": gain_summary(gains["history"][-1])})
    return entry


def _per_seed(base: dict[str, Any], run: dict[str, Any], references: Sequence[str], n_samples: int) -> dict[str, Any]:
    test = paired_bootstrap(base["hypotheses"], run["hypotheses"], references, tokenized=True, n_samples=n_samples)
    result = {"baseline_seed": base.get("seed"), "p_value": test["p_value"], "baseline_bleu": test["baseline"]["score"],
              "system_bleu": test["system"]["score"], "n_samples": n_samples, "signature": test["signature"]}
    if result["baseline_bleu"] == result["system_bleu"]:
        # sacreBLEU counts resamples whose centred difference is > the observed one; with no difference at all none
        # is, and it returns 1/(n+1). No difference is no evidence of one: report p = 1.
        result.update(p_value=1.0, note="equal BLEU: p set to 1 (sacreBLEU gives 1/(n+1) for a zero difference)")
    return result


def group_entry(pair: str, system: str, records: list[dict[str, Any]], baseline: list[dict[str, Any]],
                references: Sequence[str] | None, tests: Resampling) -> dict[str, Any]:
    """Mean ± sd over the seeds of one pair × system, and its comparison with the baseline's seeds."""
    reference = reference_score(pair, system)
    bleu = spread([r["test"]["test_bleu_tokenized"] for r in records])
    group: dict[str, Any] = {
        "pair": pair, "system": system, "seeds": [r.get("seed") for r in records], "tokenized_bleu": bleu,
        "sacrebleu": spread([r["test"]["sacrebleu"] for r in records]),
        "best_dev_bleu": spread([r["best_dev_bleu"] for r in records if r.get("best_dev_bleu") is not None]),
        "steps": spread([r["steps"] for r in records if r.get("steps") is not None]),
        "train_seconds": spread([r["train_seconds"] for r in records if r.get("train_seconds") is not None]),
        "reference": reference,
        "difference": None if bleu["mean"] is None or reference["value"] is None else bleu["mean"] - reference["value"],
        "across_seeds": None,
    }
    comparable = (system != BASELINE and records and baseline and references is not None
                  and all(len(r["hypotheses"]) == len(references) for r in (*records, *baseline)))
    if comparable:
        assert references is not None
        base_stats = [sentence_statistics(r["hypotheses"], references) for r in baseline]
        stats = [sentence_statistics(r["hypotheses"], references) for r in records]
        group["across_seeds"] = {
            "randomization": randomization_test(base_stats, stats, n_shuffles=tests.shuffles),
            "interval": bootstrap_interval(base_stats, stats, n_resamples=tests.bootstrap_samples),
            "baseline_seeds": [r.get("seed") for r in baseline],
            "detectable": detectable_difference([r["test"]["test_bleu_tokenized"] for r in baseline], bleu["values"]),
        }
    return group


def build_results(expected: Sequence[Expected], records: dict[str, dict[str, Any]],
                  references: dict[str, list[str]], name: str, scale: str,
                  tests: Resampling = Resampling()) -> dict[str, Any]:
    """The whole report as one JSON-able tree (what ``results.json`` holds).

    Args:
        expected: the runs of the campaign, in display order (pair, then system, then seed).
        records: run name → record with its ``hypotheses`` (:func:`nmt.experiments.records.read_records`).
        references: tokenized test references of each pair (pairs without them get no significance tests).
        name: the report's name (``results/NAME``).
        scale: ``paper`` or ``cpu``.
        tests: resamples and shuffles of the significance tests.
    """
    runs = [run_entry(e, records.get(e.name)) for e in expected]
    found = {e.name: records[e.name] for e in expected if e.name in records}
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in expected:
        by_group.setdefault((e.pair, e.system), [])
        if e.name in found:
            by_group[(e.pair, e.system)].append(found[e.name])
    for run in runs:
        base = next((found[e.name] for e in expected if e.name in found and e.pair == run["pair"]
                     and e.system == BASELINE and e.seed == run["seed"]), None)
        refs = references.get(run["pair"])
        run["significance"] = (_per_seed(base, found[run["name"]], refs, tests.bootstrap_samples)
                               if run["status"] == "recorded" and run["system"] != BASELINE and base is not None
                               and refs is not None and len(base["hypotheses"]) == len(refs)
                               == len(found[run["name"]]["hypotheses"]) else None)
    groups = [group_entry(pair, system, rs, by_group.get((pair, BASELINE), []), references.get(pair), tests)
              for (pair, system), rs in by_group.items()]
    return {
        "name": name, "scale": scale, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "baseline": BASELINE,
        "qknorm_average_gain": QKNORM_AVERAGE_GAIN, "pairs": list(dict.fromkeys(e.pair for e in expected)),
        "systems": list(dict.fromkeys(e.system for e in expected)),
        "seeds": list(dict.fromkeys(e.seed for e in expected)), "tests": vars(tests), "groups": groups, "runs": runs,
    }


def write_json(results: dict[str, Any], path: Path) -> Path:
    """Write ``results`` as indented JSON."""
    atomic_write_text(path, json.dumps(results, indent=2) + "\n")
    return path
