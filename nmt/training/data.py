"""Load the prepared corpus a training run needs: filtered training pairs, the dev set and the tokenizer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmt.config import Config
from nmt.data.batching import ParallelData
from nmt.data.binarized import load_split
from nmt.data.bpe import SentencePieceTokenizer
from nmt.data.settings import check_prepared
from nmt.data.subword_sampling import SubwordSampler, read_training_text
from nmt.errors import NmtError
from nmt.model.spec import ModelSpec
from nmt.training.dev import DevSet
from nmt.vocab import EOS, UNK


@dataclass(frozen=True)
class TrainingData:
    """A run's data: the training pairs within ``data.max_len`` (``dropped_long`` were longer), the dev set, the
    SentencePiece model and the :class:`~nmt.model.spec.ModelSpec` resolved from them (its logit mask: the types
    of the training target side, plus UNK and EOS). With ``data.bpe_dropout`` the ``sampler`` segments each
    epoch's training pairs afresh (:meth:`epoch_data`); ``train`` holds their deterministic pieces."""

    train: ParallelData
    dev: DevSet
    dropped_long: int
    spec: ModelSpec
    spm_bytes: bytes
    tokenizer: SentencePieceTokenizer
    sampler: SubwordSampler | None = None

    def epoch_data(self, epoch: int) -> ParallelData:
        """The training pairs as epoch ``epoch`` sees them: sampled with BPE-dropout, or the prepared pieces."""
        return self.train if self.sampler is None else self.sampler.epoch(epoch)


def target_vocabulary(targets: list[np.ndarray], vocab_size: int) -> torch.Tensor:
    """The official per-language logit mask (QKNorm/TwT ``preprocessing.py``): every type of the training target
    side, plus UNK and EOS; never PAD or BOS. (V,) bool, True = may be predicted."""
    keep = np.zeros(vocab_size, dtype=bool)
    if targets:
        keep[np.unique(np.concatenate(targets))] = True
    keep[[UNK, EOS]] = True
    return torch.from_numpy(keep)


def read_meta(pair_dir: Path) -> dict:
    meta_path = pair_dir / "meta.json"
    if not meta_path.is_file():
        raise NmtError(f"no prepared data at {pair_dir} (missing meta.json); run `nmt prepare "
                       f"{pair_dir.name} --data-dir {pair_dir.parent}` first")
    try:
        return dict(json.loads(meta_path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NmtError(f"{meta_path} is corrupt ({exc}); rerun `nmt prepare` with --force") from None


def load_training_data(cfg: Config) -> TrainingData:
    pair_dir = Path(cfg.data.data_dir) / cfg.data.pair
    meta = read_meta(pair_dir)
    check_prepared(meta, cfg.data, pair_dir)
    src, tgt = meta["src"], meta["tgt"]
    train = ParallelData(load_split(pair_dir, "train", src), load_split(pair_dir, "train", tgt))
    keep = target_vocabulary(train.tgt, int(meta["vocab_size"]))  # before length filtering, as the official code
    kept = train.within(cfg.data.max_len)
    lines = len(train)
    train, dropped = train.filter_max_len(cfg.data.max_len)
    if len(train) == 0:
        raise NmtError(f"no training pairs in {pair_dir} within data.max_len={cfg.data.max_len}")
    dev = ParallelData(load_split(pair_dir, "dev", src), load_split(pair_dir, "dev", tgt))
    refs_path = pair_dir / "raw" / f"dev.{tgt}"
    references = refs_path.read_text(encoding="utf-8").splitlines()
    n = cfg.train.eval_sentences or len(dev)
    dev = ParallelData(dev.src[:n], dev.tgt[:n])
    spm_path = pair_dir / "spm.model"
    spm_bytes = spm_path.read_bytes()
    spec = ModelSpec.resolve(cfg.model, int(meta["vocab_size"]), float(meta["length_p975"]), spm=spm_bytes,
                             logit_mask=keep, data_name=f"{pair_dir}/train")
    tokenizer = SentencePieceTokenizer(spm_path)
    sampler = None
    if cfg.data.bpe_dropout > 0:
        src_lines, tgt_lines = read_training_text(pair_dir, src, tgt, kept, lines)
        sampler = SubwordSampler(tokenizer, src_lines, tgt_lines, train, cfg.data.bpe_dropout, cfg.train.seed,
                                 cfg.data.max_len)
    return TrainingData(train, DevSet(dev, references[:n]), dropped, spec, spm_bytes, tokenizer, sampler)
