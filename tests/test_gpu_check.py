"""``scripts/gpu_check``: one line and exit 2 without CUDA; the whole check as a CPU dry run on a synthetic corpus;
the FLOP count against its closed form; the report and the measured-GPU estimate ``make train`` prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt.config import ModelConfig
from nmt.gpucheck.report import measured_gpu_hours, render
from nmt.gpucheck.throughput import peak_tflops, sentence_flops
from tests.synthetic import prepare_synthetic

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check"


def run_check(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")
def test_without_cuda_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_check("--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: scripts/gpu_check needs CUDA")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_dry_run_on_cpu_passes_every_phase(tmp_path: Path) -> None:
    data = prepare_synthetic(tmp_path / "synthetic", {"train": 400, "dev": 10, "test": 10}) / "xx-yy"
    out = tmp_path / "out"
    done = run_check("--dry-run", "--out", str(out), "--data", str(data), "--pair", "xx-yy", "--work",
                     str(tmp_path / "work"), "--minutes", "14")
    report = json.loads((out / "gpu_check.json").read_text())
    phases = report["phases"]
    assert done.returncode == 0, (done.stderr[-2000:], {k: v.get("summary") for k, v in phases.items()})
    assert list(phases) == ["env", "tests", "resume", "torchrun", "throughput", "glen"]
    assert all(p["status"] == "pass" for p in phases.values())
    assert phases["resume"]["bitwise"] and len(phases["resume"]["kills"]) == 2  # deterministic on the CPU
    assert phases["torchrun"]["nproc1"]["ok"] and phases["torchrun"]["nproc2"]["ok"]
    assert phases["throughput"]["runs"]["bf16"]["src_tgt_tokens_per_s"] > 0
    assert phases["glen"]["updates"] > 0 and 0 <= phases["glen"]["test_bleu_tokenized"] <= 100
    assert phases["glen"]["extrapolated_hours"] > 0 and phases["glen"]["dev_bleu_curve"]
    markdown = (out / "gpu_check.md").read_text()
    assert "dry run on the CPU" in markdown and "| glen | pass |" in markdown
    assert measured_gpu_hours(100, out / "gpu_check.json") is None  # a dry run is no GPU measurement


def test_flops_closed_form() -> None:
    """One encoder and one decoder layer, d=4, d_ff=8, vocab 10, one sentence of 2 source and 3 target tokens."""
    m = ModelConfig(enc_layers=1, dec_layers=1, d_model=4, d_ff=8, n_heads=2)
    src, tgt = np.array([2]), np.array([3])
    encoder = 2 * (4 * 16 + 2 * 4 * 8) + 2 * 2 * 2 * 4  # linear + scores/weighted sums over 2 x 2 pairs
    decoder = 3 * (4 * 16 + 2 * 16 + 2 * 4 * 8) + 2 * 2 * 16 + 3 * 3 * 4 + 2 * 3 * 2 * 4
    output = 3 * 4 * 10
    assert sentence_flops(m, 10, src, tgt) == 2 * (encoder + decoder + output)


def test_peak_table() -> None:
    assert peak_tflops("NVIDIA H200") == {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7}
    assert peak_tflops("NVIDIA H100 PCIe")["bf16"] == 756.0  # type: ignore[index]
    assert peak_tflops("Some Future GPU") is None


def test_partial_report_and_measured_estimate(tmp_path: Path) -> None:
    report = {"started": "2026-12-01 10:00:00 UTC", "dry_run": False, "minutes": 8, "seconds": 60,
              "data": {"data_dir": "data", "pair": "gl-en"},
              "phases": {"env": {"status": "pass", "summary": "NVIDIA H200", "gpu": "NVIDIA H200", "seconds": 3},
                         "glen": {"status": "pass", "summary": "trained", "seconds_per_update": 0.09}}}
    text = render(report)
    assert "(in progress)" in text and "| env | pass | 3 | NVIDIA H200 |" in text
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps(report))
    assert measured_gpu_hours(40000, path) == ("about 1.0 hours on an NVIDIA H200 (measured 2026-12-01 by "
                                               "scripts/gpu_check)")
    assert measured_gpu_hours(40000, tmp_path / "missing.json") is None
