"""Downloads through a local HTTP server (cache, truncation, retries, checksums) and safe tar extraction."""

from __future__ import annotations

import hashlib
import socket
import tarfile
from pathlib import Path

import pytest

from nmt.data import download
from nmt.errors import NmtError
from tests import data_fixtures
from tests.data_fixtures import Reply, Server, make_tar, special

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


def test_known_checksum_accepts_and_mismatch_refuses(http_server: Server, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad = http_server.serve("/good.bin", BODY), http_server.serve("/bad.bin", BODY + b"!")
    known = (len(BODY), hashlib.sha256(BODY).hexdigest())
    monkeypatch.setitem(download.KNOWN, good, known)
    monkeypatch.setitem(download.KNOWN, bad, (len(BODY) + 1, known[1]))
    assert download.fetch(good, tmp_path, progress=False).read_bytes() == BODY
    with pytest.raises(NmtError, match="sha256 .* does not match"):
        download.fetch(bad, tmp_path, progress=False)
    assert not (tmp_path / "bad.bin").exists() and not (tmp_path / "bad.bin.part").exists()


def test_size_mismatch_refuses(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/s.bin", BODY)
    with pytest.raises(NmtError, match="size"):
        download.fetch(url, tmp_path, expected=(len(BODY) + 5, "0" * 64), progress=False)


def test_corrupt_cached_file_is_fetched_again(http_server: Server, tmp_path: Path) -> None:
    url = http_server.serve("/c.bin", BODY)
    (tmp_path / "c.bin").write_bytes(b"corrupt")
    (tmp_path / "c.bin.part").write_bytes(b"leftover")
    expected = (len(BODY), hashlib.sha256(BODY).hexdigest())
    assert download.fetch(url, tmp_path, expected=expected, progress=False).read_bytes() == BODY
    assert not (tmp_path / "c.bin.part").exists()


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
    with pytest.raises(NmtError, match="neither a URL"):
        download.fetch(str(tmp_path / "nope.bin"), tmp_path / "c", progress=False)
    with pytest.raises(NmtError, match="cannot read file:"):  # no retries for a local file
        download.fetch((tmp_path / "nope.bin").as_uri(), tmp_path / "c", progress=False)
    with pytest.raises(NmtError, match="unsupported URL"):
        download.fetch("ftp://example.org/f.bin", tmp_path / "c", progress=False)
