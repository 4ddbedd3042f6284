"""Joint-vocabulary token embeddings tied across encoder input, decoder input and output, plus positions."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.modules.dropout import dropout
from nmt.vocab import PAD, SPECIALS, UNK


def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """Sinusoidal position table (n_positions, d_model): sin on even dimensions, cos on odd ones.

    ``P[p, 2i] = sin(p / 10000^(2i/d))`` and ``P[p, 2i+1] = cos(p / 10000^(2i/d))`` (arXiv 1706.03762).
    """
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = position * inv_freq  # (P, 1) * (D/2,) -> (P, D/2)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


def word_dropout(tokens: Tensor, p: float) -> Tensor:
    """Replace each ordinary token (not PAD/UNK/BOS/EOS) by UNK with probability ``p``."""
    drop = torch.rand(tokens.shape, device=tokens.device) < p
    return tokens.masked_fill(drop & (tokens >= SPECIALS), UNK)


class TiedEmbedding(nn.Module):
    """One embedding matrix shared by the source input, the target input and the output projection.

    With FixNorm (Nguyen & Salazar 2019, arXiv 1910.05895) the rows are l2-normalized to unit length wherever they
    are used, initialized U(-0.01, 0.01); without it they are initialized N(0, d^-0.5). Input embeddings are
    scaled by sqrt(d_model) in both cases, and the output logits are ``h . w^T + bias`` with ``w`` the (normalized)
    rows and a zero-initialized bias. The PAD row starts at zero and receives no gradient from lookups.

    Args:
        vocab_size: size of the joint vocabulary.
        d_model: model width.
        fixnorm: normalize rows to unit length.
        max_positions: rows of the sinusoidal position table.
        dropout: dropout on the summed token + position embedding (training only).
        word_dropout: probability of replacing an input token by UNK (training only).
    """

    positions: Tensor  # (max_positions, D), a non-persistent buffer: rebuilt, never checkpointed

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        fixnorm: bool,
        max_positions: int,
        dropout: float = 0.0,
        word_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.fixnorm = fixnorm
        self.scale = math.sqrt(d_model)
        self.dropout = dropout
        self.word_dropout = word_dropout
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.output_bias = nn.Parameter(torch.zeros(vocab_size))
        self.register_buffer("positions", sinusoidal_positions(max_positions, d_model), persistent=False)
        self._table_cache: tuple[tuple[int, int, torch.dtype], Tensor] | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.fixnorm:
                self.weight.uniform_(-0.01, 0.01)
            else:
                self.weight.normal_(0.0, self.weight.size(1) ** -0.5)
            self.weight[PAD].zero_()
            self.output_bias.zero_()

    def table(self) -> Tensor:
        """The rows as used (unit-normalized under FixNorm), (V, D); compute once and pass to both uses.

        In eval mode without autograd (decoding) the normalized table is cached until the weight changes: every
        in-place update (optimizer step, ``load_state_dict``) bumps the tensor's version counter, a move changes its
        address or dtype, and switching modes with :meth:`train` drops the cache.
        """
        if not self.fixnorm:
            return self.weight
        if self.training or torch.is_grad_enabled():
            return F.normalize(self.weight, dim=-1)
        key = (self.weight._version, self.weight.data_ptr(), self.weight.dtype)
        if self._table_cache is None or self._table_cache[0] != key:
            self._table_cache = (key, F.normalize(self.weight.detach(), dim=-1))
        return self._table_cache[1]

    def train(self, mode: bool = True) -> TiedEmbedding:
        self._table_cache = None
        return super().train(mode)

    def forward(self, tokens: Tensor, table: Tensor | None = None, offset: int = 0) -> Tensor:
        """Embed ``tokens`` (B, T) at positions ``offset .. offset+T-1``; returns (B, T, D)."""
        T = tokens.size(1)
        if offset + T > self.positions.size(0):
            raise ValueError(f"sequence of {offset + T} tokens exceeds max_positions {self.positions.size(0)}")
        if self.training and self.word_dropout > 0:
            tokens = word_dropout(tokens, self.word_dropout)
        table = self.table() if table is None else table
        x = F.embedding(tokens, table, padding_idx=PAD) * self.scale + self.positions[offset : offset + T]
        return dropout(x, self.dropout, self.training)

    def logits(self, h: Tensor, table: Tensor | None = None) -> Tensor:
        """Output logits ``h . w^T + bias``: (..., D) -> (..., V)."""
        return F.linear(h, self.table() if table is None else table, self.output_bias)
