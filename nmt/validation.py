"""Validation: teacher-forced dev loss and dev BLEU from the same beam search that ``nmt translate`` uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nmt.data.batching import ParallelData, collate, make_batches, pad_sources
from nmt.loss import label_smoothed_nll
from nmt.model import Transformer
from nmt.runtime import Runtime
from nmt.search import beam_search
from nmt.translate import make_batches as make_decode_batches


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


def decode_ids(model: Transformer, sources: list[np.ndarray], beam: int, lenpen: float, max_len_a: float,
               max_len_b: int, max_tokens: int, runtime: Runtime, search: str = "official") -> list[list[int]]:
    """Best hypothesis ids for each source, decoded in the same token-budget batches as ``nmt translate``."""
    out: list[list[int]] = [[] for _ in sources]
    for chunk in make_decode_batches([len(s) + 1 for s in sources], max_tokens):
        src = pad_sources([sources[i] for i in chunk]).to(runtime.device)
        with torch.no_grad(), runtime.autocast():
            hyps = beam_search(model, src, beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b,
                               nbest=1, max_len_cap=model.max_positions - 1, search=search)
        for i, nbest in zip(chunk, hyps, strict=True):
            out[i] = list(nbest[0].tokens)
    return out
