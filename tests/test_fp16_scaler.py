"""fp16 with a gradient scaler, run on the CPU (torch's CPU autocast and ``GradScaler("cpu")``): the scaler's
skip-on-overflow and unscale-before-clip logic is the same as on CUDA, where ``train.precision=fp16`` runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt.checkpoint.files import load_checkpoint
from nmt.config import config_from_dict
from nmt.data.batching import collate
from nmt.machine.runtime import Runtime
from nmt.training.loop import Trainer
from tests.synthetic import prepare_synthetic, tiny_config
from tests.test_interrupt import corrupt_loss

CPU_FP16 = Runtime(torch.device("cpu"), "fp16")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("fp16"), {"train": 300, "dev": 6, "test": 4})


def overflow_at(calls: set[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss of these training batches (1-based) is infinite, as when fp16 activations overflow."""
    corrupt_loss(lambda call: call in calls, math.inf, monkeypatch)


def trainer(data_dir: Path, save_dir: Path, runtime: Runtime = CPU_FP16, dropout: float = 0.1,
            **overrides: Any) -> Trainer:
    settings: dict[str, Any] = dict(max_steps=8, eval_every=4, eval_sentences=2, log_every=1)
    settings.update(overrides)
    tree = tiny_config(data_dir, save_dir, **settings)
    tree["model"]["dropout"] = dropout
    return Trainer(config_from_dict(tree), runtime)


def test_fp16_scaler_skips_overflowing_steps_and_resumes_exactly(data_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:
        overflow_at({3, 4}, patch)
        full = trainer(data_dir, tmp_path / "full", max_steps=12)
        assert full.state.scaler.is_enabled()
        full.run(resume=False)
    with monkeypatch.context() as patch:
        overflow_at({3, 4}, patch)
        trainer(data_dir, tmp_path / "split").run(resume=False)
    resumed = trainer(data_dir, tmp_path / "split", max_steps=12)
    resumed.run(resume=True)
    a = load_checkpoint(tmp_path / "full" / "checkpoint_last.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoint_last.pt")
    assert a["progress"]["skipped_steps"] == b["progress"]["skipped_steps"] == 2
    assert a["scaler"] == b["scaler"] and a["scaler"]["scale"] == 2.0 ** 16 / 4  # halved once per skipped step
    assert all(torch.isfinite(v).all() for v in a["model"].values() if v.is_floating_point())
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    log = (tmp_path / "full" / "train.log").read_text()
    assert "2 fp16 steps skipped" in log and "error" not in log


def test_fp16_skipped_step_leaves_weights_and_adam_untouched(data_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    overflow_at({2}, monkeypatch)
    t = trainer(data_dir, tmp_path / "run")
    chunks = t.epoch_batches(1)
    t.train_step([collate(t.data.train, chunks[0])])
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    adam_steps = [float(s["step"]) for s in t.state.optimizer.state.values()]
    t.train_step([collate(t.data.train, chunks[1])])
    assert t.settle() is not None and t.progress.skipped_steps == 1 and t.progress.step == 2
    assert all(torch.equal(before[k], v) for k, v in t.model.state_dict().items())
    assert [float(s["step"]) for s in t.state.optimizer.state.values()] == adam_steps


def test_fp16_clips_the_unscaled_gradient(data_dir: Path, tmp_path: Path) -> None:
    """The gradient norm is measured (and clipped) after unscaling: it matches fp32's, not 2^16 times it."""
    norms = {}
    for name, runtime in (("fp16", CPU_FP16), ("fp32", Runtime(torch.device("cpu"), "fp32"))):
        t = trainer(data_dir, tmp_path / name, runtime, dropout=0.0, clip_norm=1e9)  # same weights, no noise
        t.train_step([collate(t.data.train, t.epoch_batches(1)[0])])
        settled = t.settle()
        assert settled is not None
        norms[name] = settled["gnorm"]
    assert norms["fp16"] == pytest.approx(norms["fp32"], rel=0.05)
