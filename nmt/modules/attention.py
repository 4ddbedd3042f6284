"""Multi-head attention with pluggable query/key scoring, a fused and an explicit-weights path, and KV caching.

A scoring module transforms the per-head queries and keys before the dot product and names the scale that
``F.scaled_dot_product_attention`` applies: plain scaled dot product, QKNorm, or per-head RMSNorm. Keys are cached
*after* this transform, so incremental decoding never renormalizes old keys.
"""

from __future__ import annotations

import math
import typing

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.modules import linear
from nmt.modules.dropout import dropout
from nmt.modules.norms import RMSNorm
from nmt.modules.placement import Placement


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
    """Scaled dot-product scoring ``q . k / sqrt(d_head)`` (Vaswani et al. 2017, arXiv 1706.03762).

    Args:
        d_head: size of one head (unused).
        length: unused.
    """


def qknorm_gain_init(length: float) -> float:
    """Initial QKNorm gain ``g0 = log2(L^2 - L)`` for sequence length ``L`` (arXiv 2010.04245, Sec. 3)."""
    return math.log2(length * length - length)


class QKNorm(Scoring):
    """Query-Key Normalization (Henry et al. 2020, arXiv 2010.04245).

    Queries and keys are l2-normalized along the head dimension and the logits are ``g * q_hat . k_hat``, so every
    logit lies in ``[-|g|, |g|]``. One learnable scalar ``g`` per attention module, shared by all heads,
    initialized to ``log2(L^2 - L)``. ``g`` is folded into the queries so the fused kernel runs with ``scale=1``.

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


class _UnitNorm(torch.autograd.Function):
    """``scale * x / max(||x||_2, eps)`` over the last dimension, in ``x``'s dtype, with a hand-written backward.

    Autograd through ``F.normalize`` (norm, clamp, division, dtype casts) takes ~10 elementwise passes backward; this
    takes 4, which keeps QKNorm within a few percent of scaled dot-product attention in training.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: Tensor, scale: Tensor | None) -> Tensor:
        with torch.autocast(x.device.type, enabled=False):  # norms accumulate in float32, outputs keep x's dtype
            x = x.contiguous()  # heads are a permuted view of the projection: 1.5x faster in total when copied first
            inv = _inverse_norm(x)
            ctx.save_for_backward(x, inv, scale)  # type: ignore[arg-type]
            # the scale folded into the per-row factor: one pass over x, and one rounding
            return x * (inv if scale is None else inv * scale.to(inv.dtype)).to(x.dtype)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor, Tensor | None]:
        x, inv, scale = ctx.saved_tensors  # type: ignore[attr-defined]
        with torch.autocast(grad.device.type, enabled=False):
            # the keys' gradient arrives as a transposed view (the score matmul's backward): on such a view each
            # elementwise pass is ~2x slower than the copy that makes it contiguous
            grad = grad.contiguous()
            dot = torch.linalg.vecdot(grad, x, dim=-1).unsqueeze(-1).to(inv.dtype) * inv  # grad . unit, (..., 1)
            factor = inv if scale is None else inv * scale.to(inv.dtype)
            # (grad - unit * dot) * factor with unit = x * inv, as grad * factor + x * (-dot * factor * inv): two
            # passes, every per-row factor computed in float32
            grad_x = torch.addcmul(grad * factor.to(x.dtype), x, (dot * factor * inv).neg_().to(x.dtype))
            grad_scale = None if scale is None else dot.sum().to(scale.dtype)
        return grad_x, grad_scale


def _inverse_norm(x: Tensor) -> Tensor:
    """``1 / max(||x||_2, 1e-12)`` over the last dimension, (..., 1), accumulated in at least float32 (out of place:
    under ``torch.compile`` autograd differentiates it)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=acc).clamp_min(1e-12).reciprocal()


def unit_norm(x: Tensor, scale: Tensor | None = None) -> Tensor:
    """``x`` l2-normalized over its last dimension (times the scalar ``scale`` if given), in ``x``'s dtype."""
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # compiled: plain operations the compiler
        return typing.cast(Tensor, _UnitNorm.apply(x, scale))  # differentiates and fuses
    # without autograd (decoding): the same arithmetic in 3 kernels, none of the Function's bookkeeping (2x faster
    # for a decoding step's (N, H, 1, D/H) heads, where QKNorm was 7% of beam search)
    x = x.contiguous()
    factor = _inverse_norm(x)
    if scale is not None:
        factor = factor * scale.to(factor.dtype)
    return x * factor.to(x.dtype)


