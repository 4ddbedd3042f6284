"""The search's folded top-k returns exactly torch.topk's values, with indices of those values."""

from __future__ import annotations

import pytest
import torch

from nmt.search.topk import FOLD, MIN_LENGTH, topk


def _check(x: torch.Tensor, k: int) -> None:
    values, index = topk(x, k)
    expected = x.topk(k, dim=1).values
    assert torch.equal(values, expected)
    assert torch.equal(x.gather(1, index), values)
    assert all(len(set(row)) == k for row in index.tolist())  # k distinct elements


@pytest.mark.parametrize("n", [MIN_LENGTH, 15_600, 15_611, 31_999])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_random_rows_with_ties_and_minus_infinity(n: int, k: int) -> None:
    generator = torch.Generator().manual_seed(n + k)
    x = torch.randn(5, n, generator=generator)
    x[0, torch.randperm(n, generator=generator)[: n // 2]] = -torch.inf  # finished beams, forbidden tokens
    x[1] = torch.randint(0, 3, (n,), generator=generator).float()  # ties everywhere
    x[2, :] = -torch.inf
    x[2, -3:] = torch.tensor([1.0, 2.0, 3.0])  # the largest in the remainder outside the grid
    _check(x, k)


def test_the_largest_values_all_in_one_column_of_the_grid() -> None:
    n = 4 * 3_900
    m = n // FOLD
    x = torch.randn(3, n)
    x[:, torch.arange(FOLD) * m + 7] = 100.0 + torch.arange(FOLD, dtype=torch.float32)  # column 7 of every grid row
    _check(x, 8)
    assert set(topk(x, 8)[1][0].tolist()) == {r * m + 7 for r in range(FOLD - 8, FOLD)}


def test_short_rows_and_other_shapes_take_torch_topk() -> None:
    x = torch.randn(4, MIN_LENGTH - 1)
    assert torch.equal(topk(x, 3)[1], x.topk(3, dim=1).indices)
