"""An exponential moving average of the weights (``train.ema_decay``), as fairseq's ``--ema-decay`` and Eole's
``average_decay``.

After update ``t`` every floating-point parameter's average moves toward the weights just written:
``ema = decay * ema + (1 - decay) * weight`` (fairseq's ``EMA.step``), kept in fp32 beside the weights whatever the
training precision. Until ``train.ema_start`` updates have run the average is a plain copy of the weights
(fairseq's ``--ema-start-update``). Buffers (the positional table, a logit mask) are not averaged: the average's
state dict takes them from the model, as fairseq's copies them.

Every rank of a DDP group holds the same weights after each update, so every rank computes the same average; the
trainer checks this at each checkpoint (:func:`check_equal_across_ranks`). The average rides in
``checkpoint_last.pt`` (entry ``ema``), so a resumed run continues it bitwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from nmt.errors import NmtError


class WeightAverage:
    """The fp32 moving average of ``model``'s floating-point parameters."""

    def __init__(self, model: torch.nn.Module, decay: float, start: int = 0) -> None:
        if not 0.0 < decay < 1.0:
            raise NmtError(f"config key 'train.ema_decay': {decay} must be in (0, 1) to average (0 turns it off)")
        self.decay, self.start = decay, start
        named = [(name, p) for name, p in model.named_parameters() if p.dtype.is_floating_point]
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        # every name a parameter has in the state dict (a tied weight has several)
        self.aliases: dict[str, int] = {}
        index = {id(p): i for i, p in enumerate(self.params)}
        for name, p in model.named_parameters(remove_duplicate=False):
            if id(p) in index:
                self.aliases[name] = index[id(p)]
        self.shadow = [p.detach().float().clone() for p in self.params]

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Fold in the weights after update ``step`` (1-based): a copy up to ``start``, then the moving average."""
        weights = [p.detach().float() for p in self.params]
        if step <= self.start:
            torch._foreach_copy_(self.shadow, weights)
        else:
            torch._foreach_lerp_(self.shadow, weights, 1.0 - self.decay)

    def state_dict(self) -> dict[str, Tensor]:
        """The averages by parameter name (what ``checkpoint_last.pt`` keeps under ``ema``)."""
        return {name: t for name, t in zip(self.names, self.shadow, strict=True)}

    def load_state_dict(self, state: dict[str, Tensor], where: str) -> None:
        """Continue from a checkpoint's averages; ``where`` names it in the one-line error."""
        missing = [n for n in self.names if n not in state]
        extra = [n for n in state if n not in set(self.names)]
        if missing or extra:
            what = f"lacks {missing[0]}" if missing else f"has unknown {extra[0]}"
            raise NmtError(f"checkpoint {where}: its weight average (ema) {what}; not from this model")
        with torch.no_grad():
            for name, t in zip(self.names, self.shadow, strict=True):
                t.copy_(state[name].to(t.device, torch.float32))

    def model_state(self, model: torch.nn.Module) -> dict[str, Tensor]:
        """``model.state_dict()`` with the averages in place of the parameters, in the parameters' dtypes."""
        state = dict(model.state_dict())
        for name, i in self.aliases.items():
            state[name] = self.shadow[i].to(self.params[i].dtype).clone()
        return state

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The averages in the model's parameters for the ``with`` body, then the trained weights back bitwise
        (the copies bump version counters, so the decoding caches of :mod:`nmt.kernels` rebuild)."""
        with torch.no_grad():
            kept = [p.detach().clone() for p in self.params]
            for p, t in zip(self.params, self.shadow, strict=True):
                p.copy_(t)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, t in zip(self.params, kept, strict=True):
                    p.copy_(t)

    def digest(self) -> Tensor:
        """Two float64 sums that differ when any average differs (for the DDP agreement check)."""
        total = torch.zeros(2, dtype=torch.float64)
        for i, t in enumerate(self.shadow):
            flat = t.detach().double().flatten().cpu()
            total[0] += flat.sum()
            total[1] += (flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64)).sum() * (i + 1)
        return total


def check_equal_across_ranks(average: WeightAverage, world_size: int, rank: int) -> None:
    """Every rank's average must be the same (a collective: every rank calls it); a mismatch is a one-line error."""
    import torch.distributed as dist

    mine = average.digest().tolist()
    gathered: list[object] = [None] * world_size
    dist.all_gather_object(gathered, mine)  # plain floats: works on every backend, the tensors stay where they are
    for other, theirs in enumerate(gathered):
        if theirs != gathered[0]:
            raise NmtError(f"weight average (train.ema_decay) of rank {other} differs from rank 0's (seen on rank "
                           f"{rank}): the ranks' weights diverged")
