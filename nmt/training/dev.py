"""Validation: teacher-forced dev loss and dev BLEU from the same decoding loop as ``nmt translate``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from nmt.config import DecodeConfig
from nmt.data.batching import ParallelData, collate, make_batches
from nmt.machine.runtime import Runtime
from nmt.model.transformer import Transformer
from nmt.search.batches import decode_sources
from nmt.training.loss import label_smoothed_nll


@dataclass(frozen=True)
class DevSet:
    data: ParallelData
    references: list[str]  # the raw (tokenized) target text, for the papers' tokenized BLEU


def dev_loss(model: torch.nn.Module, dev: DevSet, max_tokens: int, runtime: Runtime,
             epsilon: float) -> tuple[float, float]:
    """Per-token label-smoothed loss and NLL on the whole dev set."""
    src_lens, tgt_lens = dev.data.lengths()
    total = nll_total = tokens = 0.0
    with torch.no_grad(), runtime.autocast():
        for indices in make_batches(src_lens, tgt_lens, max_tokens, seed=0, epoch=0, shuffle=False):
            batch = collate(dev.data, indices).to(runtime.device)
            loss, nll = label_smoothed_nll(model(batch.src, batch.tgt_in), batch.tgt_out, epsilon,
                                           getattr(model, "logit_mask", None))
            total += float(loss)
            nll_total += float(nll)
            tokens += batch.n_tgt_tokens
    return total / max(tokens, 1), nll_total / max(tokens, 1)


def decode_ids(model: Transformer, sources: list[np.ndarray], settings: DecodeConfig,
               runtime: Runtime) -> list[list[int]]:
    """Best hypothesis ids for each source, through ``nmt translate``'s loop
    (:func:`nmt.search.batches.decode_sources`)
    with ``settings`` (its ``nbest`` is ignored: one hypothesis each)."""
    one = dataclasses.replace(settings, nbest=1)
    hyps = decode_sources(model, [s.tolist() for s in sources], one, runtime, model.max_positions - 1)
    return [list(nbest[0].tokens) for nbest in hyps]
