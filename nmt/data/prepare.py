"""``nmt prepare``: corpus -> cleaned text -> joint SentencePiece BPE -> binarized cache -> ``meta.json``.

Layout of ``DATA_DIR/PAIR/`` (docs/design.md): ``raw/{split}.{lang}``, ``spm.model``, ``spm.vocab``,
``bin/{split}.{lang}.{tokens,offsets}.npy`` and ``meta.json``. Every file is written to a temporary name and
renamed; ``meta.json`` is removed first and written last, so a directory with a ``meta.json`` is complete. A rerun
with the same inputs and options finds ``meta.json`` matching and does nothing (``force=True`` redoes it).
"""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from nmt.atomic import atomic_open, atomic_write_text
from nmt.config import DataConfig
from nmt.data import binarized, corpora, download, settings
from nmt.data.bpe import SentencePieceTokenizer, train_sentencepiece
from nmt.data.text import ParallelText, write_lines_atomic
from nmt.data.tokenize import moses_tokenize
from nmt.errors import NmtError

FORMAT = 2  # bump when the layout or the cleaning changes, so old caches are rebuilt (2: the official TED rule)


def length_percentile(src: list[list[int]], tgt: list[list[int]], q: float = 97.5) -> float:
    """The ``q``-th percentile of training sequence lengths, the L of QKNorm (arXiv:2010.04245).

    Lengths are counted in SentencePiece pieces plus one for EOS, over the source and the target sentences of
    the training split pooled together (2n values for n pairs), with numpy's default linear interpolation.
    """
    lengths = np.fromiter((len(s) + 1 for side in (src, tgt) for s in side), dtype=np.int64)
    return float(np.percentile(lengths, q)) if len(lengths) else 0.0


def _sha256_or_none(path: Path) -> str | None:
    return download.sha256_file(path) if path.is_file() else None


def _options(src: str, tgt: str, source: str, inputs: Inputs, data: DataConfig, moses: bool) -> dict[str, Any]:
    """Everything the output depends on; equal options mean the existing output can be reused."""
    options: dict[str, Any] = {"format": FORMAT, "source": source, "bpe_size": data.bpe_size, "moses": moses,
                               "max_len": data.max_len, "keep_partial": data.keep_partial}
    if inputs.from_dir is not None:
        directory = Path(inputs.from_dir)
        options["from_dir"] = str(directory.resolve())
        options["inputs"] = {f"{split}.{lang}": _sha256_or_none(directory / f"{split}.{lang}")
                             for split in corpora.SPLITS for lang in (src, tgt)}
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


@dataclass(frozen=True)
class Inputs:
    """Where the corpus comes from: extra mirrors (``--url``), local files, or a manually fetched archive."""

    urls: tuple[str, ...] = ()
    from_dir: str | Path | None = None
    archive: str | Path | None = None


def resolve_settings(pair: str, bpe_size: int | None = None, max_len: int | None = None,
                     keep_partial: bool | None = None) -> DataConfig:
    """The pair's data settings: its config (``configs/PAIR.yaml``, else the defaults), then the overrides.

    Raises:
        NmtError: the config is broken, or an override is out of range.
    """
    base = settings.pair_data_config(pair)
    data = replace(base, pair=pair, bpe_size=base.bpe_size if bpe_size is None else bpe_size,
                   max_len=base.max_len if max_len is None else max_len,
                   keep_partial=base.keep_partial if keep_partial is None else keep_partial)
    if data.bpe_size <= 4:
        raise NmtError(f"--bpe-size {data.bpe_size} must be larger than the 4 special pieces")
    if data.max_len < 1:
        raise NmtError(f"--max-len {data.max_len} must be at least 1")
    return data


def _load(pair: str, data_dir: Path, source: str, inputs: Inputs, data: DataConfig, progress: bool
          ) -> corpora.Corpus:
    src, tgt = corpora.parse_pair(pair)
    if inputs.from_dir is not None:
        _log(f"reading {inputs.from_dir}", progress)
        corpus = corpora.load_dir(inputs.from_dir, src, tgt)
    else:
        archive = Path(inputs.archive) if inputs.archive is not None else None
        request = corpora.Request(src, tgt, data_dir / "downloads", inputs.urls, archive, data.keep_partial,
                                  progress)
        corpus = corpora.load(request, source)
    for split, text in corpus.items():
        if not text.src:
            raise NmtError(f"{pair} {split}: no sentence pairs left ({dict(text.dropped)} dropped)")
    return corpus


