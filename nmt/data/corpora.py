"""Where parallel text comes from: TED talks (Qi et al. 2018), IWSLT'15 en-vi, or files already on disk.

Every source returns ``{split: ParallelText}`` for the splits in :data:`SPLITS`, normalised, with dropped pairs
counted per reason (see :mod:`nmt.data.text`). :data:`SOURCES` maps a source name to its loader; :func:`source_for`
picks the source of a language pair. Downloads are checked against :mod:`nmt.data.catalog`.

TED filtering (:data:`FILTERS`): ``official`` is the corpus's own reader (``ted_reader.py`` in
github.com/neulab/word-embeddings-for-nmt, ``filter_text``): a pair is dropped when its source or target contains
the string ``NULL`` anywhere (``__NULL__``, ``_ _ NULL _ _``, also inside a line) or is empty. That rule gives the
papers' splits (gl-en 10,017 / 682 / 1,007). ``keep_partial`` strips the two markers and keeps what is left
(gl-en 11,233 / 742 / 1,112: partial translations stay in), for users who want more data; never the default.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from nmt.data import catalog, download
from nmt.data.text import ParallelText, clean_pairs, iter_lines, read_parallel
from nmt.errors import NmtError

SPLITS = ("train", "dev", "test")
TED_FILES = {split: f"all_talks_{split}.tsv" for split in SPLITS}
IWSLT15_FILES = {"train": "train", "dev": "tst2012", "test": "tst2013"}
NULL = "NULL"  # the official reader's empty_line_flag: any field containing it is a missing translation
NULL_MARKERS = ("__NULL__", "_ _ NULL _ _")  # what keep_partial strips
FILTERS = ("official", "keep_partial")
MAX_FIELD = 131_072  # csv's default field_size_limit: the official reader (csv module) aborts on a longer field
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,15}")

Corpus = dict[str, ParallelText]


@dataclass(frozen=True)
class Request:
    """What to load: the pair, the download cache, extra mirrors, a manually fetched archive, the TED filter."""

    src: str
    tgt: str
    downloads: Path
    urls: tuple[str, ...] = ()  # --url: the archive (TED) or the folder holding the six files (IWSLT'15)
    archive: Path | None = None  # --from-archive: ted_talks.tar.gz fetched by other means
    keep_partial: bool = False
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


def _ted_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every non-blank line; the header first.

    Splitting on tabs is exactly what ``csv.reader(delimiter='\\t', quoting=csv.QUOTE_NONE)`` does, without its
    field-size limit and NUL-byte errors; blank lines are no records (csv skips them too).
    """
    for number, line in enumerate(iter_lines(path), start=1):
        if line.strip():
            yield number, line.replace("\r", " ").split("\t")


def _columns(header: list[str], path: Path, src: str, tgt: str) -> tuple[int, int]:
    columns = {name.strip(): i for i, name in enumerate(header)}
    codes = [name for name in columns if name != "talk_name"]
    index: list[int] = []
    for code in (src, tgt):
        column = code.replace("_", "-") if code not in columns else code
        if column not in columns or column == "talk_name":
            raise NmtError(f"unknown language code {code!r} in {path.name}; available: {', '.join(sorted(codes))}")
        index.append(columns[column])
    return index[0], index[1]


def read_ted_tsv(path: str | Path, src: str, tgt: str, keep_partial: bool = False) -> ParallelText:
    """Read one ``all_talks_*.tsv``: the ``src`` and ``tgt`` columns under the official rule (module docstring).

    Drop reasons: ``null`` (a ``NULL`` marker; with ``keep_partial``, a side left empty by stripping it), ``empty``,
    ``malformed`` (wrong number of fields), ``overlong_field`` (a used field over :data:`MAX_FIELD` characters),
    ``nul_byte``. ``src``/``tgt`` may use ``_`` for the TSV's ``-`` (``pt_br`` = ``pt-br``). A UTF-8 BOM before the
    header and CRLF line endings are accepted.

    Raises:
        NmtError: a language code is not a column of the file (the message lists the available codes), or the
            file is missing, empty or not UTF-8.
    """
    path = Path(path)
    rows = _ted_rows(path)
    _, header = next(rows, (0, []))
    if not header or header[0].strip() != "talk_name":
        raise NmtError(f"{path}: expected a header row starting with 'talk_name'")
    i, j = _columns(header, path, src, tgt)
    dropped: Counter[str] = Counter()
    src_lines: list[str] = []
    tgt_lines: list[str] = []
    for _, row in rows:
        if len(row) != len(header):
            dropped["malformed"] += 1
            continue
        s, t = row[i], row[j]
        if len(s) > MAX_FIELD or len(t) > MAX_FIELD:
            dropped["overlong_field"] += 1
            continue
        if keep_partial:
            s_clean, t_clean = _strip_null(s).strip(), _strip_null(t).strip()
            if (not s_clean and s.strip()) or (not t_clean and t.strip()):
                dropped["null"] += 1
                continue
            s, t = s_clean, t_clean
        elif NULL in s or NULL in t:
            dropped["null"] += 1
            continue
        src_lines.append(s)
        tgt_lines.append(t)
    return clean_pairs(src_lines, tgt_lines, dropped)


