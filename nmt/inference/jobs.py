"""One batch of decoding as a value: what :func:`nmt.inference.translator.decode_sources` hands to a worker, in this
process or in a decoding process (:mod:`nmt.inference.processes`), and the one function that runs it.

A job carries plain data only (piece ids, the sampling keys, the settings), so it pickles between processes; its
result, one n-best list of :class:`~nmt.search.Hypothesis` per row, does too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch

from nmt.config import DecodeConfig
from nmt.data.batching import pad_sources
from nmt.inference.ensemble import Ensemble
from nmt.inference.int8 import INT8, quantize_for_decoding
from nmt.machine.runtime import Runtime
from nmt.search import Hypothesis, Sampling, Seq2Seq, decode


@dataclass(frozen=True)
class DecodeJob:
    """One batch to decode.

    Attributes:
        rows: piece ids of each source sentence, without EOS (none empty).
        keys: each row's sampling key (its input index plus the first index; see :mod:`nmt.search.sampling`).
        settings: beam, length penalty, n-best and search rules.
        max_len_cap: the longest output the model's positions allow (None: no cap).
        sampling: draw samples instead of searching (None: search).
    """

    rows: list[list[int]]
    keys: list[int]
    settings: DecodeConfig
    max_len_cap: int | None
    sampling: Sampling | None


def run_job(model: Seq2Seq[Any], runtime: Runtime, job: DecodeJob) -> list[list[Hypothesis]]:
    """Decode ``job`` with ``model`` under ``runtime``'s autocast (set per thread, as is ``no_grad``)."""
    src = pad_sources(job.rows).to(runtime.device)
    keys = torch.tensor(job.keys, dtype=torch.int64)
    with torch.no_grad(), runtime.autocast():
        return decode(model, src, job.settings, job.max_len_cap, job.sampling, keys)


def for_precision(model: Seq2Seq[Any], precision: str) -> Seq2Seq[Any]:
    """``model`` ready to decode in ``precision`` (resolved: fp32, bf16, fp16 or int8): for int8 an int8 copy of
    its Linear layers (:mod:`nmt.inference.int8`; every member of an ensemble), else ``model`` itself (autocast does the
    rest)."""
    if precision != INT8:
        return model
    if isinstance(model, Ensemble):
        return cast(Seq2Seq[Any], model.map(quantize_for_decoding))
    return cast(Seq2Seq[Any], quantize_for_decoding(cast(torch.nn.Module, model)))
