"""The reproduction report: run directories → one results tree (``results.json``) → ``results.md`` and plots.

A run directory (``runs/PAIR[-cpu]-SYSTEM/``) holds what training and testing wrote: ``metrics.jsonl`` (one record per
evaluation: step, bleu, gains, ...), ``checkpoint_last.pt`` (the final progress, read by
:func:`nmt.experiments.pipeline.training_progress`), ``test_scores.json`` and ``test.hyp`` (from
:func:`nmt.experiments.pipeline.test_run`). Anything missing is reported as missing; nothing here trains or decodes.

Each system is compared with the TwT baseline (``prenorm_fixnorm_scalenorm``) by sacreBLEU's paired bootstrap on the
tokenized test hypotheses, the papers' metric. The published number beside each result comes from
:data:`nmt.experiments.published.PUBLISHED`; QKNorm's per-pair numbers other than en-vi were not published, so for
them the report shows the TwT baseline's published number plus QKNorm's average gain, labelled ``expected``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.atomic import atomic_write_text
from nmt.errors import NmtError
from nmt.evaluate import paired_bootstrap
from nmt.experiments.published import BASELINE, QKNORM_AVERAGE_GAIN, reference_score
from nmt.hardware import MACHINE_LINE
from nmt.model import site_of

# Label of each kind of attention (``nmt.model.ATTENTION_SITES``) in the gain summary.
GAIN_KINDS = {"encoder": "encoder self", "decoder": "decoder self", "cross": "cross"}


@dataclass(frozen=True)
class RunRecord:
    """Everything one run directory says about one pair × system."""

    pair: str
    system: str
    save_dir: Path
    metrics: list[dict[str, Any]]
    test: dict[str, Any] | None
    hypotheses: list[str] | None
    progress: dict[str, Any] | None


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, OSError) as exc:
        raise NmtError(f"cannot read {path}: {exc}") from None


def read_metrics(save_dir: Path) -> list[dict[str, Any]]:
    """The evaluation records of ``save_dir/metrics.jsonl`` by step (last record wins for a repeated step)."""
    path = save_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise NmtError(f"{path} line {number}: not a JSON record") from None
        by_step[int(record["step"])] = record
    return [by_step[step] for step in sorted(by_step)]


def collect_run(pair: str, system: str, save_dir: Path,
                progress_reader: Callable[[Path], dict[str, Any] | None] | None = None) -> RunRecord:
    """Read one run directory; ``progress_reader`` (e.g. :func:`nmt.experiments.pipeline.training_progress`)
    gives its training progress."""
    progress = progress_reader(save_dir) if progress_reader is not None else None
    hyp_path = save_dir / "test.hyp"
    hypotheses = hyp_path.read_text(encoding="utf-8").split("\n")[:-1] if hyp_path.is_file() else None
    return RunRecord(pair, system, save_dir, read_metrics(save_dir), _read_json(save_dir / "test_scores.json"),
                     hypotheses, progress)


def gain_summary(gains: dict[str, float]) -> dict[str, Any]:
    """Mean/min/max of the learned g overall and per kind of attention (encoder self, decoder self, cross)."""
    def stats(values: list[float]) -> dict[str, float]:
        return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}

    groups: dict[str, list[float]] = {label: [] for label in GAIN_KINDS.values()}
    for name, gain in gains.items():
        if (site := site_of(name)) is not None:
            groups[GAIN_KINDS[site[0]]].append(gain)
    return {"all": stats(list(gains.values())), **{kind: stats(v) for kind, v in groups.items() if v}}


def run_machines(save_dir: Path) -> list[str]:
    """The machines a run trained on, in order (one per distinct ``machine:`` line that training logs at every
    (re)start in ``train.log``)."""
    log = save_dir / "train.log"
    if not log.is_file():
        return []
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    mark = " " + MACHINE_LINE  # after the log's timestamp
    return list(dict.fromkeys(line.split(mark, 1)[1] for line in lines if mark in line))


def _training(record: RunRecord) -> dict[str, Any]:
    progress = record.progress or {}
    evals = [(m["step"], m["bleu"]) for m in record.metrics if m.get("bleu") is not None]
    best = max(evals, key=lambda e: e[1]) if evals else (None, None)
    return {"steps": progress.get("step", evals[-1][0] if evals else None),
            "train_seconds": progress.get("train_seconds"), "epoch": progress.get("epoch"),
            "best_dev_bleu": progress.get("best_bleu", best[1]), "best_step": progress.get("best_step", best[0]),
            "evaluations": len(evals), "machines": run_machines(record.save_dir)}


def _gains(record: RunRecord) -> dict[str, Any] | None:
    evals = [m for m in record.metrics if m.get("gains")]
    if not evals:
        return None
    history = [m["gains"] for m in evals]
    return {"initial": history[0], "final": history[-1], "summary": gain_summary(history[-1]),
            "steps": [m["step"] for m in evals], "history": history}


def _significance(baseline: RunRecord | None, record: RunRecord, references: Sequence[str] | None,
                  n_samples: int) -> dict[str, Any] | None:
    if record.system == BASELINE or baseline is None or references is None:
        return None
    if baseline.hypotheses is None or record.hypotheses is None:
        return None
    if not len(baseline.hypotheses) == len(record.hypotheses) == len(references):
        return None
    test = paired_bootstrap(baseline.hypotheses, record.hypotheses, references, tokenized=True, n_samples=n_samples)
    result = {"p_value": test["p_value"], "baseline_bleu": test["baseline"]["score"],
              "system_bleu": test["system"]["score"], "system_ci": test["system"]["ci"], "n_samples": n_samples,
              "metric": test["metric"], "signature": test["signature"]}
    if result["baseline_bleu"] == result["system_bleu"]:
        # sacreBLEU counts resamples whose centred difference is > the observed one; with no difference at all
        # (e.g. identical outputs, or BLEU 0 on both sides) none is, and it returns 1/(n+1). No difference is
        # no evidence of one: report p = 1.
        result.update(p_value=1.0, note="equal BLEU: p set to 1 (sacreBLEU gives 1/(n+1) for a zero difference)")
    return result


def run_result(record: RunRecord, baseline: RunRecord | None, references: Sequence[str] | None,
               n_samples: int) -> dict[str, Any]:
    """The JSON entry of one run: test scores, reference number, difference, significance, training and g."""
    test = record.test
    reference = reference_score(record.pair, record.system)
    bleu = test["tokenized_bleu"] if test else None
    difference = bleu - reference["value"] if bleu is not None and reference["value"] is not None else None
    status = "tested" if test else "trained" if record.metrics else "missing"
    return {
        "pair": record.pair, "system": record.system, "save_dir": str(record.save_dir), "status": status,
        "test": None if test is None else {key: test.get(key) for key in (
            "tokenized_bleu", "sacrebleu", "sacrebleu_signature", "test_sentences", "checkpoint")},
        "reference": reference, "difference": difference,
        "significance": _significance(baseline, record, references, n_samples),
        "training": _training(record), "gains": _gains(record),
        "dev_curve": [[m["step"], m["bleu"]] for m in record.metrics if m.get("bleu") is not None],
    }


def build_results(records: Sequence[RunRecord], references: dict[str, list[str]], name: str, scale: str,
                  n_samples: int = 1000) -> dict[str, Any]:
    """The whole report as one JSON-able tree (what ``results.json`` holds).

    Args:
        records: one per pair × system, in display order.
        references: tokenized test references of each pair (missing pairs get no significance test).
        name: the report's name (``results/NAME``).
        scale: ``paper`` or ``cpu``.
        n_samples: bootstrap resamples per comparison.
    """
    by_key = {(r.pair, r.system): r for r in records}
    runs = [run_result(r, by_key.get((r.pair, BASELINE)), references.get(r.pair), n_samples) for r in records]
    return {
        "name": name, "scale": scale, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "baseline": BASELINE,
        "qknorm_average_gain": QKNORM_AVERAGE_GAIN,
        "pairs": list(dict.fromkeys(r.pair for r in records)),
        "systems": list(dict.fromkeys(r.system for r in records)),
        "runs": runs,
    }


def write_json(results: dict[str, Any], path: Path) -> Path:
    """Write ``results`` as indented JSON."""
    atomic_write_text(path, json.dumps(results, indent=2) + "\n")
    return path
