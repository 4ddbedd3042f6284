"""Joint-vocabulary token embeddings tied across encoder input, decoder input and output (Press & Wolf 2017,
arXiv 1608.05859), sinusoidal positions (arXiv 1706.03762, Sec. 3.5), and FixNorm (Nguyen & Salazar 2019,
arXiv 1910.05895, Sec. 2.3: every embedding row l2-normalized to unit length)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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
    rows and a zero-initialized bias. The PAD row is initialized like every other row (as in the official code): a
    zero row would make FixNorm's normalization divide by ~1e-12, a first-step gradient norm of ~1e10 that clipping
    turns into ~1e-10 updates for every other parameter. It receives no gradient from lookups.

    Two options of the official models (github.com/CyndxAI/QKNorm ``model.py``):

    - a learned language embedding: row 0 (source language) is added to every source input token, row 1 (target
      language) to every target input token, initialized N(0, d^-0.5);
    - a target-vocabulary logit mask (``logit_mask``, a bool buffer over the vocabulary, True = kept): logits of
      every other type are set to -1e9 (folded into the output bias, so the mask costs one (V,) op per call).

    Args:
        vocab_size: size of the joint vocabulary.
        d_model: model width.
        fixnorm: normalize rows to unit length.
        max_positions: rows of the sinusoidal position table.
        dropout: dropout on the summed token + position embedding (training only).
        word_dropout: probability of replacing an input token by UNK (training only).
        lang_embedding: add a learned embedding per side (source, target) to every input token.
        logit_mask: keep a target-vocabulary logit mask buffer (all True until set, e.g. by ``build_model``).
    """

    positions: Tensor  # (max_positions, D), a non-persistent buffer: rebuilt, never checkpointed
    logit_mask: Tensor | None  # (V,) bool, True = may be predicted; checkpointed

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        fixnorm: bool,
        max_positions: int,
        dropout: float = 0.0,
        word_dropout: float = 0.0,
        lang_embedding: bool = False,
        logit_mask: bool = False,
    ) -> None:
        super().__init__()
        self.fixnorm = fixnorm
        self.scale = math.sqrt(d_model)
        self.dropout = dropout
        self.word_dropout = word_dropout
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.output_bias = nn.Parameter(torch.zeros(vocab_size))
        self.lang_embedding = nn.Parameter(torch.empty(2, d_model)) if lang_embedding else None
        self.register_buffer("logit_mask", torch.ones(vocab_size, dtype=torch.bool) if logit_mask else None)
        self.register_buffer("positions", sinusoidal_positions(max_positions, d_model), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.fixnorm:
                self.weight.uniform_(-0.01, 0.01)
            else:
                self.weight.normal_(0.0, self.weight.size(1) ** -0.5)
            self.output_bias.zero_()
            if self.lang_embedding is not None:
                self.lang_embedding.normal_(0.0, self.weight.size(1) ** -0.5)

    def table(self) -> Tensor:
        """The rows as used (unit-normalized under FixNorm), (V, D); compute once and pass to both uses."""
        return F.normalize(self.weight, dim=-1) if self.fixnorm else self.weight

    def forward(self, tokens: Tensor, table: Tensor | None = None, offset: int = 0, side: int = 0) -> Tensor:
        """Embed ``tokens`` (B, T) at positions ``offset .. offset+T-1``, with dropout; returns (B, T, D).

        ``side`` is 0 for source tokens and 1 for target tokens (it picks the language embedding row, if any).
        """
        return F.dropout(self.embed(tokens, table, offset, side), self.dropout, self.training)

    def embed(self, tokens: Tensor, table: Tensor | None = None, offset: int = 0, side: int = 0) -> Tensor:
        """:meth:`forward` before its dropout: ``sqrt(d) * w[token] + P[position] (+ language row)``."""
        T = tokens.size(1)
        if offset + T > self.positions.size(0):
            raise ValueError(f"sequence of {offset + T} tokens exceeds max_positions {self.positions.size(0)}")
        if self.training and self.word_dropout > 0:
            tokens = word_dropout(tokens, self.word_dropout)
        table = self.table() if table is None else table
        x = F.embedding(tokens, table, padding_idx=PAD) * self.scale + self.positions[offset : offset + T]
        if self.lang_embedding is not None:
            x = x + self.lang_embedding[side]
        return x

    def set_logit_mask(self, keep: Tensor) -> None:
        """Set the target-vocabulary mask (V,) bool, True = may be predicted."""
        if self.logit_mask is None:
            raise ValueError("this embedding was built without a logit mask")
        if keep.shape != self.logit_mask.shape:
            raise ValueError(f"logit mask of shape {tuple(keep.shape)}, expected {tuple(self.logit_mask.shape)}")
        self.logit_mask.copy_(keep)

    def logits(self, h: Tensor, table: Tensor | None = None) -> Tensor:
        """Output logits ``h . w^T + bias``, masked types at -1e9: (..., D) -> (..., V)."""
        return F.linear(h, self.table() if table is None else table, self.masked_bias(h))

    def masked_bias(self, h: Tensor) -> Tensor:
        """The output bias with the logit mask folded in (masked types at :func:`masked_logit` for ``h``)."""
        bias: Tensor = self.output_bias
        if self.logit_mask is not None:
            bias = bias.masked_fill(~self.logit_mask, masked_logit(h))
        return bias


MASKED_LOGIT = -1e9  # the official value (model.py logit_fn); exp underflows to exactly 0 in every float dtype


def masked_logit(h: Tensor) -> float:
    """-1e9, or half the most negative finite value of the dtype the output projection runs in (fp16: -32752),
    so masked logits stay finite and the smoothing term's ``0 * log p`` is 0, never NaN."""
    device = h.device.type
    dtype = h.dtype
    if torch.is_autocast_enabled(device):
        get_dtype = getattr(torch, "get_autocast_dtype", None)  # torch >= 2.4; before it, assume the narrowest
        dtype = get_dtype(device) if get_dtype is not None else torch.float16
    return max(MASKED_LOGIT, torch.finfo(dtype).min / 2)
