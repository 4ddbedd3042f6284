"""``nmt attention``: heatmaps of a tiny random checkpoint through the real CLI; layer/head selection and errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt.errors import NmtError
from nmt.experiments.attention_plot import select
from tests.test_translate import run_cli, tiny_checkpoint

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SENTENCE = "the cat sat on the mat ."


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("attn")
    return (tiny_checkpoint(directory, "base.pt", seed=0, attention="scaled_dot"),
            tiny_checkpoint(directory, "qk.pt", seed=1, attention="qknorm"))


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


def test_one_checkpoint_writes_png(checkpoints: tuple[Path, Path], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cross.png"
    code = run_cli(["attention", "--checkpoint", str(checkpoints[0]), "--src", SENTENCE, "--output", str(out),
                    "--device", "cpu", "--pretokenized"], monkeypatch)
    assert code == 0
    assert is_png(out)
    assert "cross layer 1, mean of heads" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_two_checkpoints_side_by_side(checkpoints: tuple[Path, Path], tmp_path: Path, kind: str,
                                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"{kind}.png"
    code = run_cli(["attention", "--checkpoint", str(checkpoints[0]), "--checkpoint", str(checkpoints[1]),
                    "--src", SENTENCE, "--kind", kind, "--layer", "0", "--head", "1", "--output", str(out),
                    "--device", "cpu"], monkeypatch)
    assert code == 0
    assert is_png(out)
    printed = capsys.readouterr().out
    assert printed.count(f"{kind} layer 0, head 1") == 2
    assert printed.count("QKNorm g = ") == 1  # only the QKNorm panel has a gain


@pytest.mark.parametrize(("option", "value", "message"), [("--layer", "5", "--layer 5 is out of range"),
                                                           ("--head", "2", "--head 2 is out of range")])
def test_bad_index_is_one_line_error(checkpoints: tuple[Path, Path], tmp_path: Path, option: str, value: str,
                                     message: str, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bad.png"
    code = run_cli(["attention", "--checkpoint", str(checkpoints[0]), "--src", SENTENCE, option, value,
                    "--output", str(out), "--device", "cpu"], monkeypatch)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_missing_checkpoint_is_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["attention", "--checkpoint", str(tmp_path / "none.pt"), "--src", SENTENCE,
                    "--output", str(tmp_path / "x.png")], monkeypatch)
    err = capsys.readouterr().err
    assert code == 2 and "checkpoint not found" in err and err.count("\n") == 1


def test_select_layers_heads_and_mean() -> None:
    maps = {"encoder": [torch.rand(1, 2, 3, 3) for _ in range(3)], "decoder": [], "cross": []}
    weights, index = select(maps, "encoder", None, None)
    assert index == 2
    assert torch.allclose(torch.from_numpy(weights), maps["encoder"][2][0].mean(0))
    weights, index = select(maps, "encoder", -3, 1)
    assert index == 0
    assert torch.equal(torch.from_numpy(weights), maps["encoder"][0][0, 1])
    with pytest.raises(NmtError, match="out of range"):
        select(maps, "encoder", 3, None)
