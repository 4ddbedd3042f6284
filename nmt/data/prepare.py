"""``nmt prepare``: corpus -> cleaned text -> joint SentencePiece BPE -> binarized cache -> ``meta.json``.

Layout of ``DATA_DIR/PAIR/`` (docs/design.md): ``raw/{split}.{lang}``, ``spm.model``, ``spm.vocab``,
``bin/{split}.{lang}.{tokens,offsets}.npy`` and ``meta.json``. Every file is written to a temporary name and
renamed; ``meta.json`` is removed first and written last, so a directory with a ``meta.json`` is complete. A rerun
with the same inputs and options finds ``meta.json`` matching and does nothing (``force=True`` redoes it).
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from nmt.config import DataConfig
from nmt.data import binarized, corpora, download
from nmt.data.bpe import SentencePieceTokenizer, train_sentencepiece
from nmt.data.text import ParallelText, write_lines_atomic
from nmt.data.tokenize import moses_tokenize
from nmt.errors import NmtError

FORMAT = 1  # bump when the layout or the cleaning changes, so old caches are rebuilt
DEFAULT_URLS = {"ted": download.TED_URL, "iwslt15": download.IWSLT15_EN_VI_URL}


def length_percentile(src: list[list[int]], tgt: list[list[int]], q: float = 97.5) -> float:
    """The ``q``-th percentile of training sequence lengths, the L of QKNorm (arXiv:2010.04245).

    Lengths are counted in SentencePiece pieces plus one for EOS, over the source and the target sentences of
    the training split pooled together (2n values for n pairs), with numpy's default linear interpolation.
    """
    lengths = np.fromiter((len(s) + 1 for side in (src, tgt) for s in side), dtype=np.int64)
    return float(np.percentile(lengths, q)) if len(lengths) else 0.0


def _sha256_or_none(path: Path) -> str | None:
    return download.sha256_file(path) if path.is_file() else None


def _options(src: str, tgt: str, source: str, url: str | None, from_dir: str | Path | None, bpe_size: int,
             moses: bool, max_len: int | None) -> dict[str, Any]:
    """Everything the output depends on; equal options mean the existing output can be reused."""
    options: dict[str, Any] = {"format": FORMAT, "source": source, "bpe_size": bpe_size, "moses": moses,
                               "max_len": max_len}
    if from_dir is not None:
        directory = Path(from_dir)
        options["from_dir"] = str(directory.resolve())
        options["inputs"] = {f"{split}.{lang}": _sha256_or_none(directory / f"{split}.{lang}")
                             for split in corpora.SPLITS for lang in (src, tgt)}
    else:
        options["url"] = url or DEFAULT_URLS[source]
    return options


def _up_to_date(pair_dir: Path, options: dict[str, Any]) -> dict[str, Any] | None:
    """The existing meta if it was written with ``options`` and every file it describes is present."""
    try:
        meta = json.loads((pair_dir / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("options") != options:
        return None
    files = [pair_dir / "spm.vocab"]
    for split in corpora.SPLITS:
        for lang in (meta["src"], meta["tgt"]):
            files += [pair_dir / "raw" / f"{split}.{lang}", *binarized.split_paths(pair_dir, split, lang)]
    model = pair_dir / "spm.model"
    if not all(f.is_file() for f in files) or _sha256_or_none(model) != meta.get("spm_sha256"):
        return None
    return meta


def _log(message: str, verbose: bool) -> None:
    if verbose:
        print(message, file=sys.stderr, flush=True)


def _encode(tokenizer: SentencePieceTokenizer, text: ParallelText, max_len: int | None
            ) -> tuple[ParallelText, list[list[int]], list[list[int]]]:
    """Encode both sides; with ``max_len``, drop pairs longer than that in pieces (reason ``too_long``)."""
    src_ids, tgt_ids = tokenizer.encode_batch(text.src), tokenizer.encode_batch(text.tgt)
    if max_len is None:
        return text, src_ids, tgt_ids
    keep = [i for i in range(len(text)) if len(src_ids[i]) <= max_len and len(tgt_ids[i]) <= max_len]
    dropped = Counter(text.dropped)
    if len(keep) < len(text):
        dropped["too_long"] += len(text) - len(keep)
    kept = ParallelText([text.src[i] for i in keep], [text.tgt[i] for i in keep], dropped)
    return kept, [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]


def prepare(pair: str, data_dir: str | Path = DataConfig.data_dir, *, url: str | None = None,
            from_dir: str | Path | None = None, bpe_size: int = DataConfig.bpe_size, force: bool = False,
            moses: bool = False, max_len: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Prepare ``DATA_DIR/PAIR/`` and return its meta (the content of ``meta.json``).

    Args:
        pair: ``src-tgt``; en-vi / vi-en is IWSLT'15, any other pair of TED codes is the TED talks corpus.
        data_dir: root of the prepared data; downloads are cached in ``DATA_DIR/downloads/``.
        url: archive URL (TED) or base URL (IWSLT'15) of a mirror.
        from_dir: read ``{train,dev,test}.{src,tgt}`` from this directory instead of downloading.
        bpe_size: SentencePiece vocabulary size (lowered, with a warning, if the corpus cannot fill it).
        force: redo everything even if ``meta.json`` matches.
        moses: Moses-tokenize the text first (for raw, untokenized corpora).
        max_len: drop training pairs with more than this many pieces on either side; dev/test are never cut.
        progress: progress bars and step messages on stderr.

    Raises:
        NmtError: bad pair or option, download/extraction failure, malformed or empty corpus.
    """
    src, tgt = corpora.parse_pair(pair)
    if bpe_size <= 4:
        raise NmtError(f"--bpe-size {bpe_size} must be larger than the 4 special pieces")
    if from_dir is not None and url is not None:
        raise NmtError("--url and --from-dir exclude each other (one says where to download, the other not to)")
    if max_len is not None and max_len < 1:
        raise NmtError(f"--max-len {max_len} must be at least 1")
    pair_dir = Path(data_dir) / pair
    source = "dir" if from_dir is not None else corpora.source_for(src, tgt)
    options = _options(src, tgt, source, url, from_dir, bpe_size, moses, max_len)
    if not force and (existing := _up_to_date(pair_dir, options)) is not None:
        _log(f"{pair_dir} is up to date (use --force to redo it)", progress)
        return existing
    (pair_dir / "meta.json").unlink(missing_ok=True)  # from here on the directory is incomplete

    if from_dir is not None:
        _log(f"reading {from_dir}", progress)
        corpus = corpora.load_dir(from_dir, src, tgt)
    else:
        request = corpora.Request(src, tgt, Path(data_dir) / "downloads", url, progress)
        corpus = corpora.load(request, source)
    for split, text in corpus.items():
        if not text.src:
            raise NmtError(f"{pair} {split}: no sentence pairs left ({dict(text.dropped)} dropped)")
    if moses:
        _log("Moses-tokenizing", progress)
        corpus = {split: ParallelText(moses_tokenize(t.src, src), moses_tokenize(t.tgt, tgt), t.dropped)
                  for split, t in corpus.items()}

    _log(f"training SentencePiece BPE (vocab {bpe_size}) on {len(corpus['train'])} pairs", progress)
    vocab_size = train_sentencepiece(corpus["train"].src + corpus["train"].tgt, pair_dir, bpe_size)
    tokenizer = SentencePieceTokenizer(pair_dir / "spm.model")
    splits: dict[str, dict[str, Any]] = {}
    length_p975 = 0.0
    for split, text in corpus.items():
        text, src_ids, tgt_ids = _encode(tokenizer, text, max_len if split == "train" else None)
        if not text.src:
            raise NmtError(f"{pair} {split}: no sentence pairs left after --max-len {max_len}")
        for lang, lines, ids in ((src, text.src, src_ids), (tgt, text.tgt, tgt_ids)):
            write_lines_atomic(pair_dir / "raw" / f"{split}.{lang}", lines)
            binarized.write_split(pair_dir, split, lang, ids)
        splits[split] = {"lines": len(text), "dropped": dict(sorted(text.dropped.items())),
                         "src_tokens": sum(map(len, src_ids)), "tgt_tokens": sum(map(len, tgt_ids))}
        if split == "train":
            length_p975 = length_percentile(src_ids, tgt_ids)

    meta: dict[str, Any] = {
        "pair": pair, "src": src, "tgt": tgt, "source": source, "bpe_size": bpe_size, "vocab_size": vocab_size,
        "spm_sha256": download.sha256_file(pair_dir / "spm.model"), "splits": splits,
        "length_p975": length_p975, "options": options,
    }
    tmp = pair_dir / f".meta.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, pair_dir / "meta.json")
    return meta


def format_summary(meta: dict[str, Any], pair_dir: str | Path | None = None) -> str:
    """A human-readable table of the meta: lines, drops, tokens per split, vocabulary and length_p975."""
    src, tgt = meta["src"], meta["tgt"]
    where = f" in {pair_dir}" if pair_dir is not None else ""
    lines = [f"prepared {meta['pair']} (source: {meta['source']}){where}",
             f"{'split':<6} {'lines':>9} {src + ' tokens':>12} {tgt + ' tokens':>12}  dropped"]
    for split, info in meta["splits"].items():
        dropped = ", ".join(f"{reason} {n:,}" for reason, n in info["dropped"].items()) or "none"
        lines.append(f"{split:<6} {info['lines']:>9,} {info['src_tokens']:>12,} {info['tgt_tokens']:>12,}  {dropped}")
    lines.append(f"vocab size {meta['vocab_size']:,} (requested {meta['bpe_size']:,}); "
                 f"length_p975 {meta['length_p975']:.1f} pieces (QKNorm L)")
    return "\n".join(lines)
