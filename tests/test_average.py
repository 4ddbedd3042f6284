"""Checkpoint averaging: identity on identical inputs, the mean on different ones, errors on mismatches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt import cli
from nmt.checkpoint.average import average_checkpoints, last_checkpoints
from nmt.checkpoint.files import load_checkpoint, save_checkpoint
from nmt.errors import NmtError
from nmt.inference.translator import Translator
from tests.test_translate import tiny_checkpoint


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """``nmt.cli.main`` as the console script runs it."""
    return cli.main(argv)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("avg")
    first = tiny_checkpoint(directory, "a.pt", seed=0)
    payload = load_checkpoint(first)
    payload["optimizer"] = {"state": {}, "param_groups": []}  # training state that averaging must drop
    save_checkpoint(first, {k: v for k, v in payload.items() if k != "format_version"})
    return {"a": first, "b": tiny_checkpoint(directory, "b.pt", seed=1),
            "wide": tiny_checkpoint(directory, "wide.pt", d_ff=64),
            "post": tiny_checkpoint(directory, "post.pt", norm_position="post"),
            "dropout": tiny_checkpoint(directory, "dropout.pt", seed=1, dropout=0.1)}


def test_average_of_identical_checkpoints_is_identity(checkpoints: dict[str, Path]) -> None:
    averaged = average_checkpoints([checkpoints["a"], checkpoints["a"]])
    original = load_checkpoint(checkpoints["a"])
    assert averaged["model"].keys() == original["model"].keys()
    for key, tensor in original["model"].items():
        assert torch.equal(averaged["model"][key], tensor), key
        assert averaged["model"][key].dtype == tensor.dtype
    assert "optimizer" not in averaged and averaged["config"] == original["config"]


def test_average_is_the_mean(checkpoints: dict[str, Path]) -> None:
    a, b = load_checkpoint(checkpoints["a"])["model"], load_checkpoint(checkpoints["b"])["model"]
    averaged = average_checkpoints([checkpoints["a"], checkpoints["b"], checkpoints["dropout"]])["model"]
    for key in a:
        if torch.is_floating_point(a[key]):
            assert torch.allclose(averaged[key], (a[key] + 2 * b[key]) / 3, atol=1e-6), key


@pytest.mark.parametrize("other, message", [("wide", "model.d_ff"), ("post", "model.norm_position")])
def test_mismatched_architectures_are_an_error(checkpoints: dict[str, Path], other: str, message: str) -> None:
    with pytest.raises(NmtError, match=message):
        average_checkpoints([checkpoints["a"], checkpoints[other]])


def test_cli_output_loads_in_translate(checkpoints: dict[str, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "avg.pt"
    assert run_cli(["average", str(checkpoints["a"]), str(checkpoints["b"]), "--output", str(out)], monkeypatch) == 0
    assert "averaged 2 checkpoints" in capsys.readouterr().err
    translator = Translator.from_checkpoint(out, device="cpu")
    assert len(translator.translate(["the cat sat .", ""], beam=2)) == 2
    assert run_cli(["average", str(checkpoints["a"]), str(checkpoints["wide"]), "--output", str(out)],
                   monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "d_ff" in err
    assert run_cli(["average", str(tmp_path / "missing.pt"), "--output", str(out)], monkeypatch) == 2


@pytest.fixture()
def run_dir(checkpoints: dict[str, Path], tmp_path: Path) -> Path:
    """A run directory as train.save_every leaves it: numbered checkpoints beside best, last and stray names."""
    for step, name in ((100, "a"), (200, "b"), (300, "dropout"), (1000, "a")):
        (tmp_path / f"checkpoint_{step}.pt").write_bytes(checkpoints[name].read_bytes())
    for stray in ("checkpoint_best.pt", "checkpoint_last.pt", "checkpoint_7_x.pt", "checkpoint_20.pt.tmp"):
        (tmp_path / stray).write_bytes(checkpoints["a"].read_bytes())
    return tmp_path


def test_last_checkpoints_are_the_newest_by_step(run_dir: Path) -> None:
    names = [path.name for path in last_checkpoints(run_dir, 2)]
    assert names == ["checkpoint_1000.pt", "checkpoint_300.pt"]  # by step, not by name (1000 sorts before 300)
    assert [p.name for p in last_checkpoints(run_dir, 2, upper_bound=250)] == ["checkpoint_200.pt", "checkpoint_100.pt"]
    assert [p.name for p in last_checkpoints(run_dir, 1, upper_bound=300)] == ["checkpoint_300.pt"]
    with pytest.raises(NmtError, match="2 checkpoint_<step>.pt files at or before step 250, need 3"):
        last_checkpoints(run_dir, 3, upper_bound=250)
    with pytest.raises(NmtError, match="at least 1"):
        last_checkpoints(run_dir, 0)
    with pytest.raises(NmtError, match="not a directory"):
        last_checkpoints(run_dir / "checkpoint_100.pt", 1)


def test_cli_num_update_checkpoints_averages_the_newest(run_dir: Path, checkpoints: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "avg.pt"
    argv = ["average", str(run_dir), "--num-update-checkpoints", "2", "--checkpoint-upper-bound", "300"]
    assert run_cli(argv + ["--output", str(out)], monkeypatch) == 0
    assert "(checkpoint_300.pt, checkpoint_200.pt)" in capsys.readouterr().err
    expected = average_checkpoints([checkpoints["dropout"], checkpoints["b"]])["model"]
    for key, tensor in load_checkpoint(out)["model"].items():
        assert torch.allclose(tensor, expected[key], atol=1e-6), key
    for bad, message in ((["average", str(run_dir), str(run_dir), "--num-update-checkpoints", "2"], "one run dir"),
                         (["average", str(run_dir), "--checkpoint-upper-bound", "300"], "needs --num-update"),
                         (["average", str(run_dir), "--num-update-checkpoints", "9"], "need 9")):
        assert run_cli(bad + ["--output", str(out)], monkeypatch) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
