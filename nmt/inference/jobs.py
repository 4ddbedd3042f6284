"""The model a decoding job runs on, ready for its precision (:func:`for_precision`: int8 copies of the Linear layers,
every member of an ensemble); the job itself and the function that runs it are :mod:`nmt.search.batches`'."""

from __future__ import annotations

from typing import Any, cast

import torch

from nmt.inference.ensemble import Ensemble
from nmt.inference.int8 import INT8, quantize_for_decoding
from nmt.search import Seq2Seq


def for_precision(model: Seq2Seq[Any], precision: str) -> Seq2Seq[Any]:
    """``model`` ready to decode in ``precision`` (resolved: fp32, bf16, fp16 or int8): for int8 an int8 copy of
    its Linear layers (:mod:`nmt.inference.int8`; every member of an ensemble), else ``model`` itself (autocast does the
    rest)."""
    if precision != INT8:
        return model
    if isinstance(model, Ensemble):
        return cast(Seq2Seq[Any], model.map(quantize_for_decoding))
    return cast(Seq2Seq[Any], quantize_for_decoding(cast(torch.nn.Module, model)))
