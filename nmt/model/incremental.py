"""Incremental decoding: one new position per step over per-sentence stores that beam search never reorders.

Each decoder layer keeps a self-attention store with one slot per beam in its sentence's block, and the
cross-attention keys/values once per sentence (:mod:`nmt.model.decoder_state` holds them, :class:`Placement` says where
the live rows sit). These functions take the plain modules (:mod:`nmt.modules`) or their accelerated subclasses,
through their projections and scoring, so a step computes what the full-sequence pass computes at that position
(tests/test_model.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.model.placement import Placement
from nmt.modules.attention import MultiHeadAttention
from nmt.modules.layers import DecoderLayer


def self_attention_step(attn: MultiHeadAttention, x: Tensor, cache: Tensor, visible: Tensor | None, t: int,
                        place: Placement) -> Tensor:
    """One self-attention step over a cache that beam search never reorders.

    Every row writes its key/value at position ``t`` into its own slot (``j`` for row ``m * group + j``) of its
    sentence's block; a position of a row's hypothesis sits in the slot of the ancestor that wrote it. The
    ``group`` queries of a block are scored against all its slots at once, ``visible`` keeps each row's own
    ancestors, and one softmax over the block's slots gives weights that are zero elsewhere, so the values of all
    slots are read in one matmul: ``group`` times the (small) matmuls, instead of copying every layer's cache each
    step to put the beams' histories in their rows. Outside autocast the CPU fused kernel computes the same with
    ``visible`` as its mask (1.01-1.04x end to end in fp32; ``bench/decode-route-2026-12-08/``).

    Args:
        attn: the layer's self-attention.
        x: the live rows' new position (N, 1, D).
        cache: this layer's store (2, n_blocks, H, group, capacity, D/H); position ``t`` is written in place,
            positions after ``t`` hold finite values (zeros).
        visible: (n_blocks, 1, group, group * capacity) bool, :meth:`DecoderState.visible`: whether a row reads
            a slot's position (its ancestor's, at most ``t``); None when ``group`` is 1.
        t: index of the new position.
        place: where the live rows sit in the store.

    Returns:
        (N, 1, D).
    """
    q, k, v = attn.project_self(x)
    place.write(cache[:, :, :, :, t], k, v)
    q = place.to_blocks(q)  # (N, H, 1, D/H) -> (n_blocks, H, g, D/H)
    _, n_blocks, H, g, capacity, d_head = cache.shape
    if visible is None:  # one row per block: its slot is its history
        out = F.scaled_dot_product_attention(q, cache[0, :, :, 0, : t + 1], cache[1, :, :, 0, : t + 1],
                                             scale=attn.scoring.scale)
        return attn.out_proj(place.to_rows(out))
    if not torch.is_autocast_enabled(q.device.type):  # the fused kernel, with each row's ancestors as its mask
        out = F.scaled_dot_product_attention(q, cache[0].view(n_blocks, H, g * capacity, d_head),
                                             cache[1].view(n_blocks, H, g * capacity, d_head), attn_mask=visible,
                                             scale=attn.scoring.scale)
        return attn.out_proj(place.to_rows(out))
    logits = attn.scores(q, cache[0].view(n_blocks, H, g * capacity, d_head))  # (n_blocks, H, g, g * capacity)
    wide = torch.promote_types(logits.dtype, torch.float32)  # as scores(): float64 stays float64
    weights = torch.where(visible, logits, float("-inf")).softmax(-1, dtype=wide)
    values = cache[1].view(n_blocks, H, g * capacity, d_head)
    out = torch.matmul(weights.to(values.dtype), values)  # (n_blocks, H, g, D/H)
    return attn.out_proj(place.to_rows(out))


def cross_attention_step(attn: MultiHeadAttention, x: Tensor, memory_k: Tensor, memory_v: Tensor,
                         mask: Tensor | None, place: Placement) -> Tensor:
    """One cross-attention step: the ``group`` rows of a sentence attend as ``group`` query positions of its
    block, so the keys/values are never repeated per beam.

    Args:
        attn: the layer's cross-attention.
        x: the live rows' new position (N, 1, D).
        memory_k, memory_v: scored keys and values (n_blocks, H, S, D/H).
        mask: source key mask (n_blocks, 1, 1, S) or None.
        place: where the live rows sit in the blocks.

    Returns:
        (N, 1, D).
    """
    q = place.to_blocks(attn.project_queries(x))  # (N, H, 1, D/H) -> (n_blocks, H, g, D/H)
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        # the CPU flash kernel is built for many query rows: for a block's few, two batched matmuls in the
        # autocast dtype with the softmax in float32 are faster (the self-attention step's arithmetic)
        logits = attn.scores(q, memory_k).float()  # (n_blocks, H, g, S)
        if mask is not None:  # every source has a token (EOS): no row is fully masked
            logits = torch.where(mask, logits, float("-inf"))  # one kernel: no inverted mask each step
        out = torch.matmul(logits.softmax(-1).to(memory_v.dtype), memory_v)
    else:
        out = F.scaled_dot_product_attention(q, memory_k, memory_v, attn_mask=mask, scale=attn.scoring.scale)
    return attn.out_proj(place.to_rows(out))


def decoder_layer_step(layer: DecoderLayer, x: Tensor, self_cache: Tensor, visible: Tensor | None, t: int,
                       memory_k: Tensor, memory_v: Tensor, src_mask: Tensor | None, place: Placement) -> Tensor:
    """One step of ``layer`` at position ``t`` of the live rows ``x`` (N, 1, D) placed by ``place``: the
    self-attention store ``self_cache`` (2, n_blocks, H, group, capacity, D/H) with the positions each row reads,
    ``visible`` (:func:`self_attention_step`), precomputed cross-attention keys/values (n_blocks, H, S, D/H); returns
    (N, 1, D)."""
    x = layer.self_res(x, lambda h: self_attention_step(layer.self_attn, h, self_cache, visible, t, place))
    x = layer.cross_res(x, lambda h: cross_attention_step(layer.cross_attn, h, memory_k, memory_v, src_mask, place))
    return layer.ffn_res(x, layer.ffn)
