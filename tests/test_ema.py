"""train.ema_decay: the moving average of the weights against a hand-computed one, validation and checkpoints of the
average, bitwise resume, training untouched by it, DDP agreement, config errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt.checkpoint.files import load_checkpoint
from nmt.config import config_from_dict
from nmt.errors import NmtError
from nmt.training.ema import WeightAverage
from nmt.training.loop import train
from tests.synthetic import prepare_synthetic, tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("synthetic"))


def run(data_dir: Path, save_dir: Path, resume: bool = False, **overrides: Any) -> dict[str, Any]:
    return train(config_from_dict(tiny_config(data_dir, save_dir, **overrides)), resume=resume)


def model_of(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def test_average_of_a_module_follows_the_formula() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    layer.weight.data = layer.weight.data.to(torch.bfloat16)  # a low-precision weight: the average stays fp32
    average = WeightAverage(layer, decay=0.75, start=1)
    expected = {n: p.detach().double().clone() for n, p in layer.named_parameters()}
    for step in range(1, 6):
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(torch.randn_like(p))
        average.update(step)
        for n, p in layer.named_parameters():
            w = p.detach().double()
            expected[n] = w.clone() if step <= 1 else 0.75 * expected[n] + 0.25 * w
    state = average.state_dict()
    assert all(t.dtype == torch.float32 for t in state.values())
    for n in expected:
        assert torch.allclose(state[n].double(), expected[n], atol=1e-6), n
    weights = {n: p.detach().clone() for n, p in layer.named_parameters()}
    with average.swapped_in():
        assert torch.allclose(layer.bias.detach().double(), expected["bias"], atol=1e-6)
    assert all(torch.equal(p, weights[n]) for n, p in layer.named_parameters())  # the weights come back bitwise
    assert average.model_state(layer)["weight"].dtype == torch.bfloat16


def test_tied_weights_are_averaged_once_and_written_under_every_name() -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(2, 2, bias=False)
            self.b = torch.nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight

    model = Tied()
    average = WeightAverage(model, decay=0.5)
    assert average.names == ["a.weight"]
    with torch.no_grad():
        model.a.weight.fill_(2.0)
    average.update(1)
    state = average.model_state(model)
    assert torch.equal(state["a.weight"], state["b.weight"]) and torch.equal(state["a.weight"], average.shadow[0])
    assert torch.allclose(average.shadow[0], torch.full((2, 2), 2.0)) or not torch.equal(average.shadow[0],
                                                                                         model.a.weight.detach())


def test_training_average_equals_hand_computed_from_every_step(data_dir: Path, tmp_path: Path) -> None:
    decay, steps = 0.8, 8
    run(data_dir, tmp_path / "run", max_steps=steps, eval_every=steps, save_every=1, ema_decay=decay, ema_start=1)
    last = load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")
    expected = {name: model_of(tmp_path / "run" / "checkpoint_1.pt")[name].double() for name in last["ema"]}
    for step in range(2, steps + 1):  # ema_start 1: a copy after update 1, then the moving average
        weights = model_of(tmp_path / "run" / f"checkpoint_{step}.pt")
        expected = {name: decay * e + (1 - decay) * weights[name].double() for name, e in expected.items()}
    averaged = model_of(tmp_path / "run" / "checkpoint_ema.pt")
    assert len(last["ema"]) > 10 and set(last["ema"]) <= set(averaged)
    for name, value in last["ema"].items():
        assert value.dtype == torch.float32
        assert torch.allclose(value.double(), expected[name], atol=1e-6), name
        assert torch.equal(averaged[name], value.to(averaged[name].dtype)), name
    assert any(not torch.equal(last["ema"][k], last["model"][k]) for k in last["ema"])
    for name, value in averaged.items():  # buffers come from the model
        if name not in last["ema"]:
            assert torch.equal(value, last["model"][name]), name
    # validation scored the average, and the best checkpoint (the only evaluation here) holds it, not resumable
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["weights"] for r in records] == ["ema"]
    best = load_checkpoint(tmp_path / "run" / "checkpoint_best.pt")
    assert all(torch.equal(best["model"][k], averaged[k]) for k in averaged)
    assert "optimizer" not in best and best["ema_decay"] == decay


def test_validation_of_the_average_leaves_training_bitwise_unchanged(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "plain", max_steps=30, eval_every=10)
    run(data_dir, tmp_path / "ema", max_steps=30, eval_every=10, ema_decay=0.9)
    plain, ema = model_of(tmp_path / "plain" / "checkpoint_last.pt"), model_of(tmp_path / "ema" / "checkpoint_last.pt")
    assert all(torch.equal(plain[k], ema[k]) for k in plain)
    averaged = model_of(tmp_path / "ema" / "checkpoint_ema.pt")
    assert any(not torch.equal(averaged[k], ema[k]) for k in ema)  # the average is not the weights


def test_resume_continues_the_average_bitwise(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "full", max_steps=40, eval_every=20, ema_decay=0.9)
    run(data_dir, tmp_path / "split", max_steps=20, eval_every=20, ema_decay=0.9)
    run(data_dir, tmp_path / "split", resume=True, max_steps=40, eval_every=20, ema_decay=0.9)
    full = load_checkpoint(tmp_path / "full" / "checkpoint_last.pt")["ema"]
    split = load_checkpoint(tmp_path / "split" / "checkpoint_last.pt")["ema"]
    assert full.keys() == split.keys() and all(torch.equal(full[k], split[k]) for k in full)
    a, b = model_of(tmp_path / "full" / "checkpoint_best.pt"), model_of(tmp_path / "split" / "checkpoint_best.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_without_average_resumed_with_one_starts_it_from_the_weights(data_dir: Path, tmp_path: Path) -> None:
    run(data_dir, tmp_path / "run", max_steps=10, eval_every=10)
    run(data_dir, tmp_path / "run", resume=True, max_steps=11, eval_every=10, ema_decay=0.5)
    last = load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")
    ten = model_of(tmp_path / "run" / "checkpoint_ema.pt")
    assert set(last["ema"]) and all(torch.allclose(last["ema"][k], ten[k].float()) for k in last["ema"])


@pytest.mark.parametrize(("key", "value"), [("ema_decay", 1.0), ("ema_decay", -0.1), ("ema_start", -1)])
def test_bad_settings_name_the_key(data_dir: Path, tmp_path: Path, key: str, value: float) -> None:
    with pytest.raises(NmtError, match=f"train.{key}"):
        config_from_dict(tiny_config(data_dir, tmp_path / "run", **{key: value}))


def test_ddp_ranks_hold_the_same_average(data_dir: Path, tmp_path: Path) -> None:
    import yaml

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config(data_dir, tmp_path / "run", max_steps=6, eval_every=3,
                                                 ema_decay=0.9)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "nmt", "train", str(config)], capture_output=True, text=True, env=env, timeout=300,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    last = load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")
    assert last["step"] == 6 and set(last["ema"])
    assert (tmp_path / "run" / "checkpoint_ema.pt").is_file()


def test_ranks_that_disagree_are_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    from nmt.training import ema

    average = WeightAverage(torch.nn.Linear(2, 2), decay=0.5)

    def fake_gather(out: list[object], mine: object) -> None:
        out[0], out[1] = mine, [0.0, 0.0]

    monkeypatch.setattr(dist, "all_gather_object", fake_gather)
    with pytest.raises(NmtError, match="rank 1 differs"):
        ema.check_equal_across_ranks(average, world_size=2, rank=0)
