"""The tied embedding's decoding caches and the CPU dropout.

Decoding calls the output projection once per step with the same weights: the FixNorm table (the unit-normalized
rows) is kept until the weight changes, and so are its cast to the autocast dtype (under autocast) and the masked
bias (autocast caches only leaf parameters' casts, and the table is not one), whose bf16 or fp32 pack
:mod:`nmt.kernels.linear` then keeps too. Every in-place update (optimizer step, ``load_state_dict``) bumps a
tensor's version counter, a move changes its address or dtype, and switching modes with ``train()`` drops both.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.kernels import linear
from nmt.kernels.dropout import dropout
from nmt.modules.embeddings import TiedEmbedding


class FastTiedEmbedding(TiedEmbedding):
    """:class:`~nmt.modules.embeddings.TiedEmbedding` with decoding caches (module doc) and the CPU dropout."""

    _table_cache: tuple[tuple[int, int, torch.dtype], Tensor] | None
    _cast_cache: tuple[tuple[int, int, int, int, int, torch.dtype], tuple[Tensor, Tensor]] | None

    def adopt(self) -> None:
        """Start with empty caches (called by :func:`nmt.kernels.accelerate` after the class swap)."""
        self._table_cache = None
        self._cast_cache = None

    def table(self) -> Tensor:
        if not self.fixnorm or self.training or torch.is_grad_enabled():
            return super().table()
        key = (self.weight._version, self.weight.data_ptr(), self.weight.dtype)
        if self._table_cache is None or self._table_cache[0] != key:
            self._table_cache = (key, F.normalize(self.weight.detach(), dim=-1))
        return self._table_cache[1]

    def train(self, mode: bool = True) -> FastTiedEmbedding:
        self._table_cache = None  # a fused optimizer step leaves the weight's version as it was: see drop_packs
        self._cast_cache = None
        linear.drop_packs(self)
        super().train(mode)
        return self

    def forward(self, tokens: Tensor, table: Tensor | None = None, offset: int = 0, side: int = 0) -> Tensor:
        return dropout(self.embed(tokens, table, offset, side), self.dropout, self.training)

    def logits(self, h: Tensor, table: Tensor | None = None) -> Tensor:
        table = self.table() if table is None else table
        device = h.device.type
        if not self.training and not torch.is_grad_enabled():  # decoding: the same operands every step
            dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
            return linear.linear(h, *self._decoding_operands(table, dtype, h), owner=self)
        return linear.linear(h, table, self.masked_bias(h))

    def _decoding_operands(self, table: Tensor, dtype: torch.dtype, h: Tensor) -> tuple[Tensor, Tensor]:
        """``table`` and the masked bias in ``dtype`` (the autocast dtype, else ``h``'s), kept until the table, bias
        or mask change: the same tensors each step, so a pack of them (:mod:`nmt.kernels.linear`) is built once."""
        mask_version = -1 if self.logit_mask is None else self.logit_mask._version
        key = (table.data_ptr(), table._version, self.weight._version, self.output_bias._version, mask_version, dtype)
        if self._cast_cache is None or self._cast_cache[0] != key:
            self._cast_cache = (key, (table.detach().to(dtype), self.masked_bias(h).detach().to(dtype)))
        return self._cast_cache[1]
