"""HTTP downloads from a list of mirrors, checked against known sizes and SHA-256, resumed with HTTP Range;
tar extraction that cannot write outside its target.

A download goes to ``NAME.part`` and is renamed to ``NAME`` only after the body matched the server's
Content-Length and the expected size and sha256 (:mod:`nmt.data.catalog`), so a file under its final name is
complete; a cached file is checked again before it is reused, and deleted when it does not match. Connection
errors, stalls (no byte for ``timeout`` seconds), truncated bodies and 5xx answers are retried with exponential
backoff, resuming the ``.part`` with a Range request. An HTML page, a 4xx answer, a wrong size or a wrong hash is
refused at once: the partial file is deleted, one line names the URL and what was expected, and the next mirror
is tried.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from nmt.atomic import atomic_open
from nmt.data.catalog import Expected
from nmt.errors import NmtError

RETRIES = 4  # attempts per mirror after the first one
BACKOFF_S = 2.0  # first wait; doubled after every failed attempt
TIMEOUT_S = 60.0  # a connection that delivers no byte for this long is a stall: retried, resuming
CHUNK = 1 << 20
_HTML = re.compile(rb"\s*(<!doctype\s+html|<html|<head|<body|<\?xml)", re.IGNORECASE)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+|\*)")


class _Transient(Exception):
    """A failure worth retrying (connection trouble, stall, 5xx, truncated body)."""


class _Refused(Exception):
    """This mirror gave something else than the expected file: try the next one."""


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def looks_like_html(head: bytes) -> bool:
    """Whether the first bytes of a body are an HTML (or XML) page rather than data."""
    return bool(_HTML.match(head.lstrip(b"\xef\xbb\xbf")))


def check_file(path: Path, expected: Expected | None) -> str | None:
    """Why ``path`` is not the expected file (HTML page, size, hash), or None when it is."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(512)
    if looks_like_html(head):
        return f"got an HTML page ({size:,} bytes)"
    if expected is None:
        return None
    if size != expected.size:
        return f"size {size:,} bytes"
    got = sha256_file(path)
    return None if got == expected.sha256 else f"sha256 {got}"


