"""``train.test_average``: the pipeline tests the average of a run's newest kept checkpoints instead of the best."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml

from nmt.checkpoint.average import average_checkpoints
from nmt.checkpoint.files import load_checkpoint
from nmt.config import load_config
from nmt.errors import NmtError
from nmt.experiments.pipeline import RunSpec, checkpoint_to_test
from tests.synthetic import tiny_config
from tests.test_translate import tiny_checkpoint


def spec_with(tmp_path: Path, **train: int) -> RunSpec:
    tree = tiny_config(tmp_path / "data", tmp_path / "unused", **train)
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    (configs / "xx-yy-cpu.yaml").write_text(yaml.safe_dump(tree), encoding="utf-8")
    return RunSpec("xx-yy", "qknorm", "cpu", device="cpu", data_dir=str(tmp_path / "data"),
                   runs_dir=str(tmp_path / "runs"), config_dir=str(configs))


def test_checkpoint_to_test_is_the_best_or_the_average_of_the_newest(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, save_every=10, test_average=2)
    spec.save_dir.mkdir(parents=True)
    for step, seed in ((10, 0), (20, 1), (30, 2)):
        tiny_checkpoint(spec.save_dir, f"checkpoint_{step}.pt", seed=seed)
    tiny_checkpoint(spec.save_dir, "checkpoint_best.pt", seed=3)
    averaged = checkpoint_to_test(spec)
    assert averaged == spec.save_dir / "checkpoint_avg.pt"
    expected = average_checkpoints([spec.save_dir / "checkpoint_30.pt", spec.save_dir / "checkpoint_20.pt"])
    for key, tensor in load_checkpoint(averaged)["model"].items():
        assert torch.equal(tensor, expected["model"][key]), key
    stamp = averaged.stat().st_mtime_ns
    assert checkpoint_to_test(spec) == averaged and averaged.stat().st_mtime_ns == stamp  # up to date: kept
    newer = spec.save_dir / "checkpoint_40.pt"
    tiny_checkpoint(spec.save_dir, newer.name, seed=4)
    os.utime(newer, ns=(stamp + 10**9, stamp + 10**9))
    checkpoint_to_test(spec)
    expected = average_checkpoints([newer, spec.save_dir / "checkpoint_30.pt"])
    for key, tensor in load_checkpoint(averaged)["model"].items():
        assert torch.equal(tensor, expected["model"][key]), key
    assert checkpoint_to_test(spec_with(tmp_path, save_every=10)) == spec.save_dir / "checkpoint_best.pt"


@pytest.mark.parametrize("train, message", [
    ({"test_average": 3}, "needs train.save_every > 0"),
    ({"test_average": 3, "save_every": 10, "keep_last": 2}, "keep_last 0 or >= 3"),
    ({"test_average": -1}, "must be >= 0"),
])
def test_test_average_needs_kept_checkpoints(tmp_path: Path, train: dict[str, int], message: str) -> None:
    spec = spec_with(tmp_path, **train)
    with pytest.raises(NmtError, match=f"'train.test_average'.*{message}"):
        load_config(spec.config_path, spec.overrides)
