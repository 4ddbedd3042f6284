"""Subword sampling (``data.bpe_dropout``, BPE-dropout over the SentencePiece model): draws are segmentations of the
same text, repeat for (seed, epoch), are bounded by ``data.max_len``; training on them learns and resumes bitwise
(the draws are the same in every process: tests/test_bpe_dropout.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nmt.checkpoint.files import load_checkpoint
from nmt.config import config_from_dict
from nmt.data.batching import ParallelData
from nmt.data.bpe import SentencePieceTokenizer
from nmt.data.subword_sampling import SubwordSampler
from nmt.errors import NmtError
from nmt.machine.runtime import Runtime
from nmt.training.data import load_training_data
from nmt.training.loop import Trainer, train
from tests.synthetic import prepare_synthetic, tiny_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("sampling"))


@pytest.fixture(scope="module")
def tokenizer(data_dir: Path) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(data_dir / "xx-yy" / "spm.model")


def lines(data_dir: Path, lang: str, n: int = 300) -> list[str]:
    return (data_dir / "xx-yy" / "raw" / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:n]


def config(data_dir: Path, save_dir: Path, bpe_dropout: float, **train_overrides: Any) -> dict[str, Any]:
    tree = tiny_config(data_dir, save_dir, **train_overrides)
    tree["data"]["bpe_dropout"] = bpe_dropout
    return tree


def test_alpha_zero_gives_the_deterministic_pieces(data_dir: Path, tokenizer: SentencePieceTokenizer) -> None:
    text = lines(data_dir, "yy")
    assert tokenizer.encode_sampled(text, 0.0, seed=3) == [tokenizer.encode(t) for t in text]


def test_draws_are_segmentations_of_the_same_text(data_dir: Path, tokenizer: SentencePieceTokenizer) -> None:
    text = lines(data_dir, "yy")
    fixed = sum(len(tokenizer.encode(t)) for t in text)
    counts = []
    for alpha in (0.1, 0.5):
        drawn = tokenizer.encode_sampled(text, alpha, seed=3)
        assert [tokenizer.decode(ids) for ids in drawn] == text  # only the segmentation changes
        counts.append(sum(len(ids) for ids in drawn))
    assert fixed < counts[0] < counts[1]  # more merges dropped, more pieces


def test_draws_are_a_pure_function_of_the_seed(data_dir: Path, tokenizer: SentencePieceTokenizer) -> None:
    text = lines(data_dir, "xx")
    first = tokenizer.encode_sampled(text, 0.3, seed=11)
    tokenizer.encode_sampled(text, 0.3, seed=12)  # other draws in between change nothing
    from_thread: list[list[list[int]]] = []  # nor which thread asks
    worker = threading.Thread(target=lambda: from_thread.append(tokenizer.encode_sampled(text, 0.3, seed=11)))
    worker.start()
    worker.join()
    assert tokenizer.encode_sampled(text, 0.3, seed=11) == first == from_thread[0]
    assert tokenizer.encode_sampled(text, 0.3, seed=12) != first


def test_epochs_differ_repeat_and_stay_within_max_len(data_dir: Path, tokenizer: SentencePieceTokenizer) -> None:
    src, tgt = lines(data_dir, "xx"), lines(data_dir, "yy")
    fixed = ParallelData([np.asarray(tokenizer.encode(s), dtype=np.int32) for s in src],
                         [np.asarray(tokenizer.encode(t), dtype=np.int32) for t in tgt])
    max_len = max(max(len(s), len(t)) for s, t in zip(fixed.src, fixed.tgt, strict=True)) + 1
    sampler = SubwordSampler(tokenizer, src, tgt, fixed, alpha=0.5, seed=1, max_len=max_len)
    one, again, two = sampler.epoch(1), sampler.epoch(1), sampler.epoch(2)
    assert all(np.array_equal(a, b) for a, b in zip(one.src + one.tgt, again.src + again.tgt, strict=True))
    assert any(not np.array_equal(a, b) for a, b in zip(one.tgt, two.tgt, strict=True))
    assert max(len(x) for x in one.src + one.tgt) <= max_len
    # a pair whose draw exceeds max_len on either side keeps its deterministic pieces (both sides)
    fallback = [i for i in range(len(src)) if np.array_equal(one.src[i], fixed.src[i])
                and np.array_equal(one.tgt[i], fixed.tgt[i])]
    drawn_long = [i for i in range(len(src)) if max(len(x) for x in (one.src[i], one.tgt[i])) == max_len]
    assert fallback and drawn_long  # both cases occur at alpha 0.5 with max_len one above the longest fixed pair
    assert [tokenizer.decode(t.tolist()) for t in one.tgt] == tgt


def test_trainer_batches_come_from_the_epochs_draw(data_dir: Path, tmp_path: Path) -> None:
    cfg = config_from_dict(config(data_dir, tmp_path / "run", 0.2))
    trainer = Trainer(cfg, Runtime(torch.device("cpu"), "fp32"))
    first, second = trainer.epoch_data(1), trainer.epoch_data(2)
    assert len(first) == len(trainer.data.train) == len(second)
    assert sum(map(len, first.tgt)) > sum(map(len, trainer.data.train.tgt))
    assert any(not np.array_equal(a, b) for a, b in zip(first.tgt, second.tgt, strict=True))
    assert max(max(b) for b in trainer.epoch_batches(1)) < len(first)
    assert load_training_data(cfg).sampler is not None
    plain = load_training_data(config_from_dict(config(data_dir, tmp_path / "plain", 0.0)))
    assert plain.sampler is None and plain.epoch_data(5) is plain.train


def test_training_with_bpe_dropout_learns_and_resumes_bitwise(data_dir: Path, tmp_path: Path) -> None:
    def run(save_dir: Path, resume: bool = False, **overrides: Any) -> dict[str, Any]:
        return train(config_from_dict(config(data_dir, save_dir, 0.1, **overrides)), resume=resume)

    result = run(tmp_path / "full", max_steps=400, eval_every=100)
    # several epochs of draws, and it learned (chance is ~0; slower than without sampling: ~54 seen at 400 steps,
    # ~69 without sampling)
    assert result["epoch"] > 2 and result["best_bleu"] > 35.0
    run(tmp_path / "split", max_steps=110, eval_every=100)
    run(tmp_path / "split", resume=True, max_steps=400, eval_every=100)
    full = load_checkpoint(tmp_path / "full" / "checkpoint_last.pt")["model"]
    split = load_checkpoint(tmp_path / "split" / "checkpoint_last.pt")["model"]
    assert all(torch.equal(full[k], split[k]) for k in full)


def test_bpe_dropout_config_errors(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(NmtError, match=r"'data.bpe_dropout': 1.0 must be in \[0, 1\)"):
        config_from_dict(config(data_dir, tmp_path, 1.0))
    tree = config(data_dir, tmp_path, 0.1)
    tree["model"]["logit_mask"] = True
    with pytest.raises(NmtError, match="'data.bpe_dropout'.*model.logit_mask false"):
        config_from_dict(tree)


def test_missing_or_misaligned_training_text_is_one_line(tmp_path: Path) -> None:
    data_dir = prepare_synthetic(tmp_path / "own", {"train": 200, "dev": 10, "test": 10})
    raw = data_dir / "xx-yy" / "raw" / "train.yy"
    raw.write_text("\n".join(raw.read_text(encoding="utf-8").splitlines()[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(NmtError, match=r"train\.yy has 199 lines but the binarized training split has 200"):
        load_training_data(config_from_dict(config(data_dir, tmp_path / "run", 0.1)))
    raw.unlink()
    with pytest.raises(NmtError, match=r"train\.yy not found"):
        load_training_data(config_from_dict(config(data_dir, tmp_path / "run", 0.1)))
    load_training_data(config_from_dict(config(data_dir, tmp_path / "run", 0.0)))  # not needed without sampling
