"""The residual and feed-forward blocks with :mod:`nmt.kernels.dropout`'s CPU dropout (their Linear layers are
swapped for :class:`~nmt.kernels.linear.PaddedLinear` on their own)."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor

from nmt.kernels.dropout import dropout
from nmt.modules.feedforward import FeedForward
from nmt.modules.layers import Residual


class FastResidual(Residual):
    """:class:`~nmt.modules.layers.Residual` with the CPU dropout."""

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre:
            return x + dropout(sublayer(self.norm(x)), self.dropout, self.training)
        return self.norm(x + dropout(sublayer(x), self.dropout, self.training))


class FastFeedForward(FeedForward):
    """:class:`~nmt.modules.feedforward.FeedForward` with the CPU dropout."""

    def forward(self, x: Tensor) -> Tensor:
        return self.down(dropout(F.relu(self.up(x)), self.act_dropout, self.training))
