"""Multi-head attention with pluggable query/key scoring (Vaswani et al. 2017, arXiv 1706.03762, Eq. 1-2).

``Attention(Q, K, V) = softmax(s * f(Q) g(K)^T) V`` per head, where a scoring module names the transforms ``f`` and
``g`` of the per-head queries and keys and the logit scale ``s``: plain scaled dot product (``s = 1/sqrt(d_head)``),
QKNorm (Henry et al. 2020, arXiv 2010.04245, Eq. 3: ``s * f(q) . g(k) = g0 * q/||q|| . k/||k||``) or per-head
RMSNorm. Keys are transformed before anything is cached, so incremental decoding never renormalizes old keys.

This is the plain form of the maths: ``nn.Linear`` projections, one ``F.scaled_dot_product_attention`` call, and an
explicit path that also returns the softmax weights (attention maps). The speed wing (:mod:`nmt.kernels`) swaps in
subclasses with the same parameters and results.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.modules.norms import RMSNorm


class Scoring(nn.Module):
    """How per-head queries and keys are scored: transforms applied to each, and the logit scale.

    Subclasses share the constructor ``(d_head, length)`` so :data:`ATTENTIONS` maps a name to a constructor.
    """

    scale: float | None = None  # None: scaled_dot_product_attention's default 1/sqrt(d_head)
    needs_length: bool = False  # True: the constructor needs L (build_model resolves it, or fails naming the key)

    def __init__(self, d_head: int, length: float | None = None) -> None:
        super().__init__()

    def queries(self, q: Tensor) -> Tensor:
        """Transform queries (B, H, T, D/H) before the dot product."""
        return q

    def keys(self, k: Tensor) -> Tensor:
        """Transform keys (B, H, S, D/H) before the dot product (and before caching)."""
        return k


class ScaledDot(Scoring):
    """Scaled dot-product scoring ``q . k / sqrt(d_head)`` (Vaswani et al. 2017, arXiv 1706.03762, Eq. 1).

    Args:
        d_head: size of one head (unused).
        length: unused.
    """


def qknorm_gain_init(length: float) -> float:
    """Initial QKNorm gain ``g0 = log2(L^2 - L)`` for sequence length ``L`` (arXiv 2010.04245, Sec. 3)."""
    return math.log2(length * length - length)


def unit_norm(x: Tensor, scale: Tensor | None = None) -> Tensor:
    """``x / max(||x||_2, 1e-12)`` over the last dimension (times the scalar ``scale``), computed in at least
    float32 and returned in ``x``'s dtype."""
    wide = torch.promote_types(x.dtype, torch.float32)
    y = F.normalize(x.to(wide), dim=-1)
    if scale is not None:
        y = y * scale.to(wide)
    return y.to(x.dtype)


class QKNorm(Scoring):
    """Query-Key Normalization (Henry et al. 2020, arXiv 2010.04245).

    Queries and keys are l2-normalized along the head dimension and the logits are ``g * q_hat . k_hat``, so every
    logit lies in ``[-|g|, |g|]``. One learnable scalar ``g`` per attention module, shared by all heads,
    initialized to ``log2(L^2 - L)``. ``g`` is folded into the queries so the attention kernel runs with ``scale=1``.

    Args:
        d_head: size of one head (unused).
        length: ``L``, the 97.5th percentile of training sequence lengths.
    """

    scale: float | None = 1.0
    needs_length = True

    def __init__(self, d_head: int, length: float | None = None) -> None:
        super().__init__(d_head)
        if length is None:
            raise ValueError("QKNorm needs the sequence length L to initialize its gain")
        self.gain = nn.Parameter(torch.tensor(qknorm_gain_init(length)))

    def queries(self, q: Tensor) -> Tensor:
        return unit_norm(q, self.gain)

    def keys(self, k: Tensor) -> Tensor:
        return unit_norm(k)


