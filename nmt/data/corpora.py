"""Where parallel text comes from: TED talks (Qi et al. 2018), IWSLT'15 en-vi, or files already on disk.

Every source returns ``{split: ParallelText}`` for the splits in :data:`SPLITS`, normalised and with empty pairs
dropped (see :mod:`nmt.data.text`). :data:`SOURCES` maps a source name to its loader; :func:`source_for` picks
the source of a language pair.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from nmt.data import download
from nmt.data.text import ParallelText, clean_pairs, iter_lines, read_parallel
from nmt.errors import NmtError

SPLITS = ("train", "dev", "test")
TED_FILES = {split: f"all_talks_{split}.tsv" for split in SPLITS}
IWSLT15_FILES = {"train": "train", "dev": "tst2012", "test": "tst2013"}
NULL_MARKERS = ("__NULL__", "_ _ NULL _ _")
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,15}")

Corpus = dict[str, ParallelText]


@dataclass(frozen=True)
class Request:
    """What to load: the pair, where the download cache lives, and an optional URL override (mirror)."""

    src: str
    tgt: str
    downloads: Path
    url: str | None = None
    progress: bool = True


def parse_pair(pair: str) -> tuple[str, str]:
    """Split ``"gl-en"`` into ``("gl", "en")``.

    Codes are letters, digits and ``_`` (TED's ``pt-br`` is written ``pt_br``, as a pair holds exactly one ``-``).

    Raises:
        NmtError: the pair does not look like ``src-tgt`` or names one language twice.
    """
    parts = pair.split("-")
    if len(parts) != 2 or not all(_CODE.fullmatch(p) for p in parts):
        raise NmtError(f"language pair {pair!r} must look like src-tgt with two language codes (e.g. gl-en)")
    if parts[0] == parts[1]:
        raise NmtError(f"language pair {pair!r} names the same language twice")
    return parts[0], parts[1]


def _strip_null(text: str) -> str:
    for marker in NULL_MARKERS:
        text = text.replace(marker, "")
    return text


def read_ted_tsv(path: str | Path, src: str, tgt: str) -> ParallelText:
    """Read one ``all_talks_*.tsv``: the ``src`` and ``tgt`` columns, NULL markers stripped, empty pairs dropped.

    Pairs lost to a NULL marker are counted as ``null``, other empty sides as ``empty``, rows with the wrong
    number of fields as ``malformed``. ``src``/``tgt`` may use ``_`` for the TSV's ``-`` (``pt_br`` = ``pt-br``).

    Raises:
        NmtError: a language code is not a column of the file (the message lists the available codes), or the
            file is missing, empty or not UTF-8.
    """
    path = Path(path)
    lines = (line.replace("\r", " ") for line in iter_lines(path))  # a stray CR would end a csv record
    rows = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    try:
        return _read_rows(rows, path, src, tgt)
    except csv.Error as exc:
        raise NmtError(f"{path} line {rows.line_num}: {exc}") from None


def _read_rows(rows: Iterator[list[str]], path: Path, src: str, tgt: str) -> ParallelText:
    header = next(rows, None)
    if not header or header[0] != "talk_name":
        raise NmtError(f"{path}: expected a header row starting with 'talk_name'")
    columns = {name.strip(): i for i, name in enumerate(header)}
    codes = [name for name in columns if name != "talk_name"]
    index: list[int] = []
    for code in (src, tgt):
        column = code.replace("_", "-") if code not in columns else code
        if column not in columns or column == "talk_name":
            raise NmtError(f"unknown language code {code!r} in {path.name}; available: {', '.join(sorted(codes))}")
        index.append(columns[column])
    dropped: Counter[str] = Counter()
    src_lines: list[str] = []
    tgt_lines: list[str] = []
    for row in rows:
        if len(row) != len(header):
            dropped["malformed"] += 1
            continue
        s, t = row[index[0]], row[index[1]]
        s_clean, t_clean = _strip_null(s).strip(), _strip_null(t).strip()
        if (not s_clean and s.strip()) or (not t_clean and t.strip()):
            dropped["null"] += 1
            continue
        src_lines.append(s_clean)
        tgt_lines.append(t_clean)
    return clean_pairs(src_lines, tgt_lines, dropped)


def load_ted(request: Request) -> Corpus:
    """TED talks: download ``ted_talks.tar.gz`` (or ``request.url``), extract the three TSVs, read the pair."""
    url = request.url or download.TED_URL
    extracted = request.downloads / "ted_talks"
    paths = {split: extracted / name for split, name in TED_FILES.items()}
    if not all(p.exists() for p in paths.values()):
        archive = download.fetch(url, request.downloads, filename="ted_talks.tar.gz", progress=request.progress)
        if request.progress:
            print(f"extracting {', '.join(TED_FILES.values())} from {archive}", file=sys.stderr)
        download.extract(archive, extracted, list(TED_FILES.values()))
    return {split: read_ted_tsv(paths[split], request.src, request.tgt) for split in SPLITS}


def load_iwslt15(request: Request) -> Corpus:
    """IWSLT'15 en-vi (Stanford release): train, tst2012 (dev), tst2013 (test); either direction."""
    base = request.url or download.IWSLT15_EN_VI_URL
    base = base if base.endswith("/") else base + "/"
    folder = request.downloads / "iwslt15.en-vi"
    corpus: Corpus = {}
    for split, stem in IWSLT15_FILES.items():
        paths = {lang: download.fetch(f"{base}{stem}.{lang}", folder, progress=request.progress)
                 for lang in (request.src, request.tgt)}
        corpus[split] = read_parallel(paths[request.src], paths[request.tgt])
    return corpus


def load_dir(directory: str | Path, src: str, tgt: str) -> Corpus:
    """Local files ``DIR/{train,dev,test}.{src,tgt}`` (e.g. ``../shared/data/gl-en``).

    Raises:
        NmtError: the directory or a file is missing, unreadable, or a split's two files differ in line count.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise NmtError(f"--from-dir {directory} is not a directory")
    return {split: read_parallel(directory / f"{split}.{src}", directory / f"{split}.{tgt}") for split in SPLITS}


# source name -> loader. Pairs pick their source with source_for(); --from-dir bypasses the registry.
SOURCES: dict[str, Callable[[Request], Corpus]] = {
    "iwslt15": load_iwslt15,
    "ted": load_ted,
}


def source_for(src: str, tgt: str) -> str:
    """The registry key for a pair: ``iwslt15`` for en-vi / vi-en, ``ted`` for every other pair."""
    return "iwslt15" if {src, tgt} == {"en", "vi"} else "ted"


def load(request: Request, source: str) -> Corpus:
    """Load ``request`` from the named source in :data:`SOURCES`."""
    if source not in SOURCES:
        raise NmtError(f"unknown corpus source {source!r} (valid: {', '.join(SOURCES)})")
    return SOURCES[source](request)
