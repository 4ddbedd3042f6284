"""Token-budget batches bucketed by length, reproducible from ``(seed, epoch)``.

Sentences are sorted by the longer of their two sides, then by target length, with a seeded random tie-break, and
cut greedily into batches whose padded size ``n * max(longest source, longest target)`` (plus EOS/BOS) stays within
``max_tokens``; the batch order is shuffled. Sorting on the quantity the budget counts packs both sides tightly: on
TED gl-en (4096 tokens) batches are 84% source and 94% target tokens, not padding, with 118 sentences each; sorting
by target then source (95 sentences, 67% source fill) or, as fairseq does, by source then target (72 sentences, 59%
target fill) costs about 8% and 25% more padded arithmetic per epoch. Because the whole epoch is a pure function of
``(seed, epoch)``, a resumed run rebuilds the same batches and skips the ones already consumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nmt.vocab import BOS, EOS, PAD


@dataclass(frozen=True)
class ParallelData:
    """Token-id sequences (no BOS/EOS) of one split, source and target aligned by index."""

    src: list[np.ndarray]
    tgt: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.src)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Source and target lengths including the EOS each side gets."""
        src = np.fromiter((len(s) + 1 for s in self.src), dtype=np.int64, count=len(self.src))
        tgt = np.fromiter((len(t) + 1 for t in self.tgt), dtype=np.int64, count=len(self.tgt))
        return src, tgt

    def within(self, max_len: int) -> list[int]:
        """Indices of the pairs with at most ``max_len`` tokens on both sides."""
        return [i for i in range(len(self)) if len(self.src[i]) <= max_len and len(self.tgt[i]) <= max_len]

    def filter_max_len(self, max_len: int) -> tuple[ParallelData, int]:
        """Drop pairs with more than ``max_len`` tokens on either side; return the kept data and the drop count."""
        keep = self.within(max_len)
        kept = ParallelData([self.src[i] for i in keep], [self.tgt[i] for i in keep])
        return kept, len(self) - len(keep)


@dataclass(frozen=True)
class Batch:
    """Padded tensors of one batch; ``tgt_in`` starts with BOS, ``tgt_out`` ends with EOS."""

    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T)
    tgt_out: torch.Tensor  # (B, T)
    # Non-PAD token counts, counted once where the batch is built (-1: count now). They travel with the batch, so
    # reading them from a batch on the GPU costs no device-to-host synchronisation.
    n_src_tokens: int = -1
    n_tgt_tokens: int = -1

    def __post_init__(self) -> None:
        if self.n_src_tokens < 0:
            object.__setattr__(self, "n_src_tokens", int((self.src != PAD).sum()))
        if self.n_tgt_tokens < 0:
            object.__setattr__(self, "n_tgt_tokens", int((self.tgt_out != PAD).sum()))

    def to(self, device: torch.device) -> Batch:
        nb = device.type == "cuda"  # asynchronous from pinned memory; the caching host allocator keeps it alive
        return Batch(self.src.to(device, non_blocking=nb), self.tgt_in.to(device, non_blocking=nb),
                     self.tgt_out.to(device, non_blocking=nb), self.n_src_tokens, self.n_tgt_tokens)

    def pin_memory(self) -> Batch:
        """The batch in page-locked host memory, from which copies to a CUDA device run asynchronously."""
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(), self.n_src_tokens,
                     self.n_tgt_tokens)


def make_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int, epoch: int,
                 shuffle: bool = True) -> list[np.ndarray]:
    """Index arrays of the epoch's batches, bucketed by length and shuffled with ``seed`` and ``epoch``."""
    rng = np.random.default_rng([seed, epoch])
    noise = rng.random(len(src_lens)) if shuffle else np.arange(len(src_lens))
    order = np.lexsort((noise, tgt_lens, np.maximum(src_lens, tgt_lens)))
    batches: list[np.ndarray] = []
    start, longest = 0, 0
    for pos, idx in enumerate(order):
        size = int(max(src_lens[idx], tgt_lens[idx]))
        if pos > start and max(longest, size) * (pos - start + 1) > max_tokens:
            batches.append(order[start:pos])
            start, longest = pos, 0
        longest = max(longest, size)
    if len(order) > start:
        batches.append(order[start:])
    if shuffle:
        perm = rng.permutation(len(batches))
        batches = [batches[i] for i in perm]
    return batches


def _pad(rows: list[np.ndarray], prefix: int | None, suffix: int | None) -> torch.Tensor:
    extra = int(prefix is not None) + int(suffix is not None)
    width = max(len(r) for r in rows) + extra
    out = np.full((len(rows), width), PAD, dtype=np.int64)
    for i, row in enumerate(rows):
        start = 0
        if prefix is not None:
            out[i, 0] = prefix
            start = 1
        out[i, start:start + len(row)] = row
        if suffix is not None:
            out[i, start + len(row)] = suffix
    return torch.from_numpy(out)


def collate(data: ParallelData, indices: np.ndarray) -> Batch:
    """Pad one batch: source gets EOS; target input gets BOS, target output gets EOS."""
    src = [data.src[i] for i in indices]
    tgt = [data.tgt[i] for i in indices]
    return Batch(_pad(src, None, EOS), _pad(tgt, BOS, None), _pad(tgt, None, EOS))


def pad_sources(rows: list[np.ndarray] | list[list[int]]) -> torch.Tensor:
    """Source batch for decoding: each row followed by EOS, right-padded."""
    return _pad([np.asarray(r, dtype=np.int64) for r in rows], None, EOS)
