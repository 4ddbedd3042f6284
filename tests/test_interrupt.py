"""Stopping a run: SIGTERM/SIGINT save ``checkpoint_last.pt`` and exit 128+signal; a diverging run (NaN/Inf loss)
stops with one line naming the step and keeps the last good checkpoint; fp16 skips such steps instead."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import nmt.training.loop
import nmt.training.updates
from nmt import cli
from nmt.checkpoint.files import load_checkpoint
from nmt.config import config_from_dict
from tests.synthetic import prepare_synthetic, tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("synthetic"), {"train": 600, "dev": 20, "test": 10})


def write_config(path: Path, data_dir: Path, save_dir: Path, **train: Any) -> Path:
    path.write_text(yaml.safe_dump(tiny_config(data_dir, save_dir, eval_sentences=4, **train)))
    return path


def finite(checkpoint: Path) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in load_checkpoint(checkpoint)["model"].values()
               if v.is_floating_point())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_saves_checkpoint_and_resume_continues(signum: int, data_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "config.yaml", data_dir, tmp_path / "run", max_steps=5000, eval_every=5000,
                          log_every=1)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "nmt", "train", str(config)], stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    assert proc.stderr is not None
    lines: list[str] = []
    for line in proc.stderr:  # the first "step N | ..." log line: the loop is running
        lines.append(line)
        if line.startswith("step "):
            proc.send_signal(signum)
            break
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []))
    reader.start()
    code = proc.wait(timeout=120)
    reader.join()
    stderr = "".join(lines)
    assert code == 128 + signum, stderr
    assert "Traceback" not in stderr and "error" not in stderr
    stopped = [line for line in lines if line.startswith("stopped at step ")]
    assert len(stopped) == 1 and ": interrupted;" in stopped[0], stderr
    step = int(stopped[0].split()[3])
    last = tmp_path / "run" / "checkpoint_last.pt"
    assert 1 <= step < 5000 and load_checkpoint(last)["step"] == step and finite(last)
    assert not list((tmp_path / "run").glob(".*.tmp"))

    assert cli.main(["train", str(config), "--resume", "--set", f"train.max_steps={step + 3}"]) == 0
    assert load_checkpoint(last)["step"] == step + 3
    assert f"step {step}" in capsys.readouterr().err  # "resuming ... step N"


def corrupt_loss(hit: Callable[[int], bool], factor: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Multiply the training loss by ``factor`` (inf, nan) at the training batches (1-based) where ``hit`` holds, as
    when fp16 activations overflow."""
    real = nmt.training.updates.label_smoothed_nll
    seen = [0]

    def loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
             keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        seen[0] += 1
        value, nll = real(logits, target, epsilon, keep)
        return (value * factor, nll) if hit(seen[0]) else (value, nll)

    monkeypatch.setattr(nmt.training.updates, "label_smoothed_nll", loss)


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(lines) == 1, lines
    return lines[0]


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(data_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "config.yaml", data_dir, tmp_path / "run", max_steps=12, eval_every=5)
    corrupt_loss(lambda call: call >= 8, math.nan, monkeypatch)
    assert cli.main(["train", str(config)]) == 2
    last = tmp_path / "run" / "checkpoint_last.pt"
    message = one_error_line(capsys)
    assert message.startswith("error: training loss became nan at step 8;")
    assert f"{last} (step 5) is kept" in message
    assert load_checkpoint(last)["step"] == 5 and finite(last)
    assert not (tmp_path / "run" / "checkpoint_8.pt").exists()


def test_exploding_learning_rate_keeps_the_checkpoint_from_before(data_dir: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "config.yaml", data_dir, tmp_path / "run", max_steps=4, eval_every=4)
    assert cli.main(["train", str(config)]) == 0
    last = tmp_path / "run" / "checkpoint_last.pt"
    before = last.read_bytes()
    capsys.readouterr()
    # lr 1e30: the first update leaves huge weights whose dev loss is no longer finite, then the loss follows.
    resume = ["train", str(config), "--resume", "--set", "train.lr=1e30", "--set", "train.eval_every=1",
              "--set", "train.max_steps=50", "--set", "train.save_every=1"]
    assert cli.main(resume) == 2
    message = one_error_line(capsys)
    assert message.startswith("error: dev loss became nan at step 5;"), message
    assert f"{last} (step 4) is kept" in message
    assert last.read_bytes() == before and finite(last)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 with a gradient scaler needs CUDA")
def test_fp16_skips_non_finite_steps(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = nmt.training.updates.label_smoothed_nll
    seen = [0]

    def loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
             keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        seen[0] += 1
        value, nll = real(logits, target, epsilon, keep)
        return (value * math.inf, nll) if seen[0] in (3, 4) else (value, nll)

    monkeypatch.setattr(nmt.training.updates, "label_smoothed_nll", loss)
    tree = tiny_config(data_dir, tmp_path / "run", device="cuda", precision="fp16", max_steps=10, eval_every=10,
                       eval_sentences=4)
    result = nmt.training.loop.train(config_from_dict(tree))
    assert result["step"] == 10 and "max_steps" in result["reason"]
    last = tmp_path / "run" / "checkpoint_last.pt"
    assert load_checkpoint(last)["progress"]["skipped_steps"] >= 2 and finite(last)
    assert "fp16 steps skipped" in (tmp_path / "run" / "train.log").read_text()