@dataclass(frozen=True)
class GivenModel:
    """A SentencePiece model to cut the text with instead of training one: its bytes and where they came from (a
    checkpoint's are read by :func:`nmt.checkpoint.files.sentencepiece_bytes`, which ``nmt prepare --spm-model``
    calls: the data layer never opens checkpoints)."""

    data: bytes
    source: str


def read_spm_model(given: str | Path | GivenModel) -> bytes:
    """The bytes of a given SentencePiece model: a :class:`GivenModel`, or an ``spm.model`` file."""
    if isinstance(given, GivenModel):
        data, source = given.data, given.source
    else:
        path = Path(given)
        if not path.is_file():
            raise NmtError(f"--spm-model {path}: file not found" if not path.exists() else
                           f"--spm-model {path} is not a file")
        if zipfile.is_zipfile(path):
            raise NmtError(f"--spm-model {path} is a checkpoint: `nmt prepare --spm-model` reads it, or pass "
                           "GivenModel(nmt.checkpoint.files.sentencepiece_bytes(path), str(path))")
        data, source = path.read_bytes(), str(path)
    try:
        SentencePieceTokenizer(data)
    except NmtError as exc:
        raise NmtError(f"--spm-model {source}: {exc}") from None
    return data


def _write(pair_dir: Path, corpus: corpora.Corpus, src: str, tgt: str, data: DataConfig, progress: bool,
           spm_model: bytes | None = None) -> dict[str, Any]:
    """SentencePiece (trained, or ``spm_model`` as given), raw text and binarized splits; the meta fields they
    determine."""
    pair_dir.mkdir(parents=True, exist_ok=True)
    if spm_model is None:
        _log(f"training SentencePiece BPE (vocab {data.bpe_size}) on {len(corpus['train'])} pairs", progress)
        vocab_size = train_sentencepiece(corpus["train"].src + corpus["train"].tgt, pair_dir, data.bpe_size)
    else:
        _log("using the given SentencePiece model (no training)", progress)
        with atomic_open(pair_dir / "spm.model") as handle:
            handle.write(spm_model)
        (pair_dir / "spm.vocab").unlink(missing_ok=True)  # a trained model's vocabulary listing, not this one's
        vocab_size = SentencePieceTokenizer(spm_model).vocab_size
    tokenizer = SentencePieceTokenizer(pair_dir / "spm.model")
    splits: dict[str, dict[str, Any]] = {}
    length_p975 = 0.0
    for split, text in corpus.items():
        text, src_ids, tgt_ids = _encode(tokenizer, text, data.max_len if split == "train" else None)
        if not text.src:
            raise NmtError(f"{pair_dir.name} {split}: no sentence pairs left after --max-len {data.max_len}")
        for lang, lines, ids in ((src, text.src, src_ids), (tgt, text.tgt, tgt_ids)):
            write_lines_atomic(pair_dir / "raw" / f"{split}.{lang}", lines)
            binarized.write_split(pair_dir, split, lang, ids)
        splits[split] = {"lines": len(text), "dropped": dict(sorted(text.dropped.items())),
                         "src_tokens": sum(map(len, src_ids)), "tgt_tokens": sum(map(len, tgt_ids))}
        if split == "train":
            length_p975 = length_percentile(src_ids, tgt_ids)
    return {"vocab_size": vocab_size, "spm_sha256": download.sha256_file(pair_dir / "spm.model"),
            "splits": splits, "length_p975": length_p975}


