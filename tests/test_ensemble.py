"""Ensembles (nmt.inference.ensemble; ``--checkpoint A --checkpoint B`` / ``--path A:B``): a checkpoint given twice
decodes and scores as itself, two models average their probabilities at every step, and checkpoints of different pieces
are refused in one line."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from nmt import cli
from nmt.checkpoint.files import bytes_to_tensor, load_checkpoint, save_checkpoint, tensor_to_bytes
from nmt.data.bpe import train_sentencepiece
from nmt.errors import NmtError
from nmt.inference.ensemble import Ensemble, mean_log_probs
from nmt.inference.translator import Translator
from tests.test_translate import synthetic_sentences, tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ensemble")
    return tiny_checkpoint(root, "a.pt", seed=0), tiny_checkpoint(root, "b.pt", seed=1)  # one spm, two models


def lines() -> list[str]:
    return synthetic_sentences(9, seed=4)


def test_a_checkpoint_twice_is_that_checkpoint(checkpoints: tuple[Path, Path]) -> None:
    a, _ = checkpoints
    single = Translator.from_checkpoint(a, device="cpu")
    double = Translator.from_checkpoints([a, a], device="cpu")
    assert isinstance(double.model, Ensemble) and len(double.model.members) == 2
    for beam, nbest in ((1, 1), (3, 2)):
        alone = single.translate(lines(), beam=beam, nbest=nbest, pretokenized=True)
        both = double.translate(lines(), beam=beam, nbest=nbest, pretokenized=True)
        assert [[text for text, _ in n] for n in both] == [[text for text, _ in n] for n in alone]
        assert [s for n in both for _, s in n] == pytest.approx([s for n in alone for _, s in n], abs=1e-5)
    targets = synthetic_sentences(9, seed=6)
    assert [s.score for s in double.score(lines(), targets, pretokenized=True)] == pytest.approx(
        [s.score for s in single.score(lines(), targets, pretokenized=True)], abs=1e-4)


def test_two_models_average_their_probabilities(checkpoints: tuple[Path, Path]) -> None:
    a, b = checkpoints
    members = [Translator.from_checkpoint(path, device="cpu").model for path in (a, b)]
    ensemble = Translator.from_checkpoints([a, b], device="cpu").model
    src = torch.tensor([[5, 9, 12, 3], [7, 8, 3, 0]])
    prev = torch.full((2,), 2)
    steps = [m.step(prev, m.start(src))[0] for m in members]
    combined, _ = ensemble.step(prev, ensemble.start(src))
    expected = torch.log((steps[0].exp() + steps[1].exp()) / 2)
    assert torch.allclose(combined, expected, atol=1e-5)
    assert torch.allclose(combined.exp().sum(dim=1), torch.ones(2), atol=1e-5)
    assert not torch.allclose(steps[0], steps[1])  # two different models
    assert torch.equal(mean_log_probs([steps[0]]), steps[0])
    assert math.isclose(float(mean_log_probs([steps[0], steps[0]])[0, 4]), float(steps[0][0, 4]), abs_tol=1e-6)


def test_cli_repeated_checkpoint_and_path_list_agree(checkpoints: tuple[Path, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = checkpoints
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines()) + "\n", encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["nmt"])
    outputs = []
    for flags in (["--checkpoint", str(a), "--checkpoint", str(b)], ["--path", f"{a}:{b}"]):
        assert cli.main(["translate", *flags, "--input", str(source), "--pretokenized", "--device", "cpu",
                         "--quiet"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 9
    assert cli.main(["translate", "--checkpoint", str(a), "--input", str(source), "--pretokenized", "--device",
                     "cpu", "--quiet"]) == 0
    assert capsys.readouterr().out != outputs[0]  # the ensemble is not its first member


def test_different_pieces_are_refused(checkpoints: tuple[Path, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = checkpoints
    train_sentencepiece([s[::-1] for s in synthetic_sentences(300, seed=9)], tmp_path / "spm", vocab_size=48)
    payload = load_checkpoint(a)
    payload["spm"] = bytes_to_tensor((tmp_path / "spm" / "spm.model").read_bytes())
    assert tensor_to_bytes(payload["spm"]) != tensor_to_bytes(load_checkpoint(a)["spm"])
    c = tmp_path / "c.pt"
    save_checkpoint(c, payload)
    with pytest.raises(NmtError, match=f"checkpoints {a} and {c} have different SentencePiece models"):
        Translator.from_checkpoints([a, c], device="cpu")
    source = tmp_path / "in.txt"
    source.write_text("ka lo\n", encoding="utf-8")
    assert cli.main(["translate", "--path", f"{a}:{c}", "--input", str(source), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "different SentencePiece models" in err and len(err.strip().splitlines()) == 1
