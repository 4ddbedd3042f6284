"""Special token ids shared by the SentencePiece model, the data cache, the model and the search, and the digest that
identifies a SentencePiece model.

SentencePiece is trained with exactly these ids (``pad_id=0 unk_id=1 bos_id=2 eos_id=3``), so a token id means the
same thing everywhere and no separate dictionary file is needed.
"""

from __future__ import annotations

import hashlib

PAD = 0
UNK = 1
BOS = 2
EOS = 3
SPECIALS = 4


def spm_digest(spm: bytes) -> str:
    """The SHA-256 of a SentencePiece model's bytes (hex): what checkpoints and prepared data name it by."""
    return hashlib.sha256(spm).hexdigest()