class QKRMSNorm(Scoring):
    """Per-head RMSNorm on queries and keys (RMSNorm: Zhang & Sennrich 2019, arXiv 1910.07467).

    The modern "QK-norm" variant: separate learned per-dimension gains of size ``d_head`` for queries and keys,
    shared by all heads, followed by the usual ``1/sqrt(d_head)`` scaling.

    Args:
        d_head: size of one head.
        length: unused.
    """

    scale: float | None = None

    def __init__(self, d_head: int, length: float | None = None) -> None:
        super().__init__(d_head)
        self.q_norm = RMSNorm(d_head)
        self.k_norm = RMSNorm(d_head)

    def queries(self, q: Tensor) -> Tensor:
        return self.q_norm(q).to(q.dtype)  # autocast may run the norm in float32

    def keys(self, k: Tensor) -> Tensor:
        return self.k_norm(k).to(k.dtype)


ATTENTIONS: dict[str, type[Scoring]] = {
    "scaled_dot": ScaledDot,
    "qknorm": QKNorm,
    "qk_rmsnorm": QKRMSNorm,
}


# CPU decoding in bf16/fp16 pads attention keys to a multiple of this many positions (masked): the CPU kernels' sums
# over keys then round the same however long the batch's longest source is (measured on AMD Zen 4: fp32 and bf16)
KEY_BLOCK = 16


def pads_keys(x: Tensor) -> bool:
    """Whether attention over ``x``'s keys is padded (:func:`pad_keys`) when decoding: on CPU under bf16/fp16
    autocast, where a batch's padding changed 1 translation in 8 (351 of 400 test sentences the same in length-sorted
    batches of 64 and in shuffled ones of 32; 399 padded; ``bench/batch-invariance-2026-12-08/``). fp32 is not
    padded: there the difference is in the scores' last bits (no translation changed), and the padding cost 3-6%
    of fp32 decoding's speed."""
    return x.device.type == "cpu" and torch.is_autocast_enabled("cpu")


def pad_keys(mask: Tensor | None, batch: int, *keys: Tensor) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Key-side tensors (keys, values: positions on dimension -2) zero-padded to a multiple of :data:`KEY_BLOCK`
    positions, and the boolean key mask (``batch``, 1, 1, S) that hides the padding (built when ``mask`` is None).

    A sentence's attention then does not depend on its batch: CPU attention sums the keys' terms in vector lanes and
    a scalar tail, and a tail whose length is the batch's longest source rounds differently from one batch to the
    next (1e-7 in fp32, 1e-2 in bf16: enough to change a bf16 translation), while whole blocks of masked zeros add
    exact zeros to the same lanes."""
    positions = keys[0].size(-2)
    extra = -positions % KEY_BLOCK
    if mask is None:
        mask = torch.ones(batch, 1, 1, positions, dtype=torch.bool, device=keys[0].device)
    if extra:
        mask = F.pad(mask, (0, extra), value=False)
        keys = tuple(F.pad(k, (0, 0, 0, extra)) for k in keys)
    return mask, keys


def heads(x: Tensor) -> tuple[Tensor, ...]:
    """A projection's ``P`` parts, (B, T, P, H, D/H) -> P views (B, H, T, D/H)."""
    return x.permute(2, 0, 3, 1, 4).unbind(0)


