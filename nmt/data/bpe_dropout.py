"""BPE-dropout over a SentencePiece BPE model, drawn from our own seeded generator.

SentencePiece's own sampling (``Encode(enable_sampling=True)``) is BPE-dropout for a BPE model, but its draws do not
follow ``set_random_generator_seed`` across processes (found 2026-12-04 with sentencepiece 0.2.3: two processes with
the same seed draw different pieces), so a resumed run or the ranks of a distributed run could not draw the same
pieces. This module runs SentencePiece's BPE segmentation itself, with the merge skips drawn from
``random.Random(seed)`` (whose ``random()`` sequence Python guarantees for a seed), so a draw is a pure function of
``(text, alpha, seed)`` in any process, thread or version.

The algorithm is SentencePiece's (``bpe_model.cc``): the normalized sentence starts as one symbol per character; the
adjacent pair whose concatenation is the highest-scoring piece (leftmost on ties) is merged, until no adjacent pair
is a piece; with dropout each merge about to happen is skipped with probability ``alpha`` and that pair (those two
symbols) is never proposed again, while pairs formed later by other merges still may be. Symbols that are not pieces
become UNK, consecutive UNKs one UNK. At ``alpha`` 0 the pieces are exactly ``Encode``'s (tested on whole corpora).

Speed: no piece of our models spans a ``▁`` (SentencePiece's ``split_by_whitespace``), so each word is segmented
alone, and each word's merge path from a given state (its segmentation and skipped pairs) is computed once and
cached. A draw then walks cached paths: the number of merges before the next skip is geometric, so one uniform
number decides where along a path the next skip falls (the same distribution as one Bernoulli draw per merge).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import sentencepiece as spm

from nmt.errors import NmtError

SPACE = "\u2581"  # SentencePiece's whitespace symbol
MAX_CACHED = 200_000  # paths from states after a skip kept between calls

Pair = tuple[int, int, int]  # a pair of adjacent symbols: (start of the left one, start of the right one, end)
State = tuple[tuple[int, ...], frozenset[Pair]]  # symbol boundaries of a word, and its skipped pairs


@dataclass(frozen=True)
class _Path:
    """The merges from one state on, as SentencePiece would make them with no further skip."""

    bounds: tuple[tuple[int, ...], ...]  # the boundaries before each merge
    pairs: tuple[Pair, ...]  # the pair each merge joins
    ids: tuple[int, ...]  # the piece ids at the end of the path


class BpeDropout:
    """Segment sentences with a SentencePiece BPE model, skipping merges at random (BPE-dropout).

    Args:
        processor: a loaded SentencePiece BPE model whose pieces never contain ``▁`` after their first character.

    Raises:
        NmtError: the model has a piece with an inner or trailing ``▁`` (trained without ``split_by_whitespace``).
    """

    def __init__(self, processor: spm.SentencePieceProcessor) -> None:
        self._normalize = processor.Normalize
        self._unk = int(processor.unk_id())
        self._pieces: dict[str, tuple[float, int]] = {}  # the pieces merges may form: SentencePiece's normal pieces
        for i in range(processor.GetPieceSize()):
            if processor.IsControl(i) or processor.IsUnknown(i) or processor.IsUnused(i) or processor.IsByte(i):
                continue
            piece = processor.IdToPiece(i)
            if SPACE in piece[1:]:
                raise NmtError(f"BPE-dropout needs pieces that never span a word boundary, but piece {i} is {piece!r}")
            self._pieces[piece] = (float(processor.GetScore(i)), i)
        self._first: dict[str, _Path] = {}  # each word's path from its characters
        self._paths: dict[tuple[str, State], _Path] = {}  # paths from states after a skip

    def encode(self, texts: list[str], alpha: float, seed: int) -> list[list[int]]:
        """Piece ids of each sentence, every merge skipped with probability ``alpha`` (0 gives ``Encode``'s ids);
        a pure function of ``(texts, alpha, seed)``."""
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {alpha}")
        if len(self._paths) > MAX_CACHED:  # later states of long words are many and rarely revisited
            self._paths.clear()
        draw = random.Random(seed).random
        log_keep = math.log1p(-alpha)
        first, out = self._first, []
        for text in texts:
            ids: list[int] = []
            for word in self._words(text):
                path = first.get(word)
                if path is None:
                    path = first[word] = self._greedy(word, tuple(range(len(word) + 1)), frozenset())
                if path.pairs and alpha > 0.0:
                    kept = int(math.log(1.0 - draw()) / log_keep)  # merges made before the first skip: geometric
                    if kept < len(path.pairs):
                        ids.extend(self._resume(word, path, frozenset(), kept, draw, log_keep))
                        continue
                ids.extend(path.ids)
            out.append(self._merge_unknowns(ids))
        return out

    def _words(self, text: str) -> list[str]:
        normalized = str(self._normalize(text))
        head, *rest = normalized.split(SPACE)
        return ([head] if head else []) + [SPACE + word for word in rest]

    def _resume(self, word: str, path: _Path, skipped: frozenset[Pair], kept: int, draw: Callable[[], float],
                log_keep: float) -> tuple[int, ...]:
        """The pieces of ``word`` when the merge ``kept`` steps along ``path`` (taken with ``skipped``) is skipped."""
        while True:
            cuts = path.bounds[kept]
            alive = set(cuts)  # a skipped pair whose symbols were merged away can never be proposed again
            skipped = frozenset(p for p in skipped if alive.issuperset(p)) | {path.pairs[kept]}
            path = self._path(word, (cuts, skipped))
            if not path.pairs:
                return path.ids
            kept = int(math.log(1.0 - draw()) / log_keep)
            if kept >= len(path.pairs):
                return path.ids

    def _path(self, word: str, state: State) -> _Path:
        key = (word, state)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = self._greedy(word, *state)
        return path

    def _greedy(self, word: str, bounds: tuple[int, ...], skipped: frozenset[Pair]) -> _Path:
        """SentencePiece's merges from ``bounds``, never merging a pair in ``skipped``."""
        cuts = list(bounds)
        before, pairs = [], []
        while True:
            best: tuple[float, Pair] | None = None
            for i in range(len(cuts) - 2):
                pair = (cuts[i], cuts[i + 1], cuts[i + 2])
                entry = self._pieces.get(word[pair[0]:pair[2]])
                # highest score first, the leftmost of equal scores (SentencePiece's agenda order)
                if entry is not None and (best is None or entry[0] > best[0]) and pair not in skipped:
                    best = (entry[0], pair)
            if best is None:
                break
            before.append(tuple(cuts))
            pairs.append(best[1])
            cuts.remove(best[1][1])
        ids = tuple(self._pieces.get(word[a:b], (0.0, self._unk))[1] for a, b in zip(cuts, cuts[1:]))
        return _Path(tuple(before), tuple(pairs), ids)

    def _merge_unknowns(self, ids: list[int]) -> list[int]:
        return [i for k, i in enumerate(ids) if not (i == self._unk and k and ids[k - 1] == self._unk)]
