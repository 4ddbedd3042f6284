"""``gpu_check.md`` and ``gpu_check.json``: the check's report, rewritten after every phase; and the measured GPU
figures read back by ``make train`` for its time estimate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nmt.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "docs" / "gpu_check.json"  # a GPU run's gpu_check.json, copied here with docs/gpu.md


def _throughput_table(result: dict[str, Any]) -> list[str]:
    lines = ["", "| precision | max_tokens | src+tgt tokens/s | tgt tokens/s | updates/s | TFLOP/s | MFU | peak GiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows = [*result.get("runs", {}).values()] + ([result["largest_batch"]] if result.get("largest_batch") else [])
    for r in rows:
        mfu = f"{100 * r['mfu']:.1f}%" if "mfu" in r else "-"
        memory = f"{r['peak_memory_gib']:.1f}" if "peak_memory_gib" in r else "-"
        lines.append(f"| {r['precision']} | {r['max_tokens']} | {r['src_tgt_tokens_per_s']:,.0f} | "
                     f"{r['tgt_tokens_per_s']:,.0f} | {r['updates_per_s']:.2f} | {r['tflops_per_s']:.3g} | {mfu} | "
                     f"{memory} |")
    return lines


def _details(name: str, result: dict[str, Any]) -> list[str]:
    if name == "tests" and result.get("tests"):
        return ["", *[f"- `{test}`: {outcome}" for test, outcome in sorted(result["tests"].items())]]
    if name == "throughput" and result.get("runs"):
        return _throughput_table(result)
    if name == "glen" and "dev_bleu_curve" in result:
        curve = ", ".join(f"{step}: {bleu}" for step, bleu in result["dev_bleu_curve"])
        return ["", f"- dev BLEU by update: {curve}",
                f"- test: {result['test_sentences']} sentences in {result['decode_seconds']:.1f} s, BLEU "
                f"{result['test_bleu_tokenized']:.2f} tokenized, sacreBLEU {result['test_sacrebleu']} (paper: "
                f"{result.get('paper_test_bleu')})",
                f"- {result['seconds_per_update']:.3f} s/update with evaluations; {result['updates_per_epoch']} "
                f"updates/epoch; stop rule assumed after {result['assumed_updates']} updates: about "
                f"{result['extrapolated_hours']:.1f} hours"]
    if name == "env":
        keys = ("gpu", "capability", "memory_gib", "nvidia_smi", "torch", "cuda", "cudnn", "nccl", "python",
                "sacremoses", "peak_tflops")
        return ["", *[f"- {k}: {result[k]}" for k in keys if k in result]]
    return []


def render(report: dict[str, Any]) -> str:
    kind = "dry run on the CPU (tiny model, reduced budgets)" if report.get("dry_run") else "GPU run"
    gpu = report["phases"].get("env", {}).get("gpu") or "no GPU"
    lines = [f"# gpu_check: {kind}", "",
             f"Started {report['started']}, {report.get('seconds', 0):.0f} s so far of a {report['minutes']:g}-minute "
             f"budget" + (f", finished {report['finished']}" if "finished" in report else " (in progress)")
             + f"; {gpu}; data {report.get('data', {}).get('data_dir')} ({report.get('data', {}).get('pair')}).", "",
             "| phase | status | seconds | summary |", "|---|---|---:|---|"]
    for name, result in report["phases"].items():
        lines.append(f"| {name} | {result['status']} | {result.get('seconds', 0):.0f} | "
                     f"{str(result.get('summary', '')).replace('|', '/')} |")
    for name, result in report["phases"].items():
        extra = _details(name, result)
        if extra:
            lines += ["", f"## {name}", *extra]
    return "\n".join(lines) + "\n"


def write_report(out: Path, report: dict[str, Any]) -> None:
    """Write ``gpu_check.json`` and ``gpu_check.md`` into ``out`` (atomically: a kill leaves the previous ones)."""
    atomic_write_text(out / "gpu_check.json", json.dumps(report, indent=2, default=str) + "\n")
    atomic_write_text(out / "gpu_check.md", render(report))


def measured_gpu_hours(assumed_updates: int, path: Path = MEASURED) -> str | None:
    """The paper run's hours at the seconds per update a GPU run of ``scripts/gpu_check`` measured on gl-en, as a
    phrase ("about 3.2 hours on an NVIDIA H200 (measured 2026-12-01)"), or None when no GPU run is recorded."""
    if not path.is_file():
        return None
    report = json.loads(path.read_text(encoding="utf-8"))
    glen = report.get("phases", {}).get("glen", {})
    if report.get("dry_run") or "seconds_per_update" not in glen:
        return None
    gpu = report["phases"].get("env", {}).get("gpu", "the GPU")
    hours = assumed_updates * glen["seconds_per_update"] / 3600
    return f"about {hours:.1f} hours on an {gpu} (measured {report['started'][:10]} by scripts/gpu_check)"