def split_heads(x: Tensor) -> tuple[Tensor, ...]:
    """A projection's parts, (B, T, P, H, D/H) -> P views (B, H, T, D/H).

    With autograd, the P gradients are written back into one (B, T, P, H, D/H) tensor in one pass
    (:class:`_SplitHeads`); ``unbind``'s backward stacks them and the permute back then copies them again (2% of a
    CPU fp32 training step).
    """
    if torch.is_grad_enabled() and x.requires_grad and not torch.compiler.is_compiling():
        return typing.cast(tuple[Tensor, ...], _SplitHeads.apply(x))
    return _parts(x)


def _parts(x: Tensor) -> tuple[Tensor, ...]:
    """(B, T, P, H, D/H) -> P views (B, H, T, D/H)."""
    return x.permute(2, 0, 3, 1, 4).unbind(0)


class _SplitHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: Tensor) -> tuple[Tensor, ...]:
        ctx.shape, ctx.dtype = x.shape, x.dtype  # type: ignore[attr-defined]
        return _parts(x)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, *grads: Tensor) -> Tensor:
        # an unused part's gradient arrives as zeros (autograd materializes it), so every part is a tensor
        out = grads[0].new_empty(ctx.shape, dtype=ctx.dtype)  # type: ignore[attr-defined]
        for part, grad in zip(_parts(out), grads, strict=True):
            part.copy_(grad)
        return out


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

    def project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Scored queries, scored keys and values of ``x`` (B, T, D), each (B, H, T, D/H)."""
        B, T, _ = x.shape
        qkv = linear.call(self.in_proj, x).view(B, T, 3, self.n_heads, self.d_head)
        q, k, v = split_heads(qkv)  # (B, T, 3, H, D/H) -> 3 x (B, H, T, D/H)
        return self.scoring.queries(q), self.scoring.keys(k), v

    def project_queries(self, x: Tensor) -> Tensor:
        """Scored queries of ``x`` (B, T, D) for cross-attention, (B, H, T, D/H)."""
        B, T, _ = x.shape
        d = self.d_model
        q = linear.call(self.in_proj, x, rows=slice(0, d))
        return self.scoring.queries(q.view(B, T, self.n_heads, self.d_head).transpose(1, 2))  # -> (B, H, T, D/H)

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Scored keys and values of the encoder output ``memory`` (B, S, D), each (B, H, S, D/H)."""
        B, S, _ = memory.shape
        d = self.d_model
        kv = linear.call(self.in_proj, memory, rows=slice(d, 3 * d))
        kv = kv.view(B, S, 2, self.n_heads, self.d_head)
        k, v = split_heads(kv)  # (B, S, 2, H, D/H) -> 2 x (B, H, S, D/H)
        return self.scoring.keys(k), v

    def _merge(self, out: Tensor) -> Tensor:
        B, _, T, _ = out.shape
        return linear.call(self.out_proj, out.transpose(1, 2).reshape(B, T, self.d_model))  # heads merged

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """Fused path through ``F.scaled_dot_product_attention``; returns (B, Tq, D).

        CPU training takes the explicit path instead: for sentence-length sequences the CPU flash kernel's backward
        is 2-5x slower than plain matmuls (measured on torch 2.13, bf16 and fp32). Both paths compute the same thing.
        """
        if q.device.type == "cpu" and torch.is_grad_enabled():
            return self._merge(self._explicit(q, k, v, mask, is_causal)[0])
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=is_causal,
            scale=self.scoring.scale,
        )
        return self._merge(out)

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Attention logits (B, H, Tq, Tk) in float32 (float64 inputs: float64), as the fused kernel computes them;
        under autocast in its dtype (the float32 copies would be cast straight back)."""
        scale = self.scoring.scale if self.scoring.scale is not None else 1.0 / math.sqrt(q.size(-1))
        if torch.is_autocast_enabled(q.device.type):  # autocast runs the matmul in its own dtype: no float32 copies
            logits = torch.matmul(q, k.transpose(-1, -2))
        else:
            acc = torch.promote_types(q.dtype, torch.float32)
            logits = torch.matmul(q.to(acc), k.to(acc).transpose(-1, -2))
        return logits if scale == 1.0 else logits * scale  # QKNorm's gain is folded into the queries: scale 1

    def _explicit(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool
    ) -> tuple[Tensor, Tensor]:
        """Per-head output (B, H, Tq, D/H) and float32 softmax weights (B, H, Tq, Tk)."""
        logits = self.scores(q, k)
        if is_causal:
            Tq, Tk = logits.shape[-2:]
            causal = torch.ones(Tq, Tk, dtype=torch.bool, device=logits.device).tril()
            mask = causal if mask is None else mask & causal
        weights = logits.masked_fill(~mask, float("-inf")).softmax(-1) if mask is not None else logits.softmax(-1)
        if mask is not None and (torch.compiler.is_compiling() or not bool(mask.any(-1).all())):
            # a fully masked row attends to nothing, as in the fused path; only then the NaN pass (its forward and
            # backward were 3% of a CPU training step, and a training batch never has such a row); a compiled graph
            # cannot branch on data, and fuses the pass into the softmax
            weights = weights.nan_to_num(0.0)
        dropped = dropout(weights, self.dropout, self.training)
        return torch.matmul(dropped.to(v.dtype), v), weights

    def attend_with_weights(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Explicit path: returns the output (B, Tq, D) and the softmax weights (B, H, Tq, Tk) in float32."""
        out, weights = self._explicit(q, k, v, mask, is_causal)
        return self._merge(out), weights

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

    def step(self, x: Tensor, cache: Tensor, slots: Tensor, t: int, place: Placement) -> Tensor:
        """One incremental self-attention step over a cache that beam search never reorders.

        Every row writes its key/value at position ``t`` into its own slot (``j`` for row ``m * group + j``) of its
        sentence's block; ``slots`` says, for each row and earlier position, which slot of the block holds that
        position of the row's hypothesis (its ancestor's). The ``group`` queries of a block are scored against all
        its slots at once and each row keeps the logits of its own ancestors: ``group`` times the (small) score
        matmul, instead of copying every layer's cache each step to put the beams' histories in their rows.

        Args:
            x: the live rows' new position (N, 1, D).
            cache: this layer's store (2, n_blocks, H, group, capacity, D/H); position ``t`` is written in place,
                positions after ``t`` hold finite values (zeros).
            slots: (n_blocks, group, capacity) slot holding each position of each row's hypothesis.
            t: index of the new position.
            place: where the live rows sit in the store.

        Returns:
            (N, 1, D).
        """
        q, k, v = self.project_self(x)
        place.write(cache[:, :, :, :, t], k, v)
        q = place.to_blocks(q)  # (N, H, 1, D/H) -> (n_blocks, H, g, D/H)
        _, n_blocks, H, g, capacity, d_head = cache.shape
        if g == 1:  # one row per block: its slot is its history
            out = F.scaled_dot_product_attention(q, cache[0, :, :, 0, : t + 1], cache[1, :, :, 0, : t + 1],
                                                 scale=self.scoring.scale)
            return linear.call(self.out_proj, place.to_rows(out))
        keys = cache[0].view(n_blocks, H, g * capacity, d_head)
        logits = self.scores(q, keys).view(n_blocks, H, g, g, capacity)[..., : t + 1]  # (.., row, slot, position)
        ancestors = slots[:, None, :, None, : t + 1].expand(n_blocks, H, g, 1, t + 1)
        wide = torch.promote_types(logits.dtype, torch.float32)  # as scores(): float64 stays float64
        weights = logits.gather(3, ancestors).to(wide).softmax(-1)  # (n_blocks, H, g, 1, t + 1)
        values = cache[1].view(n_blocks, H, g * capacity, d_head)
        # each row's weights at its ancestors' slots, in the values' dtype (the cast of the few weights, not of this)
        spread = values.new_zeros(n_blocks, H, g, g, capacity)
        spread[..., : t + 1].scatter_(3, ancestors, weights.to(values.dtype))
        out = torch.matmul(spread.view(n_blocks, H, g, g * capacity), values)  # (n_blocks, H, g, D/H)
        return linear.call(self.out_proj, place.to_rows(out))

    def step_cross(self, x: Tensor, memory_k: Tensor, memory_v: Tensor, mask: Tensor | None,
                   place: Placement) -> Tensor:
        """One incremental cross-attention step: the ``group`` rows of a sentence attend as ``group`` query
        positions of its block, so the keys/values are never repeated per beam.

        Args:
            x: the live rows' new position (N, 1, D).
            memory_k, memory_v: scored keys and values (n_blocks, H, S, D/H).
            mask: source key mask (n_blocks, 1, 1, S) or None.
            place: where the live rows sit in the blocks.

        Returns:
            (N, 1, D).
        """
        q = place.to_blocks(self.project_queries(x))  # (N, H, 1, D/H) -> (n_blocks, H, g, D/H)
        if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            # the CPU flash kernel is built for many query rows: for a block's few it is 1.3-1.5x slower than two
            # batched matmuls in the autocast dtype with the softmax in float32 (the self-attention step's arithmetic)
            logits = self.scores(q, memory_k).float()  # (n_blocks, H, g, S)
            if mask is not None:  # every source has a token (EOS): no row is fully masked
                logits = torch.where(mask, logits, float("-inf"))  # one kernel: no inverted mask each step
            out = torch.matmul(logits.softmax(-1).to(memory_v.dtype), memory_v)
        else:
            out = F.scaled_dot_product_attention(q, memory_k, memory_v, attn_mask=mask, scale=self.scoring.scale)
        return linear.call(self.out_proj, place.to_rows(out))
