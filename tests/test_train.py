"""The trainer end to end on a learnable synthetic task: learning, exact resume, checkpoints, bf16, schedules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt.checkpoint.files import load_checkpoint, save_checkpoint
from nmt.config import config_from_dict
from nmt.errors import NmtError
from nmt.training.loop import train
from tests.synthetic import prepare_synthetic, tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("synthetic"))


def run(data_dir: Path, save_dir: Path, resume: bool = False, **train_overrides: Any) -> dict[str, Any]:
    return train(config_from_dict(tiny_config(data_dir, save_dir, **train_overrides)), resume=resume)


def metrics(save_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (save_dir / "metrics.jsonl").read_text().splitlines()]


def params(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def test_loss_falls_and_bleu_rises(data_dir: Path, tmp_path: Path) -> None:
    result = run(data_dir, tmp_path / "run", max_steps=300, eval_every=100)
    records = metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [100, 200, 300]
    seconds = [r["train_seconds"] for r in records]  # the curve against wall time
    assert 0 < seconds[0] < seconds[1] < seconds[2] <= result["train_seconds"] + 0.1
    assert records[-1]["dev_loss"] < records[0]["dev_loss"] - 0.3
    assert records[-1]["bleu"] > 40.0 and records[-1]["bleu"] > records[0]["bleu"] + 20
    assert result["best_bleu"] == max(r["bleu"] for r in records)
    assert len(records[-1]["gains"]) == 2 + 2 * 2  # one QKNorm g per attention module, logged at each eval
    for name in ("checkpoint_last.pt", "checkpoint_best.pt", "config.yaml", "spm.model", "train.log"):
        assert (tmp_path / "run" / name).is_file(), name
    best = torch.load(tmp_path / "run" / "checkpoint_best.pt", weights_only=True)
    assert best["progress"]["best_bleu"] == result["best_bleu"]


def test_resume_is_bitwise_equal_to_uninterrupted(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "full", max_steps=60, eval_every=20)
    run(data_dir, tmp_path / "split", max_steps=40, eval_every=20)
    log_size = (tmp_path / "split" / "train.log").stat().st_size
    run(data_dir, tmp_path / "split", resume=True, max_steps=60, eval_every=20)
    full, split = params(tmp_path / "full" / "checkpoint_last.pt"), params(tmp_path / "split" / "checkpoint_last.pt")
    assert full.keys() == split.keys()
    assert all(torch.equal(full[k], split[k]) for k in full)
    assert (tmp_path / "split" / "train.log").stat().st_size > log_size  # appended, not overwritten
    assert "resuming" in (tmp_path / "split" / "train.log").read_text()


def test_linear_decay_reaches_zero_at_the_step_budget(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "run", max_steps=20, eval_every=20, log_every=5, schedule="linear_decay", lr=1e-3,
        warmup_steps=0)
    rates = [float(line.split("| lr ")[1].split(" ")[0])
             for line in (tmp_path / "run" / "train.log").read_text().splitlines() if "| lr " in line]
    assert rates == pytest.approx([1e-3 * (1 - (s - 1) / 20) for s in (5, 10, 15, 20)], rel=1e-3)


def test_existing_run_needs_resume(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "run", max_steps=5, eval_every=5)
    with pytest.raises(NmtError, match="already holds a run"):
        run(data_dir, tmp_path / "run", max_steps=10, eval_every=5)


def test_resume_rejects_another_architecture(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "run", max_steps=5, eval_every=5)
    tree = tiny_config(data_dir, tmp_path / "run", max_steps=10)
    tree["model"]["d_model"] = 64
    with pytest.raises(NmtError, match="model.d_model"):
        train(config_from_dict(tree), resume=True)


def test_bf16_on_cpu_trains(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "run", max_steps=100, eval_every=50, precision="bf16")
    records = metrics(tmp_path / "run")
    assert records[-1]["dev_loss"] < records[0]["dev_loss"]
    assert all(v.dtype == torch.float32 for v in params(tmp_path / "run" / "checkpoint_last.pt").values()
               if v.is_floating_point())


def test_plateau_decay_stops_training(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Dev BLEU scripted to fall at every evaluation: each one after the first is below the previous (patience 1),
    # so the rate halves at steps 4, 6, 8 and training stops at step 8 (1e-9 / 8 < stop_lr), long before max_steps.
    falling = iter(range(100, 0, -1))
    monkeypatch.setattr("nmt.training.validation.tokenized_bleu", lambda hyps, refs: float(next(falling)))
    result = run(data_dir, tmp_path / "run", max_steps=1000, eval_every=2, schedule="warmup_plateau", lr=1e-9,
                 warmup_steps=1, patience=1, decay=0.5, stop_lr=2e-10, eval_sentences=4)
    assert "stop_lr" in result["reason"] and result["step"] == 8
    assert [r["lr_decayed"] for r in metrics(tmp_path / "run")] == [False, True, True, True]


def test_flat_bleu_never_decays(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Equal dev BLEU (e.g. 0.0 early in training) is not a plateau for the official rule: no decay, no early stop.
    monkeypatch.setattr("nmt.training.validation.tokenized_bleu", lambda hyps, refs: 0.0)
    result = run(data_dir, tmp_path / "run", max_steps=12, eval_every=2, schedule="warmup_plateau", lr=1e-9,
                 warmup_steps=1, patience=1, decay=0.5, stop_lr=2e-10, eval_sentences=4)
    assert "max_steps" in result["reason"] and result["step"] == 12
    assert not any(r["lr_decayed"] for r in metrics(tmp_path / "run"))


def test_update_freq_accumulates(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "run", max_steps=4, eval_every=4, update_freq=3, log_every=1)
    assert "step 4 | epoch 1" in (tmp_path / "run" / "train.log").read_text()


def test_checkpoint_is_weights_only_and_write_is_atomic(data_dir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    run(data_dir, tmp_path / "run", max_steps=5, eval_every=5)
    path = tmp_path / "run" / "checkpoint_last.pt"
    payload = torch.load(path, weights_only=True)
    assert {"model", "optimizer", "scheduler", "scaler", "rng", "progress", "config", "spm"} <= payload.keys()
    before = path.read_bytes()

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        save_checkpoint(path, {"model": {}, "config": {}})
    assert path.read_bytes() == before and load_checkpoint(path)["step"] == 5
    assert not list((tmp_path / "run").glob("*.tmp"))


def test_torchrun_two_processes_gloo(data_dir: Path, tmp_path: Path) -> None:
    import yaml

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config(data_dir, tmp_path / "run", max_steps=6, eval_every=3)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "nmt", "train", str(config)], capture_output=True, text=True, env=env, timeout=300,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint*.pt")) == ["checkpoint_best.pt",
                                                                                 "checkpoint_last.pt"]
    assert load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["step"] == 6
    assert result.stderr.count("training qknorm") == 1  # only rank 0 logs
