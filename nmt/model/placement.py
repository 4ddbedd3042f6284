"""Where the live decoder rows of incremental decoding sit in the per-sentence stores of keys and values.

Incremental decoding keeps every layer's cross-attention keys/values and self-attention cache in *blocks*, one per
sentence: the ``group`` rows (beams) of a sentence read one block of source keys/values and write ``group`` slots of
one self-attention block. When a sentence's search ends its rows leave the computation, but its block may stay in
the stores (moving every other block costs a full copy): :class:`Placement` maps the live sentences to their blocks
and moves per-row tensors to the block layout and back, with zeros in the blocks of finished sentences.
"""

from __future__ import annotations

import dataclasses

from torch import Tensor


@dataclasses.dataclass(frozen=True)
class Placement:
    """Live rows ``N = M * group``: the rows ``m * group + j`` (j < group) of live sentence ``m`` sit in block
    ``blocks[m]`` of ``n_blocks`` (``blocks`` None: sentence ``m`` is block ``m`` and every block is live)."""

    group: int
    n_blocks: int
    blocks: Tensor | None = None

    @property
    def live(self) -> int:
        """Number of live sentences."""
        return self.n_blocks if self.blocks is None else self.blocks.numel()

    def _grouped(self, x: Tensor) -> Tensor:
        N, H, _, d_head = x.shape
        return x.view(N // self.group, self.group, H, d_head).transpose(1, 2)  # (N, H, 1, D/H) -> (M, H, g, D/H)

    def to_blocks(self, x: Tensor) -> Tensor:
        """Per-row ``x`` (N, H, 1, D/H) in block layout (n_blocks, H, group, D/H), zeros for finished sentences."""
        grouped = self._grouped(x)
        if self.blocks is None:
            return grouped
        out = grouped.new_zeros(self.n_blocks, *grouped.shape[1:])
        return out.index_copy_(0, self.blocks, grouped)

    def to_rows(self, y: Tensor) -> Tensor:
        """Block-layout ``y`` (n_blocks, H, group, D/H) back to the live rows' (N, 1, D)."""
        if self.blocks is not None:
            y = y.index_select(0, self.blocks)
        M, H, g, d_head = y.shape
        return y.transpose(1, 2).reshape(M * g, 1, H * d_head)  # (M, H, g, D/H) -> (N, 1, D)

    def write(self, store: Tensor, k: Tensor, v: Tensor) -> None:
        """Write the live rows' keys and values (N, H, 1, D/H) into ``store`` (2, n_blocks, H, group, D/H), one
        position of a self-attention cache, in place."""
        if self.blocks is None:
            store[0] = self._grouped(k)
            store[1] = self._grouped(v)
        else:
            store[0].index_copy_(0, self.blocks, self._grouped(k))
            store[1].index_copy_(0, self.blocks, self._grouped(v))
