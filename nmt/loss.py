"""Label-smoothed cross-entropy (Szegedy et al. 2016), padding ignored, summed over tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nmt.vocab import PAD


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed smoothed loss and summed NLL over non-pad target tokens.

    The smoothed loss spreads ``epsilon`` uniformly over the vocabulary:
    ``(1 - eps) * nll + eps * mean_v(-log p_v)``, as in fairseq's ``label_smoothed_cross_entropy``.

    Args:
        logits: (B, T, V) unnormalised scores.
        target: (B, T) token ids, PAD where there is no token.
        epsilon: smoothing mass in [0, 1).
    """
    lprobs = F.log_softmax(logits.float(), dim=-1).flatten(0, 1)  # (B*T, V)
    flat = target.reshape(-1)
    mask = flat != PAD
    lprobs, flat = lprobs[mask], flat[mask]
    nll = -lprobs.gather(1, flat.unsqueeze(1)).squeeze(1)
    smooth = -lprobs.mean(dim=-1)
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    return loss.sum(), nll.sum()
