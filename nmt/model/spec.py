"""What a model takes from its data besides the config: the vocabulary size, QKNorm's L, the target-vocabulary
logit mask and the SentencePiece model's digest.

Resolved once, when the data is loaded (:meth:`ModelSpec.resolve`, from the prepared data and the config), saved
once in every checkpoint (:meth:`ModelSpec.payload`; the logit mask travels as the model's buffer), read back by
:meth:`ModelSpec.from_payload`, and read by :func:`nmt.model.transformer.build_model`, which resolves nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from nmt.config import ModelConfig
from nmt.errors import NmtError
from nmt.vocab import spm_digest


def check_length(length: float, key: str = "model.qknorm_length") -> float:
    """QKNorm's L as a float, or a one-line error naming ``key`` when it is not > 1."""
    if not length > 1:
        raise NmtError(f"config key '{key}': L={length} must be > 1")
    return float(length)


@dataclass(frozen=True)
class ModelSpec:
    """The data-dependent facts a model is built from.

    Attributes:
        vocab_size: size of the joint vocabulary.
        qknorm_length: QKNorm's L (its initial gain is ``log2(L^2 - L)``); None when unknown.
        spm_sha256: the SentencePiece model's SHA-256 ("" when there is none, e.g. a toy model).
        logit_mask: the target types that may be predicted, (V,) bool (:func:`nmt.training.data.target_vocabulary`);
            None: every type (or what a checkpoint's buffer says once loaded).
        qknorm_length_source: where L came from, for the log and the resolved config.
    """

    vocab_size: int
    qknorm_length: float | None = None
    spm_sha256: str = ""
    logit_mask: Tensor | None = None
    qknorm_length_source: str = ""

    @classmethod
    def resolve(cls, cfg: ModelConfig, vocab_size: int, data_length: float | None, *, spm: bytes = b"",
                logit_mask: Tensor | None = None, data_name: str = "the training data") -> ModelSpec:
        """The spec of a new model: L is ``model.qknorm_length`` when set, else the data's 97.5th-percentile
        length ``data_length`` (the one place L is chosen)."""
        if cfg.qknorm_length is not None:
            length, source = check_length(cfg.qknorm_length), "config model.qknorm_length"
        elif data_length is not None:
            length, source = check_length(data_length), f"97.5th percentile of {data_name} lengths"
        else:
            length, source = None, ""
        return cls(vocab_size, length, spm_digest(spm) if spm else "", logit_mask, source)

    def payload(self) -> dict[str, Any]:
        """The checkpoint entries of this spec."""
        return {"vocab_size": self.vocab_size, "qknorm_length": self.qknorm_length, "spm_sha256": self.spm_sha256}

    @classmethod
    def from_payload(cls, payload: dict[str, Any], spm: bytes) -> ModelSpec:
        """The spec a checkpoint was built with (checkpoints written before ``spm_sha256`` existed: the digest of
        its SentencePiece bytes)."""
        length = payload.get("qknorm_length")
        return cls(int(payload["vocab_size"]), None if length is None else float(length),
                   str(payload.get("spm_sha256") or spm_digest(spm)), None, "checkpoint")

    def length_for(self, attention: str) -> float:
        """L for an attention that needs it, or the one-line error that says how to give it."""
        if self.qknorm_length is None:
            raise NmtError(f"model.attention is {attention} but model.qknorm_length is unset and no data length was "
                           "given; set model.qknorm_length (the L of g0 = log2(L^2 - L))")
        return self.qknorm_length
