"""Shared helpers and fixtures for the data-pipeline tests: a scripted local HTTP server, archives, corpora."""

from __future__ import annotations

import hashlib
import io
import random
import re
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nmt.data import catalog, download
from nmt.data.catalog import Expected


@dataclass
class Reply:
    """One scripted HTTP answer.

    ``length`` overrides Content-Length (a larger value simulates truncation); ``headers`` are added (a
    ``Location`` with status 302 is a redirect); ``stall_after`` bytes are sent, then the server waits ``stall_s``
    seconds and closes (a stalled connection); ``ranges`` honours ``Range: bytes=N-`` with a 206 answer.
    """

    body: bytes = b""
    status: int = 200
    length: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    stall_after: int | None = None
    stall_s: float = 0.0
    ranges: bool = False


@dataclass
class Server:
    """Serves ``routes[path]``: a list of replies used in order, the last one repeating; counts hits per path."""

    port: int
    routes: dict[str, list[Reply]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    ranges: list[str | None] = field(default_factory=list)  # the Range header of every request, in order

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def serve(self, path: str, *replies: Reply | bytes) -> str:
        self.routes[path] = [r if isinstance(r, Reply) else Reply(r) for r in replies]
        return self.url(path)


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            count = server.hits.get(self.path, 0)
            server.hits[self.path] = count + 1
            replies = server.routes.get(self.path) or [Reply(b"not found", 404)]
            reply = replies[min(count, len(replies) - 1)]
            wanted = self.headers.get("Range")
            server.ranges.append(wanted)
            body, status, extra = reply.body, reply.status, dict(reply.headers)
            match = re.fullmatch(r"bytes=(\d+)-", wanted or "")
            if reply.ranges and match and status == 200:
                start = int(match.group(1))
                body, status = body[start:], 206
                extra["Content-Range"] = f"bytes {start}-{len(reply.body) - 1}/{len(reply.body)}"
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(reply.length if reply.length is not None else len(body)))
            self.end_headers()
            if reply.stall_after is not None:
                self.wfile.write(body[:reply.stall_after])
                self.wfile.flush()
                time.sleep(reply.stall_s)
            else:
                self.wfile.write(body)
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet test output
            pass

    return Handler


@pytest.fixture
def http_server() -> Iterator[Server]:
    """A threaded HTTP server on 127.0.0.1 with an ephemeral port, shut down after the test."""
    server = Server(port=0)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Millisecond backoff and short timeouts so retry tests stay fast."""
    monkeypatch.setattr(download, "BACKOFF_S", 0.001)
    monkeypatch.setattr(download, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(download, "RETRIES", 2)


def make_tar(members: dict[str, bytes], extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """A .tar.gz holding regular files ``members`` plus the given special members (links, devices)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info)
    return buffer.getvalue()


def special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    """A non-regular tar member: ``tarfile.SYMTYPE``, ``LNKTYPE``, ``CHRTYPE``..."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


WORDS = {
    "xx": "la lo le li lu ka ko ke ki ku ma mo me mi mu na no ne ni nu".split(),
    "yy": "ba bo be bi bu da do de di du fa fo fe fi fu ga go ge gi gu".split(),
}


def sentences(lang: str, n: int, seed: int) -> list[str]:
    """``n`` synthetic tokenized sentences of 3-12 words drawn from a 20-word vocabulary per language."""
    rng = random.Random(seed)
    words = WORDS.get(lang, WORDS["xx"])
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + " ." for _ in range(n)]


def write_corpus(directory: Path, src: str = "xx", tgt: str = "yy",
                 sizes: dict[str, int] | None = None) -> dict[str, dict[str, list[str]]]:
    """Write ``{train,dev,test}.{src,tgt}`` (default 200/20/20 lines) and return the text written."""
    sizes = sizes or {"train": 200, "dev": 20, "test": 20}
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, dict[str, list[str]]] = {}
    for i, (split, n) in enumerate(sizes.items()):
        written[split] = {}
        for j, lang in enumerate((src, tgt)):
            lines = sentences(lang, n, seed=10 * i + j)
            (directory / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
            written[split][lang] = lines
    return written


def ted_tsv(rows: list[dict[str, str]], langs: list[str]) -> bytes:
    """A TED ``all_talks_*.tsv``: header ``talk_name`` + ``langs``, one row per dict (missing -> ``__NULL__``)."""
    lines = ["\t".join(["talk_name", *langs])]
    for i, row in enumerate(rows):
        lines.append("\t".join([f"talk_{i}", *(row.get(lang, "__NULL__") for lang in langs)]))
    return ("\n".join(lines) + "\n").encode("utf-8")


def ted_archive(n: int = 120, prefix: str = "ted_talks/", partial: bool = False) -> bytes:
    """A small ``ted_talks.tar.gz``: 3 splits with columns en, xx, yy; every 10th xx row is a NULL marker.

    With ``partial``, the yy side of every row ``i % 7 == 3`` is a partial translation: a NULL marker inside the
    line (``a b __NULL__ c`` or ``a _ _ NULL _ _``), which the official rule drops and keep_partial strips.
    """
    members = {}
    for k, split in enumerate(("train", "dev", "test")):
        size = n if split == "train" else n // 6
        en, xx, yy = (sentences(lang, size, seed=100 * k + j) for j, lang in enumerate(("en", "xx", "yy")))
        rows = [{"en": e, "xx": x if i % 10 else ("__NULL__" if i % 20 else "_ _ NULL _ _"), "yy": y}
                for i, (e, x, y) in enumerate(zip(en, xx, yy))]
        for i, row in enumerate(rows):
            if partial and i % 7 == 3:
                words = row["yy"].split()
                marker = "__NULL__" if i % 2 else "_ _ NULL _ _"
                row["yy"] = " ".join([*words[:2], marker, *words[2:]]) if i % 3 else f"{row['yy']} {marker}"
        members[f"{prefix}all_talks_{split}.tsv"] = ted_tsv(rows, ["en", "xx", "yy"])
    return make_tar(members)


def expect(data: bytes) -> Expected:
    """The catalog entry a test archive or file must match."""
    return Expected(len(data), hashlib.sha256(data).hexdigest(), "built by the test")


def register_ted(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Make ``data`` the known ``ted_talks.tar.gz`` (what the catalog says the real one is) for this test."""
    monkeypatch.setitem(catalog.KNOWN, catalog.TED, expect(data))
