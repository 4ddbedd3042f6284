"""Subword sampling for training: every epoch sees its training sentences segmented afresh.

With ``data.bpe_dropout`` p > 0 each epoch's pieces are drawn by BPE-dropout (Provilkov et al. 2020, arXiv
1910.13267: each merge is skipped with probability p, so a word is seen in many segmentations; p = 0.1 in the paper),
SentencePiece's sampling for the joint BPE model, a regularizer for small corpora. As in JoeyNMT, the sampling
happens when the training data is read, so every epoch differs; dev and test keep the deterministic segmentation, and
so does decoding. The skips come from :class:`nmt.data.bpe_dropout.BpeDropout`, seeded by ``(train.seed, epoch,
side)``: a resumed run and every rank of a distributed run draw the same pieces in any process.

The set of training pairs is the deterministic one (``data.max_len`` filters on the
deterministic pieces); a pair whose sampled pieces exceed ``data.max_len`` on either side keeps its deterministic
pieces that epoch, so ``data.max_len`` still bounds every training sequence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nmt.data.batching import ParallelData
from nmt.data.bpe import SentencePieceTokenizer
from nmt.data.text import iter_lines
from nmt.errors import NmtError

SOURCE, TARGET = 0, 1  # the side, a part of each draw's seed


def side_seed(seed: int, epoch: int, side: int) -> int:
    """The SentencePiece seed of one side of one epoch (independent streams for every seed, epoch and side)."""
    return int(np.random.SeedSequence([seed, epoch, side]).generate_state(1)[0])


class SubwordSampler:
    """The training pairs of each epoch, segmented by BPE-dropout.

    Args:
        tokenizer: the pair's SentencePiece model.
        src_lines, tgt_lines: the training text, one sentence per line, aligned with ``fixed``.
        fixed: the deterministic pieces of the same pairs (used where a draw exceeds ``max_len``).
        alpha: the dropout probability of each merge.
        seed: the run's seed.
        max_len: the longest sequence of pieces a training pair may have on either side.
    """

    def __init__(self, tokenizer: SentencePieceTokenizer, src_lines: list[str], tgt_lines: list[str],
                 fixed: ParallelData, alpha: float, seed: int, max_len: int) -> None:
        if not len(src_lines) == len(tgt_lines) == len(fixed):
            raise ValueError("the training text and its pieces must be aligned")
        self.tokenizer, self.src_lines, self.tgt_lines, self.fixed = tokenizer, src_lines, tgt_lines, fixed
        self.alpha, self.seed, self.max_len = alpha, seed, max_len

    def epoch(self, epoch: int) -> ParallelData:
        """The training pairs of ``epoch`` (numbered from 1), sampled afresh."""
        src = self.tokenizer.encode_sampled(self.src_lines, self.alpha, side_seed(self.seed, epoch, SOURCE))
        tgt = self.tokenizer.encode_sampled(self.tgt_lines, self.alpha, side_seed(self.seed, epoch, TARGET))
        src_out: list[np.ndarray] = []
        tgt_out: list[np.ndarray] = []
        for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
            if len(s) > self.max_len or len(t) > self.max_len:
                src_out.append(self.fixed.src[i])
                tgt_out.append(self.fixed.tgt[i])
            else:
                src_out.append(np.asarray(s, dtype=np.int32))
                tgt_out.append(np.asarray(t, dtype=np.int32))
        return ParallelData(src_out, tgt_out)


def read_training_text(pair_dir: Path, src: str, tgt: str, kept: list[int], lines: int) -> tuple[list[str], list[str]]:
    """The prepared training text (``raw/train.{src,tgt}``) of the pairs ``kept``; the files must have ``lines``
    lines, one per binarized pair.

    Raises:
        NmtError: a file is missing or its line count differs from the binarized split's.
    """
    sides = []
    for lang in (src, tgt):
        path = pair_dir / "raw" / f"train.{lang}"
        if not path.is_file():
            raise NmtError(f"{path} not found: data.bpe_dropout samples the training text, which `nmt prepare` "
                           "writes there; rerun `nmt prepare --force` for this pair")
        text = list(iter_lines(path))
        if len(text) != lines:
            raise NmtError(f"{path} has {len(text)} lines but the binarized training split has {lines} pairs; "
                           "rerun `nmt prepare --force` for this pair")
        sides.append([text[i] for i in kept])
    return sides[0], sides[1]
