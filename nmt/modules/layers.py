"""Encoder and decoder layers (Vaswani et al. 2017, arXiv 1706.03762, Sec. 3.1); the PreNorm/PostNorm residual
placement (Nguyen & Salazar 2019, arXiv 1910.05895, Sec. 2.1) is written once, in :class:`Residual`."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from nmt.modules.attention import MultiHeadAttention
from nmt.modules.feedforward import FeedForward


class Residual(nn.Module):
    """A sublayer's residual connection with its norm and dropout.

    PreNorm: ``x + dropout(F(Norm(x)))`` (the stack then ends with a final norm); PostNorm:
    ``Norm(x + dropout(F(x)))``. See Nguyen & Salazar 2019 (arXiv 1910.05895) for why PreNorm trains more stably.

    Args:
        norm: a built norm module.
        dropout: residual dropout (training only).
        pre: PreNorm when True, PostNorm otherwise.
    """

    def __init__(self, norm: nn.Module, dropout: float, pre: bool) -> None:
        super().__init__()
        self.norm = norm
        self.dropout = dropout
        self.pre = pre

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre:
            return x + F.dropout(sublayer(self.norm(x)), self.dropout, self.training)
        return self.norm(x + F.dropout(sublayer(x), self.dropout, self.training))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a :class:`Residual`."""

    def __init__(self, self_attn: MultiHeadAttention, ffn: FeedForward, attn_res: Residual, ffn_res: Residual) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.ffn = ffn
        self.attn_res = attn_res
        self.ffn_res = ffn_res

    def forward(self, x: Tensor, mask: Tensor | None, record: list[Tensor] | None = None) -> Tensor:
        """``x`` (B, S, D), ``mask`` boolean (B, 1, 1, S) or None; returns (B, S, D)."""
        x = self.attn_res(x, lambda h: self.self_attn(h, mask=mask, record=record))
        return self.ffn_res(x, self.ffn)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder output, then feed-forward."""

    def __init__(
        self,
        self_attn: MultiHeadAttention,
        cross_attn: MultiHeadAttention,
        ffn: FeedForward,
        self_res: Residual,
        cross_res: Residual,
        ffn_res: Residual,
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.cross_attn = cross_attn
        self.ffn = ffn
        self.self_res = self_res
        self.cross_res = cross_res
        self.ffn_res = ffn_res

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        records: tuple[list[Tensor], list[Tensor]] | None = None,
    ) -> Tensor:
        """Full-sequence pass: ``x`` (B, T, D), ``memory`` (B, S, D); returns (B, T, D).

        ``records``, if given, collects (self-attention, cross-attention) weights through the explicit path.
        """
        self_rec, cross_rec = records if records is not None else (None, None)
        x = self.self_res(x, lambda h: self.self_attn(h, is_causal=True, record=self_rec))
        x = self.cross_res(x, lambda h: self.cross_attn(h, memory=memory, mask=src_mask, record=cross_rec))
        return self.ffn_res(x, self.ffn)
