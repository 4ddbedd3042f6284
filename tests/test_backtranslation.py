"""The README's back-translation recipe end to end on the synthetic pair, through the CLI: a reverse model, sampled
translations of target-side text, the synthetic pairs mixed into the training data, a forward model trained on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from nmt import cli
from nmt.metrics import tokenized_bleu
from tests.synthetic import sentences, tiny_config, translate, write_corpus


def config(path: Path, pair: str, data: Path, save_dir: Path, steps: int) -> str:
    tree = tiny_config(data, save_dir, max_steps=steps, eval_every=steps, log_every=steps)
    tree["data"]["pair"] = pair
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_back_translation_recipe(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus", {"train": 600, "dev": 12, "test": 10})  # xx-yy; yy-xx reads it too
    data = tmp_path / "data"
    assert cli.main(["prepare", "yy-xx", "--data-dir", str(data), "--from-dir", str(corpus), "--bpe-size", "48",
                     "--no-progress", "--quiet"]) == 0
    assert cli.main(["train", config(tmp_path / "reverse.yaml", "yy-xx", data, tmp_path / "reverse", 300),
                     "--quiet"]) == 0

    truth = sentences(80, seed=99)  # monolingual target-side text: yy sentences whose xx source we keep aside
    mono_yy = tmp_path / "mono.yy"
    mono_yy.write_text("".join(translate(s) + "\n" for s in truth), encoding="utf-8")
    mono_xx = tmp_path / "mono.xx"
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "reverse" / "checkpoint_best.pt"), "--sampling",
                     "--seed", "1", "--pretokenized", "--input", str(mono_yy), "--output", str(mono_xx),
                     "--device", "cpu", "--quiet"]) == 0
    synthetic = mono_xx.read_text(encoding="utf-8").splitlines()
    assert len(synthetic) == 80 and tokenized_bleu(synthetic, truth) > 10  # sampled: noisy, yet informative

    mixed = tmp_path / "mixed"
    shutil.copytree(corpus, mixed)
    for lang, extra in (("xx", mono_xx), ("yy", mono_yy)):
        with open(mixed / f"train.{lang}", "a", encoding="utf-8") as handle:
            handle.write(extra.read_text(encoding="utf-8"))
    assert cli.main(["prepare", "xx-yy", "--data-dir", str(data), "--from-dir", str(mixed), "--bpe-size", "48",
                     "--no-progress", "--quiet"]) == 0
    meta = json.loads((data / "xx-yy" / "meta.json").read_text(encoding="utf-8"))
    assert meta["splits"]["train"]["lines"] == 680
    assert cli.main(["train", config(tmp_path / "forward.yaml", "xx-yy", data, tmp_path / "forward", 60),
                     "--quiet"]) == 0
    assert (tmp_path / "forward" / "checkpoint_best.pt").is_file()
