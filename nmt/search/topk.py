"""The beam search's top-k over every extension of every beam: a few of ``width * vocab`` scores per sentence.

On CPU, ``torch.topk`` on such long rows selects through a per-row partial sort of (value, index) pairs, a visible
share of beam search (docs/performance.md). :func:`topk` folds each row into a grid of :data:`FOLD` rows and takes
the largest of each column (one vectorized pass): the ``k`` columns with the largest maxima hold ``k`` elements with
the ``k`` largest values, so ``torch.topk`` then runs over ``FOLD * k`` candidates only.
"""

from __future__ import annotations

import torch
from torch import Tensor

FOLD = 16  # grid rows per row (fastest of 4-128 for beam 4 x 3,900 pieces, 16-64 sentences)
MIN_LENGTH = 2048  # shorter rows: torch.topk directly


def topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest values of each row of ``x`` (rows, n), largest first, and their column indices: the values
    of ``x.topk(k, dim=1)``; which of equal values is returned is unspecified, as for ``torch.topk``, and may differ
    from it (bf16 log-probs tie often, so bf16 beam search can pick another of two equal-scored extensions)."""
    rows, n = x.shape
    m = n // FOLD
    if x.device.type != "cpu" or n < MIN_LENGTH or k > m:
        return x.topk(k, dim=1)
    grid = x[:, : FOLD * m].view(rows, FOLD, m)  # element (r, j) is column r * m + j of the row
    # Each of the k largest elements sits in a column whose maximum is at least the k-th largest value, and the k
    # columns with the largest maxima hold k elements that large: the candidates.
    cols = grid.amax(dim=1).topk(k, dim=1).indices  # (rows, k)
    candidates = grid.gather(2, cols[:, None, :].expand(rows, FOLD, k)).reshape(rows, FOLD * k)
    index = (cols[:, None, :] + torch.arange(0, FOLD * m, m, device=x.device)[None, :, None]).reshape(rows, -1)
    if n > FOLD * m:  # the last n % FOLD elements are candidates too
        rest = torch.arange(FOLD * m, n, device=x.device).expand(rows, -1)
        candidates, index = torch.cat([candidates, x[:, FOLD * m:]], dim=1), torch.cat([index, rest], dim=1)
    values, pick = candidates.topk(k, dim=1)
    return values, index.gather(1, pick)
