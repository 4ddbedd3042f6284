"""Downloads through a local HTTP server (cache, truncation, retries, checksums) and safe tar extraction."""

from __future__ import annotations

import hashlib
import socket
import tarfile
import time
from pathlib import Path

import pytest

from nmt.data import catalog, download
from nmt.data.catalog import Expected
from nmt.errors import NmtError
from tests import data_fixtures
from tests.data_fixtures import Reply, Server, expect, make_tar, special

BODY = b"0123456789" * 5000

http_server = data_fixtures.http_server  # fixture
fast_retries = data_fixtures.fast_retries  # fixture


def test_fetch_downloads_once_then_uses_cache(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/f.bin", BODY)
    path = download.fetch(url, tmp_path, progress=False)
    assert path == tmp_path / "f.bin" and path.read_bytes() == BODY
    assert download.fetch(url, tmp_path, progress=False) == path
    assert http_server.hits["/f.bin"] == 1
    assert not (tmp_path / "f.bin.part").exists()


def test_progress_bar_goes_to_stderr(http_server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = http_server.serve("/f.bin", BODY)
    download.fetch(url, tmp_path, progress=True)
    out, _ = capsys.readouterr()
    assert out == ""


@pytest.mark.usefixtures("fast_retries")
def test_truncated_body_is_never_kept(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/t.bin", Reply(BODY[:1000], length=len(BODY)))
    with pytest.raises(NmtError, match="truncated"):
        download.fetch(url, tmp_path, progress=False)
    assert http_server.hits["/t.bin"] == download.RETRIES + 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("fast_retries")
def test_truncated_then_complete_is_retried(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/t.bin", Reply(BODY[:1000], length=len(BODY)), BODY)
    assert download.fetch(url, tmp_path, progress=False).read_bytes() == BODY
    assert http_server.hits["/t.bin"] == 2


@pytest.mark.usefixtures("fast_retries")
def test_server_error_then_success_is_retried(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/r.bin", Reply(b"oops", 500), Reply(b"oops", 503), BODY)
    assert download.fetch(url, tmp_path, progress=False).read_bytes() == BODY
    assert http_server.hits["/r.bin"] == 3


@pytest.mark.usefixtures("fast_retries")
def test_persistent_server_error_fails_after_retries(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/e.bin", Reply(b"oops", 500))
    with pytest.raises(NmtError, match=r"failed after 3 attempts: HTTP 500"):
        download.fetch(url, tmp_path, progress=False)
    assert http_server.hits["/e.bin"] == 3
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("fast_retries")
def test_client_error_is_not_retried(http_server: Server, tmp_path: Path) -> None:
    with pytest.raises(NmtError, match="HTTP 404"):
        download.fetch(http_server.url("/missing.bin"), tmp_path, progress=False)
    assert http_server.hits["/missing.bin"] == 1


@pytest.mark.usefixtures("fast_retries")
def test_connection_refused_is_an_nmt_error(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on once this socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(NmtError, match="failed after"):
        download.fetch(f"http://127.0.0.1:{port}/x.bin", tmp_path, progress=False)


def test_known_checksum_accepts_and_mismatch_refuses(http_server: Server, tmp_path: Path) -> None:
    good, bad = http_server.serve("/good.bin", BODY), http_server.serve("/bad.bin", BODY[:-1] + b"!")
    expected = expect(BODY)
    assert download.fetch(good, tmp_path, expected=expected, progress=False).read_bytes() == BODY
    with pytest.raises(NmtError) as info:
        download.fetch(bad, tmp_path / "b", expected=expected, progress=False)
    message = str(info.value)
    assert "\n" not in message and f"/bad.bin: sha256 {hashlib.sha256(BODY[:-1] + b'!').hexdigest()}" in message
    assert f"expected {len(BODY):,} bytes, sha256 {expected.sha256}" in message
    assert list((tmp_path / "b").iterdir()) == []
    assert http_server.hits["/bad.bin"] == 1  # a wrong hash is not retried


def test_size_mismatch_refuses(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/s.bin", BODY)
    with pytest.raises(NmtError, match=r"expected 50,005 bytes.*announced a file of 50,000 bytes"):
        download.fetch(url, tmp_path, expected=Expected(len(BODY) + 5, "0" * 64, "test"), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_cached_file_is_fetched_again(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/c.bin", BODY)
    (tmp_path / "c.bin").write_bytes(b"corrupt")
    assert download.fetch(url, tmp_path, expected=expect(BODY), progress=False).read_bytes() == BODY
    assert not (tmp_path / "c.bin.part").exists() and http_server.hits["/c.bin"] == 1


@pytest.mark.parametrize("expected", [None, expect(BODY)])
def test_html_page_with_200_is_refused_and_the_next_mirror_tried(http_server: Server, tmp_path: Path,
                                                                 expected: Expected | None,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    page = b"<!DOCTYPE html>\n<html><body>This file is no longer available</body></html>\n"
    html = http_server.serve("/gone/f.bin", Reply(page, headers={"Content-Type": "text/html"}))
    good = http_server.serve("/mirror/f.bin", BODY)
    path = download.fetch([html, good], tmp_path, expected=expected, progress=True)
    assert path.read_bytes() == BODY and http_server.hits["/gone/f.bin"] == 1
    err = capsys.readouterr().err
    assert f"refused {html}: " in err and "HTML page" in err


def test_html_only_fails_naming_every_mirror_and_keeps_nothing(http_server: Server, tmp_path: Path) -> None:
    page = b"  <html><head><title>404</title></head></html>"
    one, two = http_server.serve("/a/f.bin", page), http_server.serve("/b/f.bin", Reply(b"", 403))
    with pytest.raises(NmtError) as info:
        download.fetch([one, two], tmp_path, expected=expect(BODY), progress=False)
    message = str(info.value)
    assert message.startswith("download of f.bin failed (expected 50,000 bytes, sha256 ")
    assert f"{one}: the server announced an HTML page of {len(page)} bytes" in message
    assert f"{two}: HTTP 403" in message
    assert list(tmp_path.iterdir()) == []


def test_truncated_archive_is_refused_and_the_next_mirror_tried(http_server: Server, tmp_path: Path) -> None:
    short = http_server.serve("/short/f.bin", BODY[:30000])  # complete as far as HTTP knows, but short
    good = http_server.serve("/good/f.bin", BODY)
    assert download.fetch([short, good], tmp_path, expected=expect(BODY), progress=False).read_bytes() == BODY
    assert http_server.hits["/short/f.bin"] == 1


def test_redirect_is_followed_and_checked(http_server: Server, tmp_path: Path) -> None:
    http_server.serve("/real/f.bin", BODY)
    moved = http_server.serve("/old/f.bin", Reply(status=302, headers={"Location": http_server.url("/real/f.bin")}))
    assert download.fetch(moved, tmp_path, expected=expect(BODY), progress=False).read_bytes() == BODY
    http_server.serve("/landing", b"<html>moved to a landing page</html>")
    to_page = http_server.serve("/old2/f.bin", Reply(status=301, headers={"Location": http_server.url("/landing")}))
    with pytest.raises(NmtError, match="HTML page"):
        download.fetch(to_page, tmp_path / "b", expected=expect(BODY), progress=False)


@pytest.mark.usefixtures("fast_retries")
def test_stalled_download_times_out_and_resumes_with_range(http_server: Server, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "TIMEOUT_S", 0.2)
    url = http_server.serve("/s.bin", Reply(BODY, stall_after=20000, stall_s=1.5), Reply(BODY, ranges=True))
    started = time.monotonic()
    assert download.fetch(url, tmp_path, expected=expect(BODY), progress=False).read_bytes() == BODY
    assert time.monotonic() - started < 1.2  # the stall was cut by the timeout, not waited out
    assert http_server.ranges == [None, "bytes=20000-"]


@pytest.mark.usefixtures("fast_retries")
def test_resume_restarts_when_the_server_ignores_range(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/r.bin", Reply(BODY[:1000], length=len(BODY)), BODY)
    assert download.fetch(url, tmp_path, expected=expect(BODY), progress=False).read_bytes() == BODY
    assert http_server.ranges == [None, "bytes=1000-"]


def test_leftover_part_is_resumed_only_under_a_checksum(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/p.bin", Reply(BODY, ranges=True))
    (tmp_path / "p.bin.part").write_bytes(BODY[:12345])
    assert download.fetch(url, tmp_path, expected=expect(BODY), progress=False).read_bytes() == BODY
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "p.bin.part").write_bytes(b"stale bytes of something else")
    assert download.fetch(url, tmp_path / "q", progress=False).read_bytes() == BODY
    assert http_server.ranges == ["bytes=12345-", None]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "p.bin.part").write_bytes(BODY)  # complete, but never renamed: no request needed
    assert download.fetch(url, tmp_path / "r", expected=expect(BODY), progress=False).read_bytes() == BODY
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "p.bin.part").write_bytes(BODY[::-1])  # full length, wrong bytes: fetched afresh
    assert download.fetch(url, tmp_path / "s", expected=expect(BODY), progress=False).read_bytes() == BODY
    assert http_server.ranges == ["bytes=12345-", None, None]


def test_env_mirror_directory_laid_out_like_the_cache(http_server: Server, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = tmp_path / "mirror"
    (mirror / catalog.IWSLT15).mkdir(parents=True)
    (mirror / catalog.IWSLT15 / "train.en").write_bytes(BODY)
    monkeypatch.setenv(catalog.MIRROR_ENV, f"{http_server.url('/nothing')} {mirror}")
    urls = catalog.candidate_urls(f"{catalog.IWSLT15}/train.en", ["http://127.0.0.1:9/explicit/train.en"])
    assert urls == ["http://127.0.0.1:9/explicit/train.en", http_server.url(f"/nothing/{catalog.IWSLT15}/train.en"),
                    str(mirror / catalog.IWSLT15 / "train.en")]
    path = download.fetch(urls[1:], tmp_path / "cache", expected=expect(BODY), progress=False)
    assert path.read_bytes() == BODY and path == tmp_path / "cache" / "train.en"


def test_missing_local_mirror_is_skipped(http_server: Server, tmp_path: Path) -> None:
    good = http_server.serve("/f.bin", BODY)
    path = download.fetch([str(tmp_path / "no" / "f.bin"), "ftp://x/f.bin", good], tmp_path / "c",
                          expected=expect(BODY), progress=False)
    assert path.read_bytes() == BODY


def test_check_local_archive(tmp_path: Path) -> None:
    good = tmp_path / "ted_talks.tar.gz"
    good.write_bytes(BODY)
    assert download.check_local(good, expect(BODY)) == good
    with pytest.raises(NmtError, match=r"--from-archive .*: size 50,000 bytes, expected 50,001 bytes"):
        download.check_local(good, Expected(len(BODY) + 1, "0" * 64, "test"))
    good.write_bytes(b"<html>" + BODY[6:])
    with pytest.raises(NmtError, match="HTML page"):
        download.check_local(good, expect(BODY))
    with pytest.raises(NmtError, match="no such file"):
        download.check_local(tmp_path / "nope.tar.gz", None)


def test_catalog_figures_are_complete() -> None:
    assert catalog.KNOWN[catalog.TED].size == 352_222_045
    assert catalog.KNOWN[catalog.TED].sha256 == "03457b9ebc6d60839f1a48c5a03c940266aff78b81fcda4c6d9e2a5a7fb670ae"
    for name, figure in catalog.KNOWN.items():
        assert figure.size > 0 and len(figure.sha256) == 64 and int(figure.sha256, 16) >= 0, name
        assert figure.origin, name


def _archive(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "a.tar.gz"
    path.write_bytes(data)
    return path


def test_extract_finds_members_in_subdirectories(tmp_path: Path) -> None:
    archive = _archive(tmp_path, make_tar({"top/sub/a.tsv": b"A", "top/b.tsv": b"B", "top/other": b"x"}))
    out = download.extract(archive, tmp_path / "out", ["a.tsv", "b.tsv"])
    assert out["a.tsv"].read_bytes() == b"A" and out["b.tsv"].read_bytes() == b"B"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.tsv", "b.tsv"]


def test_extract_names_a_missing_member(tmp_path: Path) -> None:
    archive = _archive(tmp_path, make_tar({"a.tsv": b"A"}))
    with pytest.raises(NmtError, match="lacks the expected member 'b.tsv'"):
        download.extract(archive, tmp_path / "out", ["a.tsv", "b.tsv"])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["../evil.tsv", "a/../../evil.tsv", "/tmp/evil.tsv"])
def test_extract_refuses_paths_leaving_the_target(tmp_path: Path, name: str) -> None:
    archive = _archive(tmp_path, make_tar({"a.tsv": b"A", name: b"evil"}))
    dest = tmp_path / "deep" / "out"
    with pytest.raises(NmtError, match="unsafe member"):
        download.extract(archive, dest, ["a.tsv"])
    assert not dest.exists()
    assert not (tmp_path / "deep" / "evil.tsv").exists() and not (tmp_path / "evil.tsv").exists()


@pytest.mark.parametrize("member", [
    special("link", tarfile.SYMTYPE, "../../outside"),
    special("link", tarfile.SYMTYPE, "/etc/passwd"),
    special("sub/link", tarfile.SYMTYPE, "../.."),
    special("hard", tarfile.LNKTYPE, "../outside"),
    special("dev", tarfile.CHRTYPE),
    special("fifo", tarfile.FIFOTYPE),
])
def test_extract_refuses_escaping_links_and_devices(tmp_path: Path, member: tarfile.TarInfo) -> None:
    archive = _archive(tmp_path, make_tar({"a.tsv": b"A"}, [member]))
    dest = tmp_path / "out"
    with pytest.raises(NmtError, match="unsafe member"):
        download.extract(archive, dest, ["a.tsv"])
    assert not dest.exists()


def test_extract_allows_links_inside_the_target(tmp_path: Path) -> None:
    archive = _archive(tmp_path, make_tar({"d/a.tsv": b"A"}, [special("d/alias", tarfile.SYMTYPE, "a.tsv")]))
    assert download.extract(archive, tmp_path / "out", ["a.tsv"])["a.tsv"].read_bytes() == b"A"


def test_extract_of_a_corrupt_archive_is_an_nmt_error(tmp_path: Path) -> None:
    archive = _archive(tmp_path, b"\x1f\x8b not really gzip")
    with pytest.raises(NmtError, match="cannot read archive"):
        download.extract(archive, tmp_path / "out", ["a.tsv"])


def test_local_paths_and_file_urls_are_mirrors(tmp_path: Path) -> None:
    source = tmp_path / "mirror" / "f.bin"
    source.parent.mkdir()
    source.write_bytes(BODY)
    assert download.fetch(str(source), tmp_path / "a", progress=False).read_bytes() == BODY
    assert download.fetch(source.as_uri(), tmp_path / "b", progress=False).read_bytes() == BODY
    with pytest.raises(NmtError, match=r"nope.bin: no such file \(and not an http"):
        download.fetch(str(tmp_path / "nope.bin"), tmp_path / "c", progress=False)
    with pytest.raises(NmtError, match="cannot read it"):  # no retries for a local file
        download.fetch((tmp_path / "nope.bin").as_uri(), tmp_path / "c", progress=False)
    with pytest.raises(NmtError, match="ftp://example.org/f.bin: unsupported URL"):
        download.fetch("ftp://example.org/f.bin", tmp_path / "c", progress=False)