def _request(url: str, offset: int) -> urllib.request.Request:
    headers = {"User-Agent": "nmt-prepare/0.1"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return urllib.request.Request(url, headers=headers)


def _resume_offset(response: http.client.HTTPResponse, offset: int) -> int:
    """Where the body starts in the file: ``offset`` for a matching 206, 0 when the server sent everything."""
    if response.status != 206:
        return 0
    match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", ""))
    if not match or int(match.group(1)) != offset:
        raise _Transient(f"unusable Content-Range {response.headers.get('Content-Range')!r}")
    return offset


def _fetch_once(url: str, part: Path, timeout: float, progress: bool, expected: Expected | None) -> None:
    """Stream ``url`` into ``part``, resuming a non-empty ``part`` with a Range request.

    Raises:
        _Transient: worth retrying. _Refused: not the expected file. NmtError: a local file cannot be read.
    """
    offset = part.stat().st_size if part.exists() else 0
    try:
        with urllib.request.urlopen(_request(url, offset), timeout=timeout) as response:
            start = _resume_offset(response, offset)
            length_header = response.headers.get("Content-Length")
            length = int(length_header) if length_header and length_header.isdigit() else None
            total = start + length if length is not None else None
            if expected is not None and total is not None and total != expected.size:
                first = response.read(512) if start == 0 else b""
                kind = "an HTML page" if looks_like_html(first) else "a file"
                raise _Refused(f"the server announced {kind} of {total:,} bytes")
            _stream(response, part, start, total, url, progress)
    except urllib.error.HTTPError as exc:
        if exc.code == 416:  # the range starts at or past the end: the partial file is unusable, start over
            part.unlink(missing_ok=True)
            raise _Transient("HTTP 416 (range not satisfiable)") from None
        if exc.code >= 500:
            raise _Transient(f"HTTP {exc.code} {exc.reason}") from None
        raise _Refused(f"HTTP {exc.code} {exc.reason}") from None
    except http.client.IncompleteRead as exc:
        raise _Transient(f"truncated download: connection closed after {len(exc.partial)} more bytes") from None
    except urllib.error.URLError as exc:
        if url.startswith("file:"):  # a local mirror: nothing to wait for
            raise _Refused(f"cannot read it: {exc.reason}") from None
        raise _Transient(f"{type(exc).__name__}: {exc.reason}") from None
    except TimeoutError:
        raise _Transient(f"stalled: no data for {timeout:g}s") from None
    except (OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise _Transient(f"{type(exc).__name__}: {reason}") from None


def _stream(response: http.client.HTTPResponse, part: Path, start: int, total: int | None, url: str,
            progress: bool) -> None:
    """Write the body at ``start`` (appending to or restarting ``part``); refuse HTML; check the length."""
    received = start
    bar = tqdm(total=total, initial=start, unit="B", unit_scale=True, desc=PurePosixPath(url).name or url,
               file=sys.stderr, disable=not progress, leave=False)
    read = getattr(response, "read1", response.read)  # read1: what has arrived, so a stall keeps the bytes so far
    with bar, open(part, "ab" if start else "wb") as handle:
        while block := read(CHUNK):
            if received == 0 and looks_like_html(block[:512]):
                raise _Refused("got an HTML page")
            handle.write(block)
            received += len(block)
            bar.update(len(block))
    if total is not None and received != total:
        raise _Transient(f"truncated download: got {received:,} of {total:,} bytes")


def _normalise(url: str) -> str:
    if "://" not in url:
        if not Path(url).is_file():
            raise NmtError("no such file (and not an http://, https:// or file:// URL)")
        return Path(url).resolve().as_uri()
    if urllib.parse.urlsplit(url).scheme not in ("http", "https", "file"):
        raise NmtError("unsupported URL (use http://, https:// or file://)")
    return url


def _try_mirror(url: str, path: Path, expected: Expected | None, retries: int, backoff: float, timeout: float,
                progress: bool) -> str | None:
    """Fetch ``url`` into ``path`` with retries; None on success, else why this mirror failed."""
    part = path.with_name(f"{path.name}.part")
    if expected is not None and part.exists() and part.stat().st_size >= expected.size:
        if check_file(part, expected) is None:  # complete, interrupted just before the rename
            os.replace(part, path)
            return None
        part.unlink()  # as long as the whole file but wrong: nothing to resume
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            wait = backoff * 2 ** (attempt - 1)
            if progress:
                print(f"retrying {url} in {wait:.3g}s ({last})", file=sys.stderr)
            time.sleep(wait)
        try:
            _fetch_once(url, part, timeout, progress, expected)
            if (why := check_file(part, expected)) is not None:
                raise _Refused(why)
        except _Transient as exc:
            last = str(exc)
            continue
        except _Refused as exc:
            part.unlink(missing_ok=True)
            return str(exc)
        except BaseException:
            if expected is None:  # a partial file is resumed only when a checksum will vouch for the result
                part.unlink(missing_ok=True)
            raise
        os.replace(part, path)
        return None
    if expected is None:
        part.unlink(missing_ok=True)
    return f"failed after {retries + 1} attempts: {last}"


def fetch(urls: str | Sequence[str], dest_dir: str | Path, *, filename: str | None = None,
          expected: Expected | None = None, retries: int | None = None, backoff: float | None = None,
          timeout: float | None = None, progress: bool = True, hint: str = "") -> Path:
    """Download one file into ``dest_dir`` from the first mirror that serves it intact; return its path.

    A cached copy that passes the checks is reused; one that does not is deleted. A leftover ``NAME.part`` is
    resumed (HTTP Range) when ``expected`` is known, since the final checksum then vouches for the result.

    Args:
        urls: mirrors to try in order: http, https or file URLs, or local paths.
        dest_dir: the download cache directory, created if missing.
        filename: name in the cache; default the last component of the first URL.
        expected: the size and sha256 the file must have (:data:`nmt.data.catalog.KNOWN`); None: only an HTML
            page, a 4xx answer and a body shorter than its Content-Length are refused.
        retries: extra attempts per mirror after transient failures; default :data:`RETRIES`.
        backoff: seconds before the first retry, doubled each time; default :data:`BACKOFF_S`.
        timeout: seconds without data before a connection counts as stalled; default :data:`TIMEOUT_S`.
        progress: show a tqdm progress bar, retry notices and refused mirrors on stderr.
        hint: appended to the final error (what the user can do instead).

    Raises:
        NmtError: no mirror gave the expected file (one clause per mirror, what was expected, and ``hint``).
    """
    urls = [urls] if isinstance(urls, str) else list(urls)
    if not urls:
        raise NmtError(f"no URL to download {filename} from")
    retries = RETRIES if retries is None else retries
    backoff = BACKOFF_S if backoff is None else backoff
    timeout = TIMEOUT_S if timeout is None else timeout
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    name = filename or PurePosixPath(urllib.parse.urlsplit(urls[0]).path.rstrip("/")).name
    if not name:
        raise NmtError(f"cannot name the download of {urls[0]}; pass a filename")
    path = dest_dir / name
    if path.exists():
        if check_file(path, expected) is None:
            return path
        path.unlink()  # a stale, foreign or poisoned file under the final name: never reuse it
    part = path.with_name(f"{name}.part")
    if expected is None:
        part.unlink(missing_ok=True)
    want = f"expected {expected.describe()}" if expected is not None else "expected a data file"
    failures = []
    for given in urls:
        why: str | None
        try:
            url = _normalise(given)
        except NmtError as exc:  # a mirror that does not exist is skipped like one that fails
            url, why = given, str(exc)
        else:
            why = _try_mirror(url, path, expected, retries, backoff, timeout, progress)
        if why is None:
            return path
        failures.append(f"{url}: {why}")
        if progress:
            print(f"refused {url}: {why}; {want}", file=sys.stderr)
    raise NmtError(f"download of {name} failed ({want}): " + "; ".join(failures) + (f"; {hint}" if hint else ""))


def check_local(path: str | Path, expected: Expected | None) -> Path:
    """A file the user fetched by other means (``--from-archive``), checked like a download.

    Raises:
        NmtError: the file is missing, an HTML page, or not the expected size and hash.
    """
    path = Path(path)
    if not path.is_file():
        raise NmtError(f"--from-archive {path}: no such file")
    why = check_file(path, expected)
    if why is not None:
        want = f"expected {expected.describe()}" if expected is not None else "expected an archive"
        raise NmtError(f"--from-archive {path}: {why}, {want}")
    return path


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
                path = dest / name
                with source, atomic_open(path) as handle:
                    while block := source.read(CHUNK):
                        handle.write(block)
                out[name] = path
            return out
    except (tarfile.TarError, EOFError, OSError) as exc:
        detail = " ".join(str(exc).split())  # tarfile lists one reason per compression method, one per line
        raise NmtError(f"cannot read archive {archive} (truncated, corrupt or not a tar file): {detail}") from None
