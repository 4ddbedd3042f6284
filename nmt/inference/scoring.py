"""Force-decoding: how probable does a model find a given translation? (``nmt score``, :meth:`Translator.score`)

For each source/target pair the target's pieces plus EOS are fed to the decoder with teacher forcing and the log-
probability the model gives each of them is summed: no label smoothing, dropout off, the model's own target-vocabulary
mask applied as in prediction (a masked-out target piece adds nothing, as in the trainer's nll, so on a dev set the
mean over all tokens equals the trainer's dev nll). Uses: reranking n-best lists, filtering back-translated or crawled
pairs, comparing models on held-out references (fairseq's ``--score-reference``, Sockeye's ``score``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from nmt.data.batching import ParallelData, collate, make_batches
from nmt.machine.runtime import Runtime
from nmt.vocab import PAD


@dataclass(frozen=True)
class PairScore:
    """The force-decoded log-probability of one target given its source."""

    score: float  # sum over the target's pieces and EOS of log p (natural log)
    tokens: int  # pieces + EOS

    @property
    def mean(self) -> float:
        """Per-token average (0 for a pair without tokens)."""
        return self.score / self.tokens if self.tokens else 0.0


def token_log_probs(logits: torch.Tensor, target: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """(B, T) log-probabilities of ``target`` under ``logits`` (B, T, V), in at least float32; 0 at PAD and, with
    a target-vocabulary mask ``keep``, at targets the model cannot predict (as
    :func:`nmt.training.loss.label_smoothed_nll`)."""
    log_probs = F.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    picked = log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    counted = target != PAD
    if keep is not None:
        counted &= keep[target]
    return torch.where(counted, picked, torch.zeros_like(picked))


def score_ids(model: torch.nn.Module, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
              runtime: Runtime, max_tokens: int, batch_size: int | None = None) -> list[PairScore]:
    """Force-decode piece-id pairs (no BOS/EOS) in length-sorted token-budget batches; results in input order.

    Args:
        model: a :class:`~nmt.model.transformer.Transformer` (put in eval mode here: no dropout).
        sources, targets: aligned piece-id sequences.
        runtime: device and autocast.
        max_tokens: padded tokens per batch (the trainer's rule: rows × the longer side, EOS/BOS included).
        batch_size: at most this many pairs per batch (None: only ``max_tokens`` limits a batch).
    """
    model.eval()
    data = ParallelData([np.asarray(s, dtype=np.int64) for s in sources],
                        [np.asarray(t, dtype=np.int64) for t in targets])
    src_lens, tgt_lens = data.lengths()
    results: list[PairScore | None] = [None] * len(data)
    keep = getattr(model, "logit_mask", None)
    batches = make_batches(src_lens, tgt_lens, max_tokens, seed=0, epoch=0, shuffle=False)
    if batch_size is not None:
        batches = [b[i:i + batch_size] for b in batches for i in range(0, len(b), batch_size)]
    with torch.no_grad(), runtime.autocast():
        for indices in batches:
            batch = collate(data, indices).to(runtime.device)
            sums = token_log_probs(model(batch.src, batch.tgt_in), batch.tgt_out, keep).sum(dim=1).tolist()
            for index, total in zip(indices.tolist(), sums, strict=True):
                results[index] = PairScore(float(total), int(tgt_lens[index]))
    return [r for r in results if r is not None]
