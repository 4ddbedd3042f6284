"""Files from elsewhere never run code: checkpoints load with ``torch.load(weights_only=True)``, binarized arrays
with ``allow_pickle=False``, configs with ``yaml.safe_load``. Each hostile file below would run its payload (touch a
marker file) if loaded naively; through the CLI it is refused with one ``error:`` line and the marker never appears.

Archives and downloads are covered in test_download.py (members checked before anything is written, truncated or
checksum-mismatched downloads never kept) and end to end in test_errors_cli.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from nmt import cli
from nmt.config import config_from_dict
from nmt.data.prepare import prepare
from nmt.training.loop import train
from tests.synthetic import tiny_config, write_corpus


class Trojan:
    """Unpickling this object touches ``marker``: the code an attacker would put in a shared checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (f"import pathlib; pathlib.Path({self.marker!r}).touch()",)


class Gadget:
    """A plain class instance whose ``__setstate__`` (run while unpickling) has a side effect."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).touch()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("untrusted")
    corpus = write_corpus(root / "corpus", {"train": 200, "dev": 10, "test": 10})
    prepare("xx-yy", root / "data", from_dir=corpus, bpe_size=48, progress=False)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config(root / "data", root / "run", max_steps=2, eval_every=2,
                                                 eval_sentences=2)))
    train(config_from_dict(yaml.safe_load(config.read_text())))
    return {"data": root / "data", "config": config, "run": root / "run"}


def hostile_checkpoint(path: Path, marker: Path, kind: str, base: Path | None = None) -> Path:
    """A real checkpoint (or a bare dict) with one extra entry that runs code when unpickled."""
    payload: dict[str, Any] = torch.load(base, weights_only=True) if base is not None else {"model": {}, "config": {}}
    payload["extra"] = Trojan(marker) if kind == "reduce" else Gadget(marker)
    torch.save(payload, path)  # plain torch.save, as anyone could
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("kind", ["reduce", "setstate"])
def test_the_payloads_are_live(kind: str, tmp_path: Path) -> None:
    # Loading without weights_only really runs the code: the refusals below are meaningful.
    marker = tmp_path / "ran"
    torch.load(hostile_checkpoint(tmp_path / "evil.pt", marker, kind), weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("kind", ["reduce", "setstate"])
@pytest.mark.parametrize("command", ["translate", "resume", "average"])
def test_pickled_code_in_a_checkpoint_is_refused(command: str, kind: str, world: dict[str, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    good = world["run"] / "checkpoint_last.pt"
    if command == "resume":
        run = Path(shutil.copytree(world["run"], tmp_path / "run"))
        evil = hostile_checkpoint(run / "checkpoint_last.pt", marker, kind, base=good)
        argv = ["train", str(world["config"]), "--resume", "--set", f"train.save_dir={run}"]
    else:
        evil = hostile_checkpoint(tmp_path / "evil.pt", marker, kind, base=good)
        (tmp_path / "in.txt").write_text("ka lo\n")
        argv = {"translate": ["translate", "--checkpoint", str(evil), "--input", str(tmp_path / "in.txt"),
                              "--device", "cpu"],
                "average": ["average", str(good), str(evil), "--output", str(tmp_path / "avg.pt")]}[command]
    capsys.readouterr()
    assert cli.main(argv) == 2
    message = one_error_line(capsys)
    assert str(evil) in message and "could run code" in message and "refused" in message
    assert ("exec" if kind == "reduce" else "Gadget") in message
    assert not marker.exists()
    assert not (tmp_path / "avg.pt").exists()


def test_pickled_objects_in_binarized_data_are_refused(world: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(shutil.copytree(world["data"], tmp_path / "data"))
    marker = tmp_path / "ran"
    tokens = data / "xx-yy" / "bin" / "train.xx.tokens.npy"
    np.save(tokens, np.array([Trojan(marker)], dtype=object), allow_pickle=True)
    argv = ["train", str(world["config"]), "--set", f"data.data_dir={data}",
            "--set", f"train.save_dir={tmp_path / 'r'}"]
    assert cli.main(argv) == 2
    message = one_error_line(capsys)
    assert str(tokens) in message and "allow_pickle=False" in message
    assert not marker.exists()


def test_yaml_tags_that_build_objects_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    config = tmp_path / "config.yaml"
    config.write_text(f"train:\n  seed: !!python/object/apply:os.system ['touch {marker}']\n")
    assert cli.main(["train", str(config)]) == 2
    message = one_error_line(capsys)
    assert f"{config} line 2" in message
    assert not marker.exists()
