"""A model rebuilt from a checkpoint alone (:func:`restore_model`: its config, SentencePiece model and weights, with
the speed wing applied), and the entries a decoding process needs to rebuild the same model (:func:`restorable`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nmt import kernels
from nmt.checkpoint.files import tensor_to_bytes
from nmt.config import Config, config_from_dict
from nmt.data.bpe import SentencePieceTokenizer
from nmt.errors import NmtError
from nmt.model.spec import ModelSpec
from nmt.model.transformer import Transformer, build_model


def restorable(payload: dict[str, Any], state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The entries of a loaded checkpoint that :func:`restore_model` reads, with ``state`` as the weights (the
    restored model's own ``state_dict()``, which shares its tensors: no second copy) and no training state."""
    spm = tensor_to_bytes(payload["spm"])
    return {"model": state, "config": payload["config"], "spm": payload["spm"],
            **ModelSpec.from_payload(payload, spm).payload()}


def restore_model(payload: dict[str, Any], device: str | torch.device = "cpu", *,
                  path: str | Path | None = None) -> tuple[Transformer, Config, SentencePieceTokenizer]:
    """Rebuild the model, its config and its SentencePiece tokenizer from a checkpoint alone.

    Args:
        payload: a loaded checkpoint (see :func:`load_checkpoint`).
        device: where to put the model; it is returned in ``eval()`` mode.
        path: the checkpoint's file name, for error messages.

    Returns:
        ``(model, config, tokenizer)``: a :class:`nmt.model.transformer.Transformer`, the :class:`nmt.config.Config` it
        was trained with, and a :class:`nmt.data.bpe.SentencePieceTokenizer`.

    Raises:
        NmtError: the config is invalid or the state dict does not match the architecture it describes.
    """
    name = path if path is not None else "<in memory>"
    for key in ("spm", "vocab_size"):
        if key not in payload:
            raise NmtError(f"checkpoint {name} has no '{key}' entry (not a complete nmt checkpoint)")
    try:
        config = config_from_dict(payload["config"])
    except NmtError as exc:
        raise NmtError(f"checkpoint {name}: {exc}") from None
    spm = tensor_to_bytes(payload["spm"])
    model = build_model(config.model, ModelSpec.from_payload(payload, spm))
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())
        raise NmtError(f"checkpoint {name} does not match the architecture in its config ({detail[:300]})") from None
    kernels.accelerate(model).to(device).eval()
    return model, config, SentencePieceTokenizer(spm)
