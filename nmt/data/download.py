"""HTTP downloads with a cache, retries and checksums, and tar extraction that cannot write outside its target.

A download goes to ``NAME.part`` and is renamed to ``NAME`` only after the body matched the server's
Content-Length and, when :data:`KNOWN` (or the caller) gives one, the expected size and sha256. A file under its
final name is therefore always complete; a leftover ``.part`` is discarded. Connection errors, truncated bodies and
5xx answers are retried with exponential backoff; 4xx answers and checksum mismatches fail at once.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from nmt.errors import NmtError

TED_URL = "http://phontron.com/data/ted_talks.tar.gz"
IWSLT15_EN_VI_URL = "https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi/"

# url -> (size in bytes, sha256) of the published file, or None where nobody has recorded them yet.
KNOWN: dict[str, tuple[int, str] | None] = {
    TED_URL: None,
    **{f"{IWSLT15_EN_VI_URL}{stem}.{lang}": None for stem in ("train", "tst2012", "tst2013") for lang in ("en", "vi")},
}

RETRIES = 4  # attempts after the first one
BACKOFF_S = 2.0  # first wait; doubled after every failed attempt
TIMEOUT_S = 60.0
CHUNK = 1 << 20


class _Transient(Exception):
    """A failure worth retrying (connection trouble, 5xx, truncated body)."""


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_expected(path: Path, url: str, expected: tuple[int, str] | None) -> None:
    if expected is None:
        return
    size, sha = expected
    got_size = path.stat().st_size
    if got_size != size:
        raise NmtError(f"download of {url}: size {got_size} bytes, expected {size}")
    got_sha = sha256_file(path)
    if got_sha != sha:
        raise NmtError(f"download of {url}: sha256 {got_sha} does not match the expected {sha}")


def _fetch_once(url: str, part: Path, timeout: float, progress: bool) -> None:
    """Stream ``url`` into ``part``; raise :class:`_Transient` for retryable failures, NmtError for the rest."""
    request = urllib.request.Request(url, headers={"User-Agent": "nmt-prepare/0.1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length_header = response.headers.get("Content-Length")
            total = int(length_header) if length_header and length_header.isdigit() else None
            received = 0
            bar = tqdm(total=total, unit="B", unit_scale=True, desc=PurePosixPath(url).name or url,
                       file=sys.stderr, disable=not progress, leave=False)
            with bar, open(part, "wb") as handle:
                while block := response.read(CHUNK):
                    handle.write(block)
                    received += len(block)
                    bar.update(len(block))
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise _Transient(f"HTTP {exc.code} {exc.reason}") from None
        raise NmtError(f"download of {url} failed: HTTP {exc.code} {exc.reason}") from None
    except http.client.IncompleteRead as exc:
        raise _Transient(f"truncated download: connection closed after {len(exc.partial)} more bytes") from None
    except urllib.error.URLError as exc:
        if url.startswith("file:"):  # a local mirror: nothing to wait for
            raise NmtError(f"cannot read {url}: {exc.reason}") from None
        raise _Transient(f"{type(exc).__name__}: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise _Transient(f"{type(exc).__name__}: {reason}") from None
    if total is not None and received != total:
        raise _Transient(f"truncated download: got {received} of {total} bytes")


def fetch(url: str, dest_dir: str | Path, *, filename: str | None = None, expected: tuple[int, str] | None = None,
          retries: int | None = None, backoff: float | None = None, timeout: float | None = None,
          progress: bool = True) -> Path:
    """Download ``url`` into ``dest_dir`` (once: a complete earlier download is reused) and return its path.

    Args:
        url: what to fetch: an http, https or file URL, or a local path (a mirror on disk).
        dest_dir: the download cache directory, created if missing.
        filename: name in the cache; default the last component of the URL.
        expected: (size, sha256) the file must have; default ``KNOWN.get(url)``.
        retries: extra attempts after transient failures; default :data:`RETRIES`.
        backoff: seconds before the first retry, doubled each time; default :data:`BACKOFF_S`.
        timeout: socket timeout in seconds; default :data:`TIMEOUT_S`.
        progress: show a tqdm progress bar and retry notices on stderr.

    Raises:
        NmtError: 4xx answer, checksum mismatch, or still failing after all retries.
    """
    if "://" not in url:
        if not Path(url).is_file():
            raise NmtError(f"{url} is neither a URL (http://, https://, file://) nor an existing file")
        url = Path(url).resolve().as_uri()
    if urllib.parse.urlsplit(url).scheme not in ("http", "https", "file"):
        raise NmtError(f"unsupported URL {url} (use http://, https:// or file://)")
    retries = RETRIES if retries is None else retries
    backoff = BACKOFF_S if backoff is None else backoff
    timeout = TIMEOUT_S if timeout is None else timeout
    expected = KNOWN.get(url) if expected is None else expected
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    name = filename or PurePosixPath(url.rstrip("/")).name
    if not name:
        raise NmtError(f"cannot name the download of {url}; pass a filename")
    path, part = dest_dir / name, dest_dir / f"{name}.part"
    if path.exists():
        try:
            _check_expected(path, url, expected)
            return path
        except NmtError:
            path.unlink()  # a stale or foreign file under the final name: fetch it again
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            wait = backoff * 2 ** (attempt - 1)
            if progress:
                print(f"retrying {url} in {wait:.3g}s ({last})", file=sys.stderr)
            time.sleep(wait)
        try:
            _fetch_once(url, part, timeout, progress)
            _check_expected(part, url, expected)
        except _Transient as exc:
            last = str(exc)
            continue
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        os.replace(part, path)
        return path
    part.unlink(missing_ok=True)
    raise NmtError(f"download of {url} failed after {retries + 1} attempts: {last}")


def _check_member(member: tarfile.TarInfo, root: Path, archive: Path) -> None:
    """Refuse absolute paths, ``..``, links leaving ``root``, and device/FIFO members."""
    where = f"{archive}: unsafe member {member.name!r}"
    name = PurePosixPath(member.name)
    if name.is_absolute() or member.name.startswith(("/", "\\")) or ".." in name.parts:
        raise NmtError(f"{where} (absolute path or '..')")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise NmtError(f"{where} (device, FIFO or other special file)")
    target = root.joinpath(*name.parts)
    if not target.resolve().is_relative_to(root):
        raise NmtError(f"{where} (resolves outside the target directory)")
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        base = target.parent if member.issym() else root
        if link.is_absolute() or not (base / link).resolve().is_relative_to(root):
            raise NmtError(f"{where} (link to {member.linkname!r} leaves the target directory)")


def extract(archive: str | Path, dest: str | Path, names: list[str]) -> dict[str, Path]:
    """Extract the regular files called ``names`` (matched by basename, in any subdirectory) into ``dest``.

    Every member of the archive is checked before anything is written (see :func:`_check_member`), so a hostile
    archive leaves ``dest`` untouched. Files are written flat as ``dest/NAME`` via a temporary name and a rename.

    Raises:
        NmtError: the archive is unreadable, holds an unsafe member, or lacks one of ``names``.
    """
    archive, dest = Path(archive), Path(dest)
    root = dest.resolve()
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member, root, archive)
            found = {PurePosixPath(m.name).name: m for m in members if m.isfile()}
            missing = [name for name in names if name not in found]
            if missing:
                raise NmtError(f"{archive} lacks the expected member {missing[0]!r}"
                               + (f" (also missing: {', '.join(missing[1:])})" if missing[1:] else ""))
            dest.mkdir(parents=True, exist_ok=True)
            out: dict[str, Path] = {}
            for name in names:
                source = tar.extractfile(found[name])
                assert source is not None  # regular files always have data
                path, tmp = dest / name, dest / f".{name}.tmp{os.getpid()}"
                with source, open(tmp, "wb") as handle:
                    while block := source.read(CHUNK):
                        handle.write(block)
                os.replace(tmp, path)
                out[name] = path
            return out
    except (tarfile.TarError, EOFError, OSError) as exc:
        detail = " ".join(str(exc).split())  # tarfile lists one reason per compression method, one per line
        raise NmtError(f"cannot read archive {archive} (truncated, corrupt or not a tar file): {detail}") from None
