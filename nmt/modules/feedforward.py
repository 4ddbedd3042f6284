"""Position-wise feed-forward block."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from nmt.modules import linear
from nmt.modules.dropout import dropout


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
        return linear.call(self.down, dropout(F.relu(linear.call(self.up, x)), self.act_dropout, self.training))
