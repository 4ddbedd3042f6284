"""Run records: what a finished run leaves behind that outlives its machine.

When a run of ``scripts/reproduce`` has been trained and tested, :func:`write_record` writes
``RESULTS/NAME/runs/PAIR-SYSTEM-sSEED/`` with two small text files, meant to be committed:

- ``record.json``: pair, system, seed, scale, the resolved config, the machines it trained on, steps, training time,
  the dev-BLEU curve (by step, and the wall time trained at each point), the learned QKNorm g at every evaluation,
  the test scores (``test_bleu_tokenized``, the papers' metric, and sacreBLEU with its signature) and the SHA-256 of
  the references and of the hypotheses;
- ``test.hyp``: the tokenized test hypotheses, one per test sentence.

The report (:mod:`nmt.experiments.report`) is built from these records alone, so it can be rebuilt after the run
directories (checkpoints) are gone, on another machine.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nmt.atomic import atomic_write_text
from nmt.errors import NmtError

RECORD = "record.json"
HYPOTHESES = "test.hyp"
FORMAT = 1


def lines_digest(lines: Sequence[str]) -> str:
    """SHA-256 of ``lines`` written one per line (LF, final newline): identifies a hypothesis or reference file."""
    return hashlib.sha256("".join(line + "\n" for line in lines).encode("utf-8")).hexdigest()


def record_dir(results_dir: Path, name: str) -> Path:
    """``results_dir/runs/NAME``, the folder of one run's record."""
    return results_dir / "runs" / name


def has_record(results_dir: Path, name: str) -> bool:
    """Whether the run ``name`` has its record (and hypotheses) under ``results_dir``."""
    folder = record_dir(results_dir, name)
    return (folder / RECORD).is_file() and (folder / HYPOTHESES).is_file()


def write_record(results_dir: Path, record: dict[str, Any], hypotheses: Sequence[str]) -> Path:
    """Write ``record.json`` and ``test.hyp`` for ``record["name"]``; the hypotheses first, so a record never
    names hypotheses that are not there. Returns the record's folder."""
    folder = record_dir(results_dir, record["name"])
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / HYPOTHESES, "".join(line + "\n" for line in hypotheses))
    full = {"format": FORMAT, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **record,
            "hypotheses_sha256": lines_digest(hypotheses), "test_sentences": len(hypotheses)}
    atomic_write_text(folder / RECORD, json.dumps(full, indent=2) + "\n")
    return folder


def read_record(folder: Path) -> dict[str, Any]:
    """One record with its hypotheses under ``"hypotheses"``; a damaged record is a one-line :class:`NmtError`
    naming the file (unreadable JSON, missing hypotheses, hypotheses that are not the ones recorded)."""
    path = folder / RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise NmtError(f"cannot read run record {path}: {exc}") from None
    if not isinstance(record, dict) or not {"name", "pair", "system", "test"} <= record.keys():
        raise NmtError(f"{path}: not a run record (needs name, pair, system and test)")
    hyp_path = folder / HYPOTHESES
    try:
        text = hyp_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NmtError(f"cannot read the hypotheses of {path}: {hyp_path}: {exc}") from None
    hypotheses = text.split("\n")[:-1] if text else []
    if lines_digest(hypotheses) != record.get("hypotheses_sha256"):
        raise NmtError(f"{hyp_path}: its {len(hypotheses)} lines are not the hypotheses {path} records "
                       f"({record.get('test_sentences')} lines, sha256 {str(record.get('hypotheses_sha256'))[:12]}…)")
    return {**record, "hypotheses": hypotheses}


def read_records(results_dir: Path) -> dict[str, dict[str, Any]]:
    """Every record under ``results_dir/runs/``, by run name."""
    root = results_dir / "runs"
    if not root.is_dir():
        return {}
    records = {}
    for folder in sorted(p for p in root.iterdir() if (p / RECORD).is_file()):
        record = read_record(folder)
        records[record["name"]] = record
    return records


def check_references(record: dict[str, Any], references: Sequence[str], source: Path) -> None:
    """Raise unless ``references`` (read from ``source``) are the test references the record was scored on."""
    expected = record.get("references_sha256")
    if expected is not None and lines_digest(references) != expected:
        raise NmtError(f"{source}: not the test references run {record['name']} was scored on "
                       f"(sha256 {lines_digest(references)[:12]}…, record says {expected[:12]}…)")


# ---- reading a run directory (what training and testing wrote) into a record ----

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


def run_machines(save_dir: Path) -> list[str]:
    """The machines a run trained on, in order (one per distinct ``machine:`` line that training logs at every
    (re)start in ``train.log``)."""
    from nmt.machine.hardware import MACHINE_LINE

    log = save_dir / "train.log"
    if not log.is_file():
        return []
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    mark = " " + MACHINE_LINE  # after the log's timestamp
    return list(dict.fromkeys(line.split(mark, 1)[1] for line in lines if mark in line))


def record_from_run(save_dir: Path, fields: dict[str, Any], progress: dict[str, Any] | None,
                    test: dict[str, Any], references: Sequence[str]) -> dict[str, Any]:
    """The record of a trained and tested run directory.

    Args:
        save_dir: the run directory (``metrics.jsonl``, ``train.log``).
        fields: ``name``, ``pair``, ``system``, ``seed``, ``scale`` and ``config`` (the resolved config).
        progress: the final training progress (``checkpoint_last.pt``'s, without its history).
        test: the test scores (:func:`nmt.experiments.pipeline.test_run`).
        references: the test references the hypotheses were scored against.
    """
    progress = progress or {}
    metrics = read_metrics(save_dir)
    evals = [m for m in metrics if m.get("bleu") is not None]
    best = max(evals, key=lambda m: m["bleu"]) if evals else {}
    with_gains = [m for m in metrics if m.get("gains")]
    return {
        **fields,
        "machines": run_machines(save_dir),
        "steps": progress.get("step", evals[-1]["step"] if evals else None),
        "epoch": progress.get("epoch"), "train_seconds": progress.get("train_seconds"),
        "best_dev_bleu": progress.get("best_bleu", best.get("bleu")),
        "best_step": progress.get("best_step", best.get("step")),
        "dev_curve": [[m["step"], m["bleu"]] for m in evals],
        "dev_curve_seconds": [m.get("train_seconds") for m in evals],  # wall time at each point (None: older runs)
        "gains": {"steps": [m["step"] for m in with_gains], "history": [m["gains"] for m in with_gains]}
        if with_gains else None,
        "test": {"test_bleu_tokenized": test["tokenized_bleu"], "sacrebleu": test["sacrebleu"],
                 "sacrebleu_signature": test["sacrebleu_signature"],
                 "tokenized_signature": test.get("tokenized_signature"),
                 "decode_seconds": test.get("decode_seconds")},
        "references_sha256": lines_digest(references),
    }
