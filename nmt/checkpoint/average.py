"""Checkpoint averaging: the element-wise mean of the model parameters of several checkpoints.

Only compatible checkpoints are averaged: the same model architecture (the ``model`` config section without its
dropout rates, which do not change the parameters), the same vocabulary and SentencePiece model, and the same state
dict keys and shapes; otherwise an :class:`~nmt.errors.NmtError` names the checkpoint and what differs. Floating
tensors are averaged in float64 and cast back; other tensors (integer buffers) are taken from the first checkpoint.
The result keeps the first checkpoint's config, SentencePiece model and metadata and drops the training state
(optimizer, scheduler, scaler, RNG, data position), so it is for translation, not for resuming training.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint.files import load_checkpoint, model_payload, tensor_to_bytes
from nmt.errors import NmtError
from nmt.vocab import spm_digest

NON_ARCHITECTURE = ("dropout", "attn_dropout", "act_dropout", "word_dropout")
NUMBERED = re.compile(r"checkpoint_(\d+)\.pt")


def spec_entries(payload: dict[str, Any], spm: bytes) -> dict[str, Any]:
    """The model-spec entries of a checkpoint, as :meth:`nmt.model.spec.ModelSpec.payload` writes them (checkpoints
    written before ``spm_sha256`` existed get the digest of their SentencePiece bytes)."""
    length = payload.get("qknorm_length")
    return {"vocab_size": int(payload["vocab_size"]), "qknorm_length": None if length is None else float(length),
            "spm_sha256": str(payload.get("spm_sha256") or spm_digest(spm))}


def numbered_checkpoints(directory: str | Path) -> list[tuple[int, Path]]:
    """The ``checkpoint_<step>.pt`` files that ``train.save_every`` keeps in ``directory``, oldest first."""
    found = [(int(match.group(1)), path) for path in Path(directory).iterdir()
             if (match := NUMBERED.fullmatch(path.name)) and path.is_file()]
    return sorted(found)


def last_checkpoints(directory: str | Path, count: int, upper_bound: int | None = None) -> list[Path]:
    """The ``count`` newest numbered checkpoints of ``directory`` (steps <= ``upper_bound`` when given), newest
    first: fairseq's ``average_checkpoints.py --num-update-checkpoints N --checkpoint-upper-bound U``.

    Raises:
        NmtError: ``directory`` is not a directory, ``count`` < 1, or fewer than ``count`` checkpoints qualify.
    """
    if not Path(directory).is_dir():
        raise NmtError(f"{directory}: not a directory of checkpoints")
    if count < 1:
        raise NmtError(f"--num-update-checkpoints must be at least 1, got {count}")
    steps = [(step, path) for step, path in numbered_checkpoints(directory)
             if upper_bound is None or step <= upper_bound]
    if len(steps) < count:
        bound = f" at or before step {upper_bound}" if upper_bound is not None else ""
        raise NmtError(f"{directory}: {len(steps)} checkpoint_<step>.pt files{bound}, need {count} "
                       "(train.save_every keeps them)")
    return [path for _, path in reversed(steps[-count:])]


def _architecture(payload: dict[str, Any]) -> dict[str, Any]:
    model = dict(payload["config"].get("model", {}))
    return {k: v for k, v in model.items() if k not in NON_ARCHITECTURE}


def check_compatible(first: dict[str, Any], other: dict[str, Any], first_name: str, other_name: str) -> None:
    """Raise :class:`NmtError` unless ``other`` has the same architecture, vocabulary and parameter shapes."""
    arch_a, arch_b = _architecture(first), _architecture(other)
    for key in sorted(set(arch_a) | set(arch_b)):
        if arch_a.get(key) != arch_b.get(key):
            raise NmtError(f"cannot average {other_name} with {first_name}: model.{key} is {arch_b.get(key)!r} "
                           f"vs {arch_a.get(key)!r}")
    if first.get("vocab_size") != other.get("vocab_size"):
        raise NmtError(f"cannot average {other_name} with {first_name}: vocab_size {other.get('vocab_size')} vs "
                       f"{first.get('vocab_size')}")
    spm_a, spm_b = first.get("spm"), other.get("spm")
    if spm_a is not None and spm_b is not None and not torch.equal(spm_a, spm_b):
        raise NmtError(f"cannot average {other_name} with {first_name}: different SentencePiece models")
    state_a, state_b = first["model"], other["model"]
    if set(state_a) != set(state_b):
        diff = sorted(set(state_a) ^ set(state_b))
        raise NmtError(f"cannot average {other_name} with {first_name}: parameter names differ ({', '.join(diff[:5])})")
    for key, tensor in state_a.items():
        if tensor.shape != state_b[key].shape:
            raise NmtError(f"cannot average {other_name} with {first_name}: {key} has shape "
                           f"{tuple(state_b[key].shape)} vs {tuple(tensor.shape)}")


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating tensors (accumulated in float64); other tensors from the first state."""
    averaged: dict[str, torch.Tensor] = {}
    for key, first in states[0].items():
        if not torch.is_floating_point(first):
            averaged[key] = first.clone()
            continue
        total = torch.zeros_like(first, dtype=torch.float64)
        for state in states:
            total += state[key].to(torch.float64)
        averaged[key] = (total / len(states)).to(first.dtype)
    return averaged


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Load, check and average the checkpoints at ``paths``; returns a translation checkpoint payload.

    Raises:
        NmtError: no paths, an unreadable checkpoint, or incompatible checkpoints.
    """
    if not paths:
        raise NmtError("no checkpoints to average")
    payloads = [load_checkpoint(path) for path in paths]
    for path, payload in zip(paths[1:], payloads[1:]):
        check_compatible(payloads[0], payload, str(paths[0]), str(path))
    first = payloads[0]
    for key in ("spm", "vocab_size"):
        if key not in first:
            raise NmtError(f"checkpoint {paths[0]} has no '{key}' entry (not a complete nmt checkpoint)")
    spm = tensor_to_bytes(first["spm"])
    result = model_payload(average_state_dicts([payload["model"] for payload in payloads]), first["config"], spm,
                           spec_entries(first, spm), int(first.get("step", 0)), int(first.get("epoch", 0)))
    result["averaged_from"] = [str(path) for path in paths]
    return result
