"""Label-smoothed cross-entropy (Szegedy et al. 2016), padding ignored, summed over tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nmt.vocab import PAD


def label_smoothed_nll(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, keep: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed smoothed loss and summed NLL over non-pad target tokens.

    The smoothed loss spreads ``epsilon`` uniformly over the vocabulary:
    ``(1 - eps) * nll + eps * mean_v(-log p_v)``, as in fairseq's ``label_smoothed_cross_entropy``. With a
    target-vocabulary mask ``keep`` the mean runs over the kept types only, and a target outside the mask adds
    nothing, as in the official code (``model.py``: ``log_softmax * logit_mask`` then ``smooth / logit_mask.sum()``).

    Args:
        logits: (B, T, V) unnormalised scores (masked types already at a large negative value).
        target: (B, T) token ids, PAD where there is no token.
        epsilon: smoothing mass in [0, 1).
        keep: (V,) bool target-vocabulary mask, or None for the whole vocabulary.
    """
    wide = logits.to(torch.promote_types(logits.dtype, torch.float32))  # at least float32 (float64 stays)
    lprobs = F.log_softmax(wide, dim=-1).flatten(0, 1)  # (B, T, V) -> (B*T, V)
    flat = target.reshape(-1)
    real = flat != PAD
    if keep is None:
        nll = F.nll_loss(lprobs, flat, ignore_index=PAD, reduction="sum")
        # mean over the vocabulary of -log p, summed over real tokens (no masked copy of the large lprobs tensor)
        smooth = -(lprobs.sum(dim=-1) * real).sum() / lprobs.size(-1)
    else:
        weight = keep.to(lprobs.dtype)
        nll = -(lprobs.gather(-1, flat[:, None])[:, 0] * (real & keep[flat])).sum()
        smooth = -((lprobs @ weight) * real).sum() / weight.sum()  # masked log p (~ -1e9) times 0
    return (1.0 - epsilon) * nll + epsilon * smooth, nll
