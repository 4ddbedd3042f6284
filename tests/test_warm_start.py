"""Warm start (``nmt train --init-from``, ``train.init_from``) and ``nmt prepare --spm-model``: a child prepared on
its parent's pieces starts near the parent's loss, with a fresh step counter; QKNorm g and the logit mask follow
``train.init_reset``; vocabulary and shape mismatches and --init-from on an existing run are one-line errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from nmt import cli
from nmt.checkpoint.files import load_checkpoint, sentencepiece_bytes, tensor_to_bytes
from nmt.config import config_from_dict
from nmt.data.prepare import GivenModel, prepare
from nmt.errors import NmtError
from nmt.model.spec import ModelSpec
from nmt.model.transformer import build_model
from nmt.modules.attention import qknorm_gain_init
from nmt.training.loop import train
from nmt.training.warm_start import initial_state
from tests.synthetic import prepare_synthetic, tiny_config, write_corpus


def given(path: Path) -> GivenModel:
    """What `nmt prepare --spm-model PATH` hands the data layer."""
    return GivenModel(sentencepiece_bytes(path), str(path))


def losses(log: Path) -> dict[int, float]:
    return {int(m[1]): float(m[2]) for m in re.finditer(r"step (\d+) \| epoch \d+ \| loss ([\d.]+)",
                                                       log.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("warm")
    data = prepare_synthetic(root, {"train": 800, "dev": 20, "test": 10})
    tree = tiny_config(data, root / "parent", max_steps=150, eval_every=150, log_every=10)
    tree["model"]["logit_mask"] = True
    train(config_from_dict(tree))
    # the child pair: other sentences of the same task, prepared on the parent's pieces
    child_corpus = write_corpus(root / "child-corpus", {"train": 300, "dev": 12, "test": 10})
    prepare("xx-yy", root / "child-data", from_dir=child_corpus,
            spm_model=given(root / "parent" / "checkpoint_last.pt"), progress=False)
    config = root / "child.yaml"
    child = tiny_config(root / "child-data", root / "child", max_steps=20, eval_every=20, log_every=10)
    child["model"]["logit_mask"] = True
    config.write_text(yaml.safe_dump(child), encoding="utf-8")
    return {"root": root, "checkpoint": root / "parent" / "checkpoint_last.pt", "config": config,
            "final_loss": losses(root / "parent" / "train.log")[150]}


def test_prepare_on_the_parents_pieces(parent: dict[str, Any]) -> None:
    pieces = tensor_to_bytes(load_checkpoint(parent["checkpoint"])["spm"])
    assert (parent["root"] / "child-data" / "xx-yy" / "spm.model").read_bytes() == pieces
    again = prepare("xx-yy", parent["root"] / "child-data", from_dir=parent["root"] / "child-corpus",
                    spm_model=given(parent["checkpoint"]), progress=False)
    assert again["bpe_size"] == again["vocab_size"]  # the given model's size, whatever the pair config says
    with pytest.raises(NmtError, match="--bpe-size 30 but --spm-model .* has"):
        prepare("xx-yy", parent["root"] / "other", from_dir=parent["root"] / "child-corpus",
                spm_model=given(parent["checkpoint"]), bpe_size=30, progress=False)
    with pytest.raises(NmtError, match="--spm-model .*none.pt: file not found"):
        given(parent["root"] / "none.pt")
    with pytest.raises(NmtError, match="--spm-model .*checkpoint_last.pt is a checkpoint"):  # the data layer
        prepare("xx-yy", parent["root"] / "other", from_dir=parent["root"] / "child-corpus",
                spm_model=parent["checkpoint"], progress=False)


def test_a_warm_started_run_starts_near_its_parents_loss(parent: dict[str, Any]) -> None:
    root = parent["root"]
    assert cli.main(["train", str(parent["config"]), "--init-from", str(parent["checkpoint"]), "--quiet"]) == 0
    assert cli.main(["train", str(parent["config"]), "--set", f"train.save_dir={root / 'fresh'}", "--quiet"]) == 0
    warm, fresh = losses(root / "child" / "train.log"), losses(root / "fresh" / "train.log")
    assert warm[10] < parent["final_loss"] + 0.5 and warm[10] < fresh[10] - 1.0
    log = (root / "child" / "train.log").read_text(encoding="utf-8")
    assert f"initialised from {parent['checkpoint']}" in log and "weights, QKNorm g, logit mask from it" in log
    payload = load_checkpoint(root / "child" / "checkpoint_last.pt")
    assert payload["progress"]["step"] == 20 and payload["config"]["train"]["init_from"] == str(parent["checkpoint"])


def test_init_reset_takes_gains_and_mask_from_the_new_run(parent: dict[str, Any]) -> None:
    ckpt = load_checkpoint(parent["checkpoint"])
    config = config_from_dict(yaml.safe_load(parent["config"].read_text(encoding="utf-8")))
    ours = build_model(config.model, ModelSpec(int(ckpt["vocab_size"]), 9.0)).state_dict()
    spm = tensor_to_bytes(ckpt["spm"])
    kept, note = initial_state(ckpt, parent["checkpoint"], ours, spm, Path("spm.model"), [])
    gains = [k for k in ours if k.endswith("scoring.gain")]
    assert gains and all(torch.equal(kept[k], ckpt["model"][k]) for k in [*gains, "embed.logit_mask"])
    reset, note = initial_state(ckpt, parent["checkpoint"], ours, spm, Path("spm.model"), ["gains", "logit_mask"])
    assert all(float(reset[k]) == pytest.approx(qknorm_gain_init(9.0)) for k in gains)
    assert torch.equal(reset["embed.logit_mask"], ours["embed.logit_mask"])
    assert "QKNorm g re-initialised from this run's L" in note and "logit mask from this run's training" in note
    weights = [k for k in ours if "ffn" in k]
    assert weights and all(torch.equal(reset[k], ckpt["model"][k]) for k in weights)  # the rest from the parent
    assert not all(torch.equal(ours[k], ckpt["model"][k]) for k in weights)


def test_mismatches_are_one_line(parent: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint, config = str(parent["checkpoint"]), str(parent["config"])
    other = prepare_synthetic(tmp_path / "own", {"train": 300, "dev": 12, "test": 10})  # its own pieces
    cases = [
        (["--set", f"data.data_dir={other}", "--set", f"train.save_dir={tmp_path / 'a'}"],
         "its SentencePiece model (sha256"),
        (["--set", "model.d_ff=48", "--set", f"train.save_dir={tmp_path / 'b'}"],
         "in its model but (48, 32) in this config's"),
        (["--set", "model.logit_mask=false", "--set", f"train.save_dir={tmp_path / 'c'}"],
         "embed.logit_mask, which this config's model lacks"),
        (["--resume"], "already holds one"),  # the child run of the test above exists
    ]
    if not (parent["root"] / "child" / "checkpoint_last.pt").exists():
        cases.pop()
    for extra, message in cases:
        assert cli.main(["train", config, "--init-from", checkpoint, "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert cli.main(["train", config, "--init-from", str(tmp_path / "none.pt"), "--quiet", "--set",
                     f"train.save_dir={tmp_path / 'd'}"]) == 2
    assert "file not found" in capsys.readouterr().err
    assert cli.main(["train", config, "--set", "train.init_reset=gains,weights", "--quiet"]) == 2
    assert "weights is not one of gains, logit_mask" in capsys.readouterr().err
