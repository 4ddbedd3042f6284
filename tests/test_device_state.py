"""Resuming from a checkpoint whose tensors were loaded onto an accelerator (a stand-in device, see
``tests/fake_device.py``): RNG, optimizer and scaler state come back exactly, and the run continues bitwise equal to
an uninterrupted one."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nmt.checkpoint.files import load_checkpoint
from nmt.config import config_from_dict
from nmt.training import rng
from nmt.training.loop import train
from tests.fake_device import DeviceTensor, device_loader, on_device, strict_rng_setter
from tests.synthetic import prepare_synthetic, tiny_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("device"), {"train": 400, "dev": 8, "test": 4})


@pytest.fixture
def accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``torch.load`` returns tensors on the stand-in device; ``torch.set_rng_state`` takes host tensors only."""
    monkeypatch.setattr(torch, "load", device_loader(torch.load))
    monkeypatch.setattr(torch, "set_rng_state", strict_rng_setter(torch.set_rng_state))


def draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.random()), torch.rand(3).tolist()


def test_the_stand_in_device_refuses_host_reads() -> None:
    tensor = on_device({"x": torch.arange(4)})["x"]
    assert isinstance(tensor, DeviceTensor)
    for read in (lambda t: t.numpy(), lambda t: t.tolist(), lambda t: float(t[0])):
        with pytest.raises(TypeError, match="host"):
            read(tensor)
    assert type(tensor.cpu()) is torch.Tensor and tensor.cpu().tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError):
        strict_rng_setter(torch.set_rng_state)(on_device(torch.get_rng_state()))


def test_rng_restore_from_device_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "set_rng_state", strict_rng_setter(torch.set_rng_state))
    rng.seed_all(5)
    state = rng.capture()
    expected = draws()
    draws()
    rng.restore(on_device(state))
    assert draws() == expected


def run(data_dir: Path, save_dir: Path, resume: bool = False, **train_overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"eval_every": 10, "eval_sentences": 2, **train_overrides}
    tree = tiny_config(data_dir, save_dir, **settings)
    return train(config_from_dict(tree), resume=resume)


@pytest.mark.usefixtures("accelerator")
def test_resume_from_device_checkpoint_is_bitwise_equal(data_dir: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    run(data_dir, tmp_path / "full", max_steps=30)
    run(data_dir, tmp_path / "split", max_steps=20)
    saved = load_checkpoint(tmp_path / "split" / "checkpoint_last.pt")
    assert isinstance(saved["rng"]["torch"], DeviceTensor)  # what the trainer gets from torch.load here
    after_restore: list[torch.Tensor] = []
    real_restore = rng.restore

    def spy(state: dict[str, Any]) -> None:
        real_restore(state)
        after_restore.append(torch.get_rng_state())

    monkeypatch.setattr(rng, "restore", spy)
    run(data_dir, tmp_path / "split", resume=True, max_steps=30)
    assert len(after_restore) == 1 and torch.equal(after_restore[0], saved["rng"]["torch"].cpu())
    full = load_checkpoint(tmp_path / "full" / "checkpoint_last.pt")
    split = load_checkpoint(tmp_path / "split" / "checkpoint_last.pt")
    assert split["step"] == full["step"] == 30
    for key, value in full["model"].items():
        assert torch.equal(value.cpu(), split["model"][key].cpu()), key
    for index, state in full["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(value.cpu(), split["optimizer"]["state"][index][name].cpu()), (index, name)


def test_figures_leave_the_device_at_log_intervals(data_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each update's loss and gradient norm wait on the device; log lines still show every log_every-th update's own
    figures, also when the pending list filled up and was read just before a log step."""
    import nmt.training.updates

    monkeypatch.setattr(nmt.training.updates, "MAX_PENDING", 3)
    reads: list[int] = []
    real_settle = nmt.training.updates.Updates.settle

    def settle(self: nmt.training.updates.Updates) -> dict[str, float] | None:
        reads.append(len(self.pending))
        return real_settle(self)

    monkeypatch.setattr(nmt.training.updates.Updates, "settle", settle)
    run(data_dir, tmp_path / "run", max_steps=12, eval_every=100, log_every=6)
    lines = [line for line in (tmp_path / "run" / "train.log").read_text().splitlines() if "| loss " in line]
    assert [line.split(" | ")[0].split()[-1] for line in lines] == ["6", "12"]
    assert all(float(line.split("| loss ")[1].split()[0]) > 0 for line in lines)
    assert sum(reads) == 12 and max(reads) == 3  # every update read once, at most 3 at a time, not one by one
