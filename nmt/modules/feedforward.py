"""The position-wise feed-forward block ``FFN(x) = max(0, x W1 + b1) W2 + b2`` (arXiv 1706.03762, Eq. 2)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class FeedForward(nn.Module):
    """``down(dropout(relu(up(x))))`` applied at every position (Vaswani et al. 2017, arXiv 1706.03762).

    Args:
        d_model: model width.
        d_ff: hidden width.
        act_dropout: dropout on the ReLU activations (training only).
    """

    def __init__(self, d_model: int, d_ff: int, act_dropout: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.act_dropout = act_dropout

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.dropout(F.relu(self.up(x)), self.act_dropout, self.training))
