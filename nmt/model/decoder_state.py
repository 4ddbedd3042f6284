"""The incremental-decoding state of :class:`nmt.model.transformer.Transformer` and how beam search reorders it.

Everything is stored per sentence *block* (:mod:`nmt.model.placement`): the cross-attention keys/values once per
sentence (its beams share them), and a self-attention cache with one slot per beam. Beam search's ``select`` moves
no cache: a beam's history is a row of back-pointers (``slots``: which slot of its block holds each earlier position)
and reordering beams gathers only those pointers, as the attention step reads the cache through them. fairseq and
CTranslate2 instead copy every layer's cache each step, which was 30% of our CPU decoding (docs/performance.md).

When sentences finish, their blocks stay until the live ones fill at most :data:`COMPACT_BELOW` of the stores; then
one gather keeps only the live blocks, each with its slots and back-pointers as they were (so a row's attention
reads its history in the same order, and rounds the same, whichever other sentences share its batch). When a
selection changes the beam width or leaves the per-sentence structure, one gather builds compact stores that
resolve the back-pointers, with the same result.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from nmt.model.placement import Placement

CACHE_GROW = 16  # self-attention cache capacity added when full (positions)
COMPACT_BELOW = 0.5  # compact the stores once live sentences hold at most this fraction of their blocks


def _grouping(rows: Tensor) -> tuple[Tensor, int] | None:
    """``(u, g)`` such that ``rows == u.repeat_interleave(g)``, or None when ``rows`` has no such structure."""
    n = rows.numel()
    if n == 0:
        return rows, 1
    values, counts = torch.unique_consecutive(rows, return_counts=True)
    g = n // values.numel()
    if values.numel() * g != n or not bool(counts.eq(g).all()):
        return None
    return values, g


def _increasing(values: Tensor) -> bool:
    return values.numel() < 2 or bool((values[1:] > values[:-1]).all())


def _rows(x: Tensor, index: Tensor) -> Tensor:
    """Rows ``index`` of dimension 2 of a contiguous (L, 2, N, ...) tensor.

    Through a 3-d view: ``index_select`` on the 6-d tensor (and advanced indexing) take a much slower path on CPU.
    """
    L, two, n = x.shape[:3]
    return x.view(L * two, n, -1).index_select(1, index).view(L, two, index.numel(), *x.shape[3:])


@dataclasses.dataclass(frozen=True)
class DecoderState:
    """Incremental decoding state.

    Attributes:
        memory_kv: cross-attention keys and values of every decoder layer, (L, 2, n_blocks, H, S, D/H).
        src_mask: source key mask (n_blocks, 1, 1, S), or None when no source has padding.
        self_kv: self-attention store of every layer, (L, 2, n_blocks, H, group, capacity, D/H): position ``s`` of
            slot ``j`` of a block is written once, at step ``s``, by the row ``j`` of that block's sentence; unwritten
            positions hold zeros.
        slots: (n_blocks, group, capacity) long: the slot of its block that holds position ``s`` of row ``j``'s
            hypothesis (row ``j`` itself from position ``length`` on).
        length: number of target positions decoded so far.
        place: where the live rows sit in the blocks (:class:`Placement`).
        spare: free flat buffers, shared by the states of one search, that compaction gathers into.

    ``step`` writes the new position into ``self_kv`` and ``slots`` in place and returns a state sharing them:
    use only the latest state of a search.
    """

    memory_kv: Tensor
    src_mask: Tensor | None
    self_kv: Tensor
    slots: Tensor
    length: int
    place: Placement
    spare: list[Tensor] = dataclasses.field(default_factory=list)

    @property
    def group(self) -> int:
        """Consecutive live rows sharing one sentence block."""
        return self.place.group

    @classmethod
    def empty(cls, memory_kv: Tensor, src_mask: Tensor | None, capacity: int) -> DecoderState:
        """The state before the first step: one row per sentence, an empty self-attention store."""
        L, _, n, H, _, d_head = memory_kv.shape
        self_kv = memory_kv.new_zeros(L, 2, n, H, 1, capacity, d_head)
        slots = torch.zeros(n, 1, capacity, dtype=torch.long, device=memory_kv.device)
        return cls(memory_kv, src_mask, self_kv, slots, 0, Placement(group=1, n_blocks=n))

    def advanced(self) -> DecoderState:
        """The state for the next position, with room for it in the stores (grown by :data:`CACHE_GROW` when full)
        and every row's own slot recorded at it; ``length`` counts it once the step has written it."""
        t, self_kv, slots = self.length, self.self_kv, self.slots
        if t == self_kv.size(-2):  # full: grow by a fixed chunk (one copy every CACHE_GROW steps)
            grown = self_kv.new_zeros(*self_kv.shape[:-2], t + CACHE_GROW, self_kv.size(-1))
            grown[..., :t, :] = self_kv
            self_kv = grown
            slots = torch.cat([slots, slots.new_zeros(*slots.shape[:2], CACHE_GROW)], dim=2)
        slots[:, :, t] = torch.arange(self.group, device=slots.device)
        return dataclasses.replace(self, self_kv=self_kv, slots=slots)

    def visible(self) -> Tensor | None:
        """What the rows read at the position being decoded (``length``, after :meth:`advanced`): (n_blocks, 1,
        group, group * capacity) bool, true where position ``s`` of slot ``k`` holds position ``s`` of row ``j``'s
        hypothesis (``slots[:, j, s] == k``) and ``s <= length``; None when ``group`` is 1 (a row's own slot is its
        history). Computed once a step for every layer and head."""
        group = self.group
        if group == 1:
            return None
        slots = self.slots
        n_blocks, _, capacity = slots.shape
        owners = torch.arange(group, device=slots.device)[:, None]  # (group, 1): slot k
        visible = slots[:, :, None, :] == owners  # (n_blocks, row j, slot k, capacity)
        visible &= torch.arange(capacity, device=slots.device) <= self.length
        return visible.view(n_blocks, 1, group, group * capacity)

    def select(self, index: Tensor) -> DecoderState:
        """Keep/reorder live rows: row ``i`` of the result is row ``index[i]`` of this state."""
        group = self.group
        sentences = index // group if group > 1 else index  # the live sentence of each selected row
        grouping = _grouping(sentences)
        if grouping is None or grouping[1] != group or not _increasing(grouping[0]):
            return self._gather(index, sentences, grouping)
        kept = grouping[0]
        blocks = kept if self.place.blocks is None else self.place.blocks[kept]
        slots = self.slots
        if group > 1:  # each row takes its source row's back-pointers; rows stay in their sentence's block
            local = torch.arange(group, device=index.device).repeat(self.place.n_blocks, 1)  # (n_blocks, g)
            local[blocks] = (index % group).view(-1, group)
            slots = slots.gather(1, local[:, :, None].expand_as(slots))
        if blocks.numel() <= COMPACT_BELOW * self.place.n_blocks:
            return self._compact(blocks, slots)
        place = Placement(group, self.place.n_blocks, None if blocks.numel() == self.place.n_blocks else blocks)
        return dataclasses.replace(self, slots=slots, place=place)

    def _compact(self, blocks: Tensor, slots: Tensor) -> DecoderState:
        """Stores of only the live sentences' ``blocks``, each block as it was: its slots and back-pointers
        (``slots``, already reordered for the selection) unchanged, so every row reads its history in the same
        order, and its attention sums round the same, whether or not other sentences of the batch ended."""
        L, two, n_blocks = self.self_kv.shape[:3]
        flat = self._buffer(L * two * blocks.numel() * self.self_kv[0, 0, 0].numel()).view(L * two, blocks.numel(), -1)
        torch.index_select(self.self_kv.view(L * two, n_blocks, -1), 1, blocks, out=flat)
        self.spare.append(self.self_kv.view(-1))  # this state is consumed: its buffer serves the next gather
        src_mask = None if self.src_mask is None else self.src_mask[blocks]
        return DecoderState(_rows(self.memory_kv, blocks), src_mask, flat.view(L, two, -1, *self.self_kv.shape[3:]),
                            slots[blocks], self.length, Placement(self.group, blocks.numel()), self.spare)

    def _buffer(self, needed: int) -> Tensor:
        """``needed`` elements of a recycled spare buffer (a new one if none is large enough): on CPU, writing fresh
        memory costs more in page faults than the gather into it."""
        spare = next((i for i, b in enumerate(self.spare) if b.numel() >= needed), None)
        buffer = self.spare.pop(spare) if spare is not None else self.self_kv.new_empty(needed)
        return buffer[:needed]

    def _block_of(self, sentences: Tensor) -> Tensor:
        return sentences if self.place.blocks is None else self.place.blocks[sentences]

    def _gather(self, index: Tensor, sentences: Tensor, grouping: tuple[Tensor, int] | None) -> DecoderState:
        """Compact stores for the selected rows: block ``m`` of the result holds their sentence ``m``'s (repeated
        if selected twice), and each row's slot its history, resolved through the back-pointers."""
        kept, group = grouping if grouping is not None else (sentences, 1)
        L, _, n_blocks, H, old_group, capacity, d_head = self.self_kv.shape
        blocks = self._block_of(sentences)  # (N',) source block of each selected row
        history = self.slots[blocks, index % old_group]  # (N', capacity) source slot of each position
        positions = torch.arange(capacity, device=index.device)
        heads = torch.arange(H, device=index.device)[None, :, None]
        source = ((blocks[:, None, None] * H + heads) * old_group + history[:, None, :]) * capacity + positions
        source = source.view(-1, group, H, capacity).transpose(1, 2).reshape(-1)  # (N', H, cap) -> (M', H, g, cap)
        flat = self._buffer(source.numel() * L * 2 * d_head).view(L * 2, -1, d_head)
        torch.index_select(self.self_kv.view(L * 2, -1, d_head), 1, source, out=flat)
        self.spare.append(self.self_kv.view(-1))  # this state is consumed: its buffer serves the next gather
        memory_kv, src_mask = self.memory_kv, self.src_mask
        memory_blocks = self._block_of(kept)
        every = torch.arange(n_blocks, device=index.device)
        if memory_blocks.numel() != n_blocks or not torch.equal(memory_blocks, every):
            memory_kv = _rows(memory_kv, memory_blocks)
            src_mask = None if src_mask is None else src_mask[memory_blocks]
        live = kept.numel()
        slots = torch.arange(group, device=index.device)[None, :, None].expand(live, group, capacity).contiguous()
        return DecoderState(memory_kv, src_mask, flat.view(L, 2, live, H, group, capacity, d_head), slots,
                            self.length, Placement(group, live), self.spare)
