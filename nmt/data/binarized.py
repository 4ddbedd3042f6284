"""The token-id cache: ``bin/{split}.{lang}.tokens.npy`` (int32) and ``bin/{split}.{lang}.offsets.npy`` (int64).

Sentence ``i`` is ``tokens[offsets[i]:offsets[i + 1]]`` (piece ids, no BOS/EOS); ``offsets`` has n + 1 entries
starting at 0. Files are written to a temporary name and renamed, and loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nmt.atomic import atomic_open
from nmt.errors import NmtError


def split_paths(pair_dir: str | Path, split: str, lang: str) -> tuple[Path, Path]:
    """Paths of the tokens and offsets arrays of one side of one split."""
    base = Path(pair_dir) / "bin"
    return base / f"{split}.{lang}.tokens.npy", base / f"{split}.{lang}.offsets.npy"


def _save_atomic(path: Path, array: np.ndarray) -> None:
    with atomic_open(path) as handle:
        np.save(handle, array, allow_pickle=False)


def pack(sequences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate id sequences into ``(tokens int32, offsets int64)``."""
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.fromiter((i for s in sequences for i in s), dtype=np.int32, count=int(offsets[-1]))
    return tokens, offsets


def write_split(pair_dir: str | Path, split: str, lang: str, sequences: Sequence[Sequence[int]]) -> None:
    """Write one side of one split (atomically, tokens first and offsets last)."""
    tokens, offsets = pack(sequences)
    tokens_path, offsets_path = split_paths(pair_dir, split, lang)
    _save_atomic(tokens_path, tokens)
    _save_atomic(offsets_path, offsets)


def load_arrays(pair_dir: str | Path, split: str, lang: str) -> tuple[np.ndarray, np.ndarray]:
    """The raw ``(tokens, offsets)`` arrays of one side of one split, checked for consistency.

    Raises:
        NmtError: a file is missing (suggesting ``nmt prepare``), unreadable, or the arrays do not fit together.
    """
    tokens_path, offsets_path = split_paths(pair_dir, split, lang)
    arrays = []
    for path in (tokens_path, offsets_path):
        if not path.is_file():
            raise NmtError(f"binarized data not found: {path} (run `nmt prepare` for this pair)")
        try:
            arrays.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as exc:
            detail = " ".join(str(exc).split())[:160]
            raise NmtError(f"cannot read {path} ({detail}): the prepared cache is damaged; rerun `nmt prepare "
                           "--force` for this pair") from None
    tokens, offsets = arrays
    ok = (tokens.ndim == 1 and offsets.ndim == 1 and tokens.dtype == np.int32 and offsets.dtype == np.int64
          and len(offsets) >= 1 and offsets[0] == 0 and offsets[-1] == len(tokens)
          and bool(np.all(np.diff(offsets) >= 0)))
    if not ok:
        raise NmtError(f"{tokens_path} and {offsets_path} do not fit together; rerun `nmt prepare --force`")
    return tokens, offsets


def load_split(pair_dir: str | Path, split: str, lang: str) -> list[np.ndarray]:
    """Piece-id arrays (int32 views, no BOS/EOS) of every sentence of one side of one split."""
    tokens, offsets = load_arrays(pair_dir, split, lang)
    return np.split(tokens, offsets[1:-1]) if len(offsets) > 1 else []
