"""Warm start (``nmt train CONFIG --init-from CKPT``, ``train.init_from``): a new run whose weights come from a trained
model, for fine-tuning, domain adaptation or transfer from a related pair (Neubig & Hu 2018, gl-en from a pt-en
parent). As fairseq's ``--restore-file`` with ``--reset-optimizer --reset-lr-scheduler --reset-dataloader
--reset-meters``: the optimizer, the schedule, the step counter, the epoch and the best score start fresh.

The child's data must be cut into the parent's pieces (``nmt prepare PAIR --spm-model CKPT``) and its model must have
the parent's shapes; either mismatch is one line naming both sides. QKNorm's g and the target-vocabulary logit mask
come from the parent unless ``train.init_reset`` names them (``gains``: g = log2(L² − L) of this run's L;
``logit_mask``: the types of this run's training targets).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from nmt.checkpoint.files import tensor_to_bytes
from nmt.errors import NmtError


def _reset_key(key: str, resets: list[str]) -> bool:
    return ("gains" in resets and key.endswith("scoring.gain")) or ("logit_mask" in resets and
                                                                    key.endswith("logit_mask"))


def _pieces(data: bytes) -> str:
    return f"sha256 {hashlib.sha256(data).hexdigest()[:12]}…"


def initial_state(parent: Mapping[str, Any], path: Path, ours: Mapping[str, Tensor], spm_bytes: bytes,
                  spm_where: Path, resets: list[str]) -> tuple[dict[str, Tensor], str]:
    """The state dict a warm-started model loads, and the line the log says about it.

    Args:
        parent: the loaded parent checkpoint.
        path: its file, for messages.
        ours: the new model's freshly initialised state dict.
        spm_bytes: the SentencePiece model of the new run's data (at ``spm_where``).
        resets: :data:`nmt.config.INIT_RESETS` entries to take from ``ours`` instead of the parent.
    """
    theirs = tensor_to_bytes(parent["spm"]) if "spm" in parent else b""
    if theirs != spm_bytes:
        raise NmtError(f"--init-from {path}: its SentencePiece model ({_pieces(theirs)}) is not {spm_where}'s "
                       f"({_pieces(spm_bytes)}); prepare this run's data on the parent's pieces with "
                       f"`nmt prepare PAIR --spm-model {path}`")
    state = parent.get("model")
    if not isinstance(state, Mapping):
        raise NmtError(f"--init-from {path}: not a model checkpoint (no 'model' entry)")
    for key, tensor in ours.items():
        if key not in state:
            raise NmtError(f"--init-from {path}: its model has no {key}, which this config's model has")
        if tuple(state[key].shape) != tuple(tensor.shape):
            raise NmtError(f"--init-from {path}: {key} is {tuple(state[key].shape)} in its model but "
                           f"{tuple(tensor.shape)} in this config's (model shapes must match)")
    extra = [key for key in state if key not in ours]
    if extra:
        raise NmtError(f"--init-from {path}: its model has {extra[0]}, which this config's model lacks (model "
                       "options must match)")
    merged = {key: (ours[key] if _reset_key(key, resets) else state[key]) for key in ours}
    has_gains = any(key.endswith("scoring.gain") for key in ours)
    has_mask = any(key.endswith("logit_mask") for key in ours)
    parts = [("QKNorm g", "gains", has_gains), ("logit mask", "logit_mask", has_mask)]
    taken = [name for name, reset, present in parts if present and reset not in resets]
    fresh = {"gains": "QKNorm g re-initialised from this run's L",
             "logit_mask": "logit mask from this run's training targets"}
    note = (f"initialised from {path} (its step {parent.get('step', '?')}): weights"
            + "".join(f", {name}" for name in taken) + " from it"
            + "".join(f"; {fresh[reset]}" for name, reset, present in parts if present and reset in resets)
            + "; optimizer, schedule, step, epoch and best score start fresh")
    return merged, note