def _ted_archive(request: Request, expected: catalog.Expected) -> tuple[Path, bool]:
    """The verified archive and whether it lives in the download cache (so a bad one may be deleted)."""
    if request.archive is not None:
        return download.check_local(request.archive, expected), False
    urls = catalog.candidate_urls(catalog.TED, list(request.urls))
    hint = (f"fetch {catalog.TED} by other means and pass --from-archive FILE, or set {catalog.MIRROR_ENV}=DIR "
            "holding it (data/README.md)")
    return download.fetch(urls, request.downloads, filename=catalog.TED, expected=expected,
                          progress=request.progress, hint=hint), True


def load_ted(request: Request) -> Corpus:
    """TED talks: fetch and check ``ted_talks.tar.gz`` (mirrors or ``--from-archive``), extract, read the pair.

    The extracted TSVs are reused only when stamped with the checksum of the archive they came from.
    """
    expected = catalog.KNOWN[catalog.TED]
    extracted = request.downloads / "ted_talks"
    stamp = extracted / ".archive.sha256"
    paths = {split: extracted / name for split, name in TED_FILES.items()}
    fresh = all(p.exists() for p in paths.values()) and stamp.is_file() and stamp.read_text() == expected.sha256
    if not fresh or request.archive is not None:
        archive, cached = _ted_archive(request, expected)
        if request.progress:
            print(f"extracting {', '.join(TED_FILES.values())} from {archive}", file=sys.stderr)
        stamp.unlink(missing_ok=True)
        try:
            download.extract(archive, extracted, list(TED_FILES.values()))
        except NmtError:
            if cached:
                archive.unlink(missing_ok=True)  # never reuse an archive that cannot be read
            raise
        stamp.write_text(expected.sha256)
    return {split: read_ted_tsv(paths[split], request.src, request.tgt, request.keep_partial) for split in SPLITS}


def load_iwslt15(request: Request) -> Corpus:
    """IWSLT'15 en-vi (Stanford release): train, tst2012 (dev), tst2013 (test); either direction."""
    if request.archive is not None:
        raise NmtError(f"--from-archive is for the TED archive; for en-vi put the six files in "
                       f"DIR/{catalog.IWSLT15}/ and set {catalog.MIRROR_ENV}=DIR (or pass --url DIR/{catalog.IWSLT15})")
    folder = request.downloads / catalog.IWSLT15
    corpus: Corpus = {}
    for split, stem in IWSLT15_FILES.items():
        paths = {}
        for lang in (request.src, request.tgt):
            file = f"{stem}.{lang}"
            urls = catalog.candidate_urls(f"{catalog.IWSLT15}/{file}", [catalog.join(u, file) for u in request.urls])
            hint = f"put the six files in DIR/{catalog.IWSLT15}/ and set {catalog.MIRROR_ENV}=DIR (data/README.md)"
            paths[lang] = download.fetch(urls, folder, filename=file, expected=catalog.KNOWN.get(
                f"{catalog.IWSLT15}/{file}"), progress=request.progress, hint=hint)
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


@dataclass(frozen=True)
class Source:
    """A corpus source: its loader and the pairs it serves (None: every pair no other source serves)."""

    load: Callable[[Request], Corpus]
    serves: Callable[[str, str], bool] | None = None


# source name -> Source: the only list of sources (a new one is its loader plus one line here). Pairs pick their
# source with source_for(); --from-dir bypasses the registry.
SOURCES: dict[str, Source] = {
    "iwslt15": Source(load_iwslt15, lambda src, tgt: {src, tgt} == {"en", "vi"}),
    "ted": Source(load_ted),  # the TED talks corpus: every other pair
}


def source_for(src: str, tgt: str) -> str:
    """The registry key for a pair: the first source that names it among the pairs it serves, else the one that
    serves every other pair (``ted``)."""
    named = [name for name, source in SOURCES.items() if source.serves is not None and source.serves(src, tgt)]
    if named:
        return named[0]
    return next(name for name, source in SOURCES.items() if source.serves is None)


def load(request: Request, source: str) -> Corpus:
    """Load ``request`` from the named source in :data:`SOURCES`."""
    if source not in SOURCES:
        raise NmtError(f"unknown corpus source {source!r} (valid: {', '.join(SOURCES)})")
    return SOURCES[source].load(request)
