"""Optional Moses tokenization (``nmt prepare --moses``) through sacremoses.

The papers' corpora (TED talks, IWSLT'15) are Moses-tokenized already, so this is off by default; it is for raw
text given with ``--from-dir``. Entities are escaped (``&apos;``, ``&quot;``) as in those corpora, so tokenized
BLEU against them stays comparable.
"""

from __future__ import annotations

from nmt.data.text import normalize_line
from nmt.errors import NmtError


def moses_tokenize(lines: list[str], lang: str) -> list[str]:
    """Moses-tokenize each line for language ``lang`` (sacremoses falls back to generic rules if unknown).

    Raises:
        NmtError: sacremoses is not installed.
    """
    try:
        from sacremoses import MosesTokenizer
    except ImportError:  # pragma: no cover - sacremoses is a runtime dependency
        raise NmtError("--moses needs the sacremoses package (pip install sacremoses)") from None
    tokenizer = MosesTokenizer(lang=lang.split("_")[0])
    return [normalize_line(tokenizer.tokenize(line, escape=True, return_str=True)) for line in lines]


def moses_detokenize(lines: list[str], lang: str) -> list[str]:
    """Undo :func:`moses_tokenize` (unescape entities, reattach punctuation) for detokenized BLEU."""
    from sacremoses import MosesDetokenizer

    detokenizer = MosesDetokenizer(lang=lang.split("_")[0])
    return [detokenizer.detokenize(line.split(), unescape=True) for line in lines]
