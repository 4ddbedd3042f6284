"""Checkpoint averaging: identity on identical inputs, the mean on different ones, errors on mismatches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt import cli
from nmt.average import average_checkpoints
from nmt.checkpoint import load_checkpoint, save_checkpoint
from nmt.errors import NmtError
from nmt.translate import Translator
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