def prepare(pair: str, data_dir: str | Path = DataConfig.data_dir, *, url: str | Sequence[str] | None = None,
            from_dir: str | Path | None = None, from_archive: str | Path | None = None, bpe_size: int | None = None,
            max_len: int | None = None, keep_partial: bool | None = None, force: bool = False, moses: bool = False,
            progress: bool = True, spm_model: str | Path | GivenModel | None = None) -> dict[str, Any]:
    """Prepare ``DATA_DIR/PAIR/`` and return its meta (the content of ``meta.json``).

    Args:
        pair: ``src-tgt``; en-vi / vi-en is IWSLT'15, any other pair of TED codes is the TED talks corpus.
        data_dir: root of the prepared data; downloads are cached in ``DATA_DIR/downloads/``.
        url: mirrors tried first: the archive URL (TED) or the folder of the six files (IWSLT'15).
        from_dir: read ``{train,dev,test}.{src,tgt}`` from this directory instead of downloading.
        from_archive: a ``ted_talks.tar.gz`` fetched by other means, checked like a download.
        bpe_size: SentencePiece vocabulary size (lowered, with a warning, if the corpus cannot fill it);
            None: the pair config's ``data.bpe_size``.
        max_len: drop training pairs with more pieces on either side (dev/test are never cut); None: the config's.
        keep_partial: TED: strip NULL markers instead of dropping the pair; None: the config's.
        force: redo everything even if ``meta.json`` matches.
        moses: Moses-tokenize the text first (for raw, untokenized corpora).
        progress: progress bars and step messages on stderr.
        spm_model: cut the text into this SentencePiece model's pieces (an ``spm.model``, or a checkpoint's as a
            :class:`GivenModel`, e.g. a
            parent model's for fine-tuning) instead of training one; ``bpe_size`` is then that model's size.

    Raises:
        NmtError: bad pair or option, download/extraction failure, malformed or empty corpus.
    """
    src, tgt = corpora.parse_pair(pair)
    data = resolve_settings(pair, bpe_size, max_len, keep_partial)
    urls = (url,) if isinstance(url, str) else tuple(url or ())
    chosen = [name for name, given in (("--url", urls), ("--from-dir", from_dir), ("--from-archive", from_archive))
              if given]
    if len(chosen) > 1:
        raise NmtError(f"{' and '.join(chosen)} exclude each other (each says where the corpus comes from)")
    inputs = Inputs(urls, from_dir, from_archive)
    pair_dir = Path(data_dir) / pair
    source = "dir" if from_dir is not None else corpora.source_for(src, tgt)
    pieces = read_spm_model(spm_model) if spm_model is not None else None
    if pieces is not None:
        size = SentencePieceTokenizer(pieces).vocab_size
        if bpe_size is not None and bpe_size != size:
            name = spm_model.source if isinstance(spm_model, GivenModel) else spm_model
            raise NmtError(f"--bpe-size {bpe_size} but --spm-model {name} has {size} pieces")
        data = replace(data, bpe_size=size)
    options = _options(src, tgt, source, inputs, data, moses)
    if pieces is not None:
        options["spm_model"] = hashlib.sha256(pieces).hexdigest()
    if not force and (existing := _up_to_date(pair_dir, options)) is not None:
        _log(f"{pair_dir} is up to date (use --force to redo it)", progress)
        return existing
    (pair_dir / "meta.json").unlink(missing_ok=True)  # from here on the directory is incomplete
    corpus = _load(pair, Path(data_dir), source, inputs, data, progress)
    if moses:
        _log("Moses-tokenizing", progress)
        corpus = {split: ParallelText(moses_tokenize(t.src, src), moses_tokenize(t.tgt, tgt), t.dropped)
                  for split, t in corpus.items()}
    written = _write(pair_dir, corpus, src, tgt, data, progress, pieces)
    meta: dict[str, Any] = {
        "pair": pair, "src": src, "tgt": tgt, "source": source, "bpe_size": data.bpe_size,
        "max_len": data.max_len, "filter": settings.filter_name(data.keep_partial) if source == "ted" else None,
        **written, "options": options,
    }
    atomic_write_text(pair_dir / "meta.json", json.dumps(meta, indent=2) + "\n")
    settings.warn_counts(meta)
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
    if meta.get("filter"):
        lines.append(f"filter: {meta['filter']} (TED pairs containing NULL are "
                     + ("kept with the markers stripped)" if meta["filter"] == "keep_partial" else "dropped)"))
    lines.append(f"vocab size {meta['vocab_size']:,} (requested {meta['bpe_size']:,}); "
                 f"length_p975 {meta['length_p975']:.1f} pieces (QKNorm L)")
    return "\n".join(lines)