class MultiHeadAttention(nn.Module):
    """Multi-head attention; self-attention uses one fused ``d -> 3d`` projection.

    Cross-attention uses the same parameter layout, projecting queries with the first ``d`` rows and the memory's
    keys and values with the last ``2d`` rows. Masks are boolean, ``True`` = may attend, broadcastable to
    ``(B, H, Tq, Tk)``.

    Args:
        d_model: model width.
        n_heads: number of heads; must divide ``d_model``.
        scoring: a built scoring module (:class:`ScaledDot`, :class:`QKNorm` or :class:`QKRMSNorm`).
        dropout: dropout on the attention weights (training only).
    """

    def __init__(self, d_model: int, n_heads: int, scoring: Scoring, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.scoring = scoring
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def project_rows(self, x: Tensor, rows: slice) -> Tensor:
        """``x`` (..., D) through the output rows ``rows`` of the input projection."""
        bias = None if self.in_proj.bias is None else self.in_proj.bias[rows]
        return F.linear(x, self.in_proj.weight[rows], bias)

    def project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Scored queries, scored keys and values of ``x`` (B, T, D), each (B, H, T, D/H)."""
        B, T, _ = x.shape
        q, k, v = heads(self.in_proj(x).view(B, T, 3, self.n_heads, self.d_head))
        return self.scoring.queries(q), self.scoring.keys(k), v

    def project_queries(self, x: Tensor) -> Tensor:
        """Scored queries of ``x`` (B, T, D) for cross-attention, (B, H, T, D/H)."""
        B, T, _ = x.shape
        q = self.project_rows(x, slice(0, self.d_model)).view(B, T, self.n_heads, self.d_head)
        return self.scoring.queries(q.transpose(1, 2))

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Scored keys and values of the encoder output ``memory`` (B, S, D), each (B, H, S, D/H)."""
        B, S, _ = memory.shape
        kv = self.project_rows(memory, slice(self.d_model, 3 * self.d_model))
        k, v = heads(kv.view(B, S, 2, self.n_heads, self.d_head))
        return self.scoring.keys(k), v

    def merge(self, out: Tensor) -> Tensor:
        """Per-head outputs (B, H, T, D/H) merged and projected: (B, T, D)."""
        B, _, T, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.d_model))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """``softmax(scale * q k^T) v`` through ``F.scaled_dot_product_attention``, merged: (B, Tq, D)."""
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=is_causal,
            scale=self.scoring.scale,
        )
        return self.merge(out)

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Attention logits ``scale * q k^T`` (B, H, Tq, Tk) in float32 (float64 inputs: float64); under autocast in
        its dtype."""
        scale = self.scoring.scale if self.scoring.scale is not None else 1.0 / math.sqrt(q.size(-1))
        if torch.is_autocast_enabled(q.device.type):  # autocast runs the matmul in its own dtype
            logits = torch.matmul(q, k.transpose(-1, -2))
        else:
            wide = torch.promote_types(q.dtype, torch.float32)
            logits = torch.matmul(q.to(wide), k.to(wide).transpose(-1, -2))
        return logits if scale == 1.0 else logits * scale

    def weights(self, q: Tensor, k: Tensor, mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """The softmax attention weights (B, H, Tq, Tk) in float32."""
        logits = self.scores(q, k)
        if is_causal:
            Tq, Tk = logits.shape[-2:]
            causal = torch.ones(Tq, Tk, dtype=torch.bool, device=logits.device).tril()
            mask = causal if mask is None else mask & causal
        return self.softmax(logits, mask)

    def softmax(self, logits: Tensor, mask: Tensor | None) -> Tensor:
        """``softmax(logits)`` over the keys ``mask`` allows; a fully masked row attends to nothing (zeros), as in
        the fused kernel."""
        if mask is None:
            return logits.softmax(-1)
        return logits.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)

    def attend_with_weights(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Explicit path: returns the output (B, Tq, D) and the softmax weights (B, H, Tq, Tk) in float32."""
        weights = self.weights(q, k, mask, is_causal)
        dropped = F.dropout(weights, self.dropout, self.training)
        return self.merge(torch.matmul(dropped.to(v.dtype), v)), weights

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        is_causal: bool = False,
        record: list[Tensor] | None = None,
    ) -> Tensor:
        """Self-attention over ``x`` (B, T, D), or cross-attention to ``memory`` (B, S, D) when given.

        Args:
            x: queries' input (B, T, D).
            memory: encoder output for cross-attention; ``None`` for self-attention.
            mask: boolean mask, ``True`` = may attend, broadcastable to (B, H, T, S).
            is_causal: forbid attending to later positions (self-attention only).
            record: if a list, use the explicit path and append the weights (B, H, T, S) to it.

        Returns:
            (B, T, D).
        """
        if memory is None:
            q, k, v = self.project_self(x)
        else:
            q = self.project_queries(x)
            k, v = self.project_memory(memory)
        if record is None:
            return self.attend(q, k, v, mask, is_causal)
        out, weights = self.attend_with_weights(q, k, v, mask, is_causal)
        record.append(weights)
        return out
