"""Label-smoothed cross-entropy (Szegedy et al. 2016), padding ignored, summed over tokens."""

from __future__ import annotations

import typing
from typing import Any

import torch

from nmt.vocab import PAD


def label_smoothed_nll(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, keep: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed smoothed loss and summed NLL over non-pad target tokens.

    The smoothed loss spreads ``epsilon`` uniformly over the vocabulary:
    ``(1 - eps) * nll + eps * mean_v(-log p_v)``, as in fairseq's ``label_smoothed_cross_entropy``. With a
    target-vocabulary mask ``keep`` the mean runs over the kept types only, and a target outside the mask adds
    nothing, as in the official code (``model.py``: ``log_softmax * logit_mask`` then ``smooth / logit_mask.sum()``).
    Log-probabilities are computed in at least float32 whatever the logits' dtype (bf16 under autocast).

    Args:
        logits: (B, T, V) unnormalised scores (masked types already at a large negative value).
        target: (B, T) token ids, PAD where there is no token.
        epsilon: smoothing mass in [0, 1).
        keep: (V,) bool target-vocabulary mask, or None for the whole vocabulary.
    """
    loss, nll = _SmoothedNLL.apply(logits, target, epsilon, keep)
    return typing.cast(torch.Tensor, loss), typing.cast(torch.Tensor, nll)


CHUNK_ELEMENTS = 2**19  # on CPU the (tokens, V) passes run over row blocks of about 2 MB of float32: in cache


def _row_blocks(n_rows: int, n_cols: int, device: torch.device) -> list[slice]:
    """Row slices covering ``n_rows``: cache-sized blocks on CPU (the float32 copy, log_softmax and its sums run
    on a block while it is in cache), one block elsewhere."""
    step = n_rows if device.type != "cpu" else max(1, CHUNK_ELEMENTS // max(n_cols, 1))
    return [slice(i, min(i + step, n_rows)) for i in range(0, n_rows, step)] or [slice(0, 0)]


class _SmoothedNLL(torch.autograd.Function):
    """Both sums in one forward; the gradient with respect to the logits written in one expression.

    ``d loss / d logits = real * (p - eps * u - (1 - eps) * onehot(target) * kept)`` with ``p`` the softmax, ``u``
    the smoothing distribution (uniform over the vocabulary or the kept types) and ``real`` 0 on padding: an
    exponential, two in-place passes and the cast back to the logits' dtype, where autograd through log_softmax,
    nll_loss, the sum and the cast takes about twice the passes over the (tokens, V) tensor (the loss was 7% of a
    bf16 CPU training step). Both directions run block by block over rows (:func:`_row_blocks`).
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        acc = torch.promote_types(logits.dtype, torch.float32)  # at least float32 (float64 stays)
        flat_logits = logits.reshape(-1, logits.size(-1))  # (B, T, V) -> (N, V)
        with torch.autocast(logits.device.type, enabled=False):
            lprobs = torch.empty(flat_logits.shape, dtype=acc, device=logits.device)
            weight = None if keep is None else keep.to(acc) / keep.sum()  # smoothing over the kept types
            summed = torch.empty(lprobs.size(0), dtype=acc, device=logits.device)  # sum_v u_v log p_v (times V)
            for rows in _row_blocks(lprobs.size(0), lprobs.size(1), logits.device):
                block = torch.log_softmax(flat_logits[rows].to(acc), dim=-1, out=lprobs[rows])
                summed[rows] = block.sum(dim=-1) if weight is None else block @ weight  # masked (~ -1e9) times 0
            flat = target.reshape(-1)
            real = flat != PAD
            scored = real if keep is None else real & keep[flat]  # tokens whose NLL counts
            nll = -(lprobs.gather(-1, flat[:, None])[:, 0] * scored).sum()
            smooth = -(summed * real).sum()
            if weight is None:
                smooth = smooth / lprobs.size(-1)
        ctx.save_for_backward(lprobs, flat, real, scored, weight)
        ctx.epsilon = epsilon
        ctx.shape, ctx.dtype = logits.shape, logits.dtype
        return (1.0 - epsilon) * nll + epsilon * smooth, nll

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, grad_nll: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        lprobs, flat, real, scored, weight = ctx.saved_tensors
        eps = ctx.epsilon
        grad = torch.empty(lprobs.shape, dtype=ctx.dtype, device=lprobs.device)
        with torch.autocast(lprobs.device.type, enabled=False):
            on_real = real.to(lprobs.dtype)[:, None]  # (N, 1): 1 on real tokens, 0 on padding
            counted = scored.to(lprobs.dtype)[:, None]  # (N, 1): 1 where the target's NLL counts
            # the NLL part pulls (1 - eps) g_loss + g_nll from the target to the softmax on the counted tokens, the
            # smoothing part eps g_loss from the smoothing distribution to the softmax on every real token
            toward_target = (1.0 - eps) * grad_loss + grad_nll
            smoothing = eps * grad_loss
            toward_p = counted * toward_target + on_real * smoothing
            away = on_real * (smoothing / lprobs.size(-1)) if weight is None else on_real * -smoothing
            at_target = counted * -toward_target
            for rows in _row_blocks(lprobs.size(0), lprobs.size(1), lprobs.device):
                # in place on one new block: an out-of-place addcmul broadcasting (N, 1) factors was 2x slower
                block = lprobs[rows].exp().mul_(toward_p[rows])
                if weight is None:
                    block.sub_(away[rows])
                else:
                    block.addcmul_(away[rows], weight[None, :])
                block.scatter_add_(1, flat[rows, None], at_target[rows])  # in float32, before the cast
                grad[rows] = block
        return grad.view(ctx.shape), None, None, None
