"""Ensembles: several checkpoints decoding (or scoring) as one model, as fairseq's ``--path A:B`` does.

At every step each member advances its own incremental state and the ensemble's next-token distribution is the
members' average *probability*, in log space: ``logsumexp_m(log p_m) - log M`` (fairseq's ``EnsembleModel``). The
search and the scorer see one :class:`~nmt.search.Seq2Seq` whose state is the tuple of the members' states. Members
must share their SentencePiece model (the same pieces, the same ids); their architectures may differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from nmt.errors import NmtError


@dataclass(frozen=True)
class EnsembleState:
    """One incremental decoding state per member, rows aligned."""

    members: tuple[Any, ...]

    def select(self, index: Tensor) -> EnsembleState:
        return EnsembleState(tuple(state.select(index) for state in self.members))


def mean_log_probs(log_probs: Sequence[Tensor]) -> Tensor:
    """log of the members' mean probability; one member's log-probabilities are returned as they are."""
    if len(log_probs) == 1:
        return log_probs[0]
    return torch.logsumexp(torch.stack(list(log_probs)), dim=0) - math.log(len(log_probs))


class Ensemble(nn.Module):
    """Models of one vocabulary decoding as one (see the module docstring)."""

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = nn.ModuleList(members)

    def map(self, transform: Callable[[nn.Module], nn.Module]) -> Ensemble:
        """The ensemble of ``transform(member)`` for every member (e.g. an int8 copy of each)."""
        return Ensemble([transform(member) for member in self.members])

    @property
    def logit_mask(self) -> Tensor | None:
        """The types some member can predict (None when no member has a mask)."""
        masks = [getattr(member, "logit_mask", None) for member in self.members]
        if all(mask is None for mask in masks):
            return None
        kept = [mask if mask is not None else torch.ones_like(next(m for m in masks if m is not None))
                for mask in masks]
        return torch.stack(kept).any(dim=0)

    @property
    def max_positions(self) -> int:
        """Longest sequence every member's positions cover."""
        return min(int(getattr(member, "max_positions", 1 << 30)) for member in self.members)

    @torch.no_grad()
    def start(self, src: Tensor) -> EnsembleState:
        return EnsembleState(tuple(_call(member, "start", src) for member in self.members))

    @torch.no_grad()
    def step(self, prev: Tensor, state: EnsembleState) -> tuple[Tensor, EnsembleState]:
        outputs = [_call(member, "step", prev, member_state)
                   for member, member_state in zip(self.members, state.members, strict=True)]
        return mean_log_probs([log_probs for log_probs, _ in outputs]), EnsembleState(tuple(s for _, s in outputs))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced log-probabilities (B, T, V) of the ensemble (normalized: a log_softmax leaves them as
        they are), for scoring."""
        return mean_log_probs([torch.log_softmax(member(src, tgt_in).float(), dim=-1) for member in self.members])


def _call(member: nn.Module, method: str, *args: Any) -> Any:
    return getattr(member, method)(*args)


def check_same_pieces(models: Sequence[bytes], paths: Sequence[str]) -> None:
    """One line naming both checkpoints unless every SentencePiece model is the first one's."""
    for data, path in zip(models[1:], paths[1:], strict=True):
        if data != models[0]:
            raise NmtError(f"checkpoints {paths[0]} and {path} have different SentencePiece models; an ensemble needs "
                           "one vocabulary")
