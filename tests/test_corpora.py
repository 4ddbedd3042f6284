"""Corpus readers: strict text reading, TED TSV (NULL markers, language codes), IWSLT'15 and TED downloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.data import catalog, corpora
from nmt.data.text import iter_lines, normalize_line, read_parallel
from nmt.data.tokenize import moses_tokenize
from nmt.errors import NmtError
from tests import data_fixtures
from tests.data_fixtures import Reply, Server, expect, register_ted, sentences, ted_archive, ted_tsv

http_server = data_fixtures.http_server  # fixture


@pytest.mark.parametrize("pair,expected", [("gl-en", ("gl", "en")), ("pt_br-en", ("pt_br", "en")),
                                           ("src-tgt", ("src", "tgt"))])
def test_parse_pair(pair: str, expected: tuple[str, str]) -> None:
    assert corpora.parse_pair(pair) == expected


@pytest.mark.parametrize("pair", ["glen", "gl-en-fr", "gl-", "-en", "gl/en", "gl en", "en-en", ""])
def test_parse_pair_rejects_bad_formats(pair: str) -> None:
    with pytest.raises(NmtError, match="language pair"):
        corpora.parse_pair(pair)


def test_source_registry() -> None:
    assert corpora.source_for("en", "vi") == corpora.source_for("vi", "en") == "iwslt15"
    assert corpora.source_for("gl", "en") == "ted"
    assert set(corpora.SOURCES) == {"iwslt15", "ted"}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    bad = _write(tmp_path / "train.xx", b"fine\nalso fine\nbad \xff byte\n")
    good = _write(tmp_path / "train.yy", b"a\nb\nc\n")
    with pytest.raises(NmtError, match=r"train\.xx line 3: invalid UTF-8"):
        read_parallel(bad, good)


def test_crlf_and_whitespace_are_normalised(tmp_path: Path) -> None:
    src = _write(tmp_path / "s", "a  b\r\n \t \r\nc\u00a0d \r\ne\r\n".encode())
    tgt = _write(tmp_path / "t", b"x\ny\n   \nz\n")
    text = read_parallel(src, tgt)
    assert text.src == ["a b", "e"] and text.tgt == ["x", "z"]
    assert text.dropped == {"empty": 2}
    assert list(iter_lines(src))[0] == "a  b"
    assert normalize_line("  a \t b  ") == "a b"


def test_line_count_mismatch_names_both_files_and_counts(tmp_path: Path) -> None:
    src = _write(tmp_path / "train.xx", b"a\nb\nc\n")
    tgt = _write(tmp_path / "train.yy", b"a\nb\n")
    with pytest.raises(NmtError, match=r"train\.xx has 3 lines, .*train\.yy has 2"):
        read_parallel(src, tgt)


def test_missing_file_and_empty_corpus(tmp_path: Path) -> None:
    present = _write(tmp_path / "a", b" \n\n")
    with pytest.raises(NmtError, match=r"file not found: .*nope"):
        read_parallel(present, tmp_path / "nope")
    with pytest.raises(NmtError, match="no sentence pairs"):
        read_parallel(present, _write(tmp_path / "b", b"x\ny\n"))


def test_ted_tsv_null_markers_are_dropped(tmp_path: Path) -> None:
    rows = [{"en": "one", "gl": "un"}, {"en": "two", "gl": "__NULL__"}, {"en": "three", "gl": "_ _ NULL _ _"},
            {"en": "__NULL__", "gl": "catro"}, {"en": "five", "gl": " "}, {"en": "six", "gl": "seis"}]
    path = _write(tmp_path / "all_talks_train.tsv", ted_tsv(rows, ["en", "gl", "pt-br"]))
    text = corpora.read_ted_tsv(path, "gl", "en")
    assert text.src == ["un", "seis"] and text.tgt == ["one", "six"]
    assert text.dropped == {"null": 3, "empty": 1}
    assert corpora.read_ted_tsv(path, "pt_br", "en").dropped == {"null": 6}


def test_ted_tsv_keeps_quotes_and_counts_malformed_rows(tmp_path: Path) -> None:
    data = ted_tsv([{"en": '" quoted', "gl": "& amp"}], ["en", "gl"]) + b"talk_x\tonly two\n"
    text = corpora.read_ted_tsv(_write(tmp_path / "t.tsv", data), "en", "gl")
    assert text.src == ['" quoted'] and text.tgt == ["& amp"] and text.dropped == {"malformed": 1}


def test_ted_tsv_unknown_code_lists_available(tmp_path: Path) -> None:
    path = _write(tmp_path / "all_talks_dev.tsv", ted_tsv([{"en": "a", "gl": "b"}], ["en", "gl", "sk"]))
    with pytest.raises(NmtError, match=r"unknown language code 'zz'.*available: en, gl, sk"):
        corpora.read_ted_tsv(path, "zz", "en")


def test_load_ted_through_http(http_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = ted_archive(n=60)
    register_ted(monkeypatch, archive)
    url = http_server.serve("/data/ted_talks.tar.gz", archive)
    request = corpora.Request("xx", "yy", tmp_path / "downloads", (url,), progress=False)
    corpus = corpora.load(request, "ted")
    assert len(corpus["train"]) == 54 and corpus["train"].dropped == {"null": 6}
    assert len(corpus["dev"]) == 9 and len(corpus["test"]) == 9
    assert (tmp_path / "downloads" / "ted_talks.tar.gz").is_file()
    corpora.load(corpora.Request("yy", "en", tmp_path / "downloads", (url,), progress=False), "ted")
    assert http_server.hits["/data/ted_talks.tar.gz"] == 1  # extracted TSVs are reused


def test_extracted_tsvs_of_another_archive_are_not_reused(http_server: Server, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = ted_archive(n=60), ted_archive(n=120)
    register_ted(monkeypatch, old)
    request = corpora.Request("xx", "yy", tmp_path, (http_server.serve("/old/ted_talks.tar.gz", old),), progress=False)
    assert len(corpora.load(request, "ted")["train"]) == 54
    register_ted(monkeypatch, new)  # the catalog now names another archive: the extracted files are stale
    request = corpora.Request("xx", "yy", tmp_path, (http_server.serve("/new/ted_talks.tar.gz", new),), progress=False)
    assert len(corpora.load(request, "ted")["train"]) == 108


def _iwslt_files(http_server: Server, monkeypatch: pytest.MonkeyPatch, sizes: dict[str, int],
                 first: Reply | None = None) -> dict[tuple[str, str], list[str]]:
    """Serve (and register in the catalog) the six IWSLT'15 files under /iwslt15/."""
    expected = {}
    for stem, n in sizes.items():
        for j, lang in enumerate(("en", "vi")):
            expected[stem, lang] = sentences(lang, n, seed=j + len(stem))
            body = ("\n".join(expected[stem, lang]) + "\n").encode()
            monkeypatch.setitem(catalog.KNOWN, f"{catalog.IWSLT15}/{stem}.{lang}", expect(body))
            http_server.serve(f"/iwslt15/{stem}.{lang}", *([first] if first else []), body)
    return expected


@pytest.mark.parametrize("pair", [("en", "vi"), ("vi", "en")])
def test_load_iwslt15_through_http(http_server: Server, tmp_path: Path, pair: tuple[str, str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _iwslt_files(http_server, monkeypatch, {"train": 30, "tst2012": 5, "tst2013": 4})
    request = corpora.Request(*pair, tmp_path, (http_server.url("/iwslt15"),), progress=False)
    corpus = corpora.load(request, corpora.source_for(*pair))
    src, tgt = pair
    assert corpus["train"].src == expected["train", src] and corpus["train"].tgt == expected["train", tgt]
    assert corpus["dev"].src == expected["tst2012", src] and corpus["test"].tgt == expected["tst2013", tgt]
    with pytest.raises(NmtError, match="--from-archive is for the TED archive"):
        corpora.load(corpora.Request(*pair, tmp_path, archive=tmp_path / "x.tar.gz"), "iwslt15")


def test_official_rule_drops_null_anywhere_and_keep_partial_strips(tmp_path: Path) -> None:
    rows = [{"en": "one", "gl": "un"}, {"en": "two", "gl": "dous __NULL__ tres"},
            {"en": "three _ _ NULL _ _", "gl": "tres"}, {"en": "four", "gl": "NULL"}, {"en": "five", "gl": "cinco"}]
    path = _write(tmp_path / "all_talks_train.tsv", ted_tsv(rows, ["en", "gl"]))
    official = corpora.read_ted_tsv(path, "gl", "en")
    assert official.src == ["un", "cinco"] and official.dropped == {"null": 3}
    partial = corpora.read_ted_tsv(path, "gl", "en", keep_partial=True)
    assert partial.src == ["un", "dous tres", "tres", "NULL", "cinco"]
    assert partial.tgt == ["one", "two", "three", "four", "five"] and partial.dropped == {}


def test_ted_tsv_bom_crlf_nul_blank_and_overlong_lines(tmp_path: Path) -> None:
    long = "x " * (corpora.MAX_FIELD // 2 + 1)
    lines = ["talk_name\ten\tgl", "t1\tone\tun", "", "t2\ttwo\tdo\x00us", "   ", f"t3\t{long}\ttres",
             "t4\tfour\tcatro", "t5\tfive\tcinco\textra"]
    path = _write(tmp_path / "all_talks_dev.tsv", ("\ufeff" + "\r\n".join(lines) + "\r\n").encode())
    text = corpora.read_ted_tsv(path, "gl", "en")
    assert text.src == ["un", "catro"] and text.tgt == ["one", "four"]
    assert text.dropped == {"nul_byte": 1, "overlong_field": 1, "malformed": 1}


def test_bom_is_removed_from_plain_files(tmp_path: Path) -> None:
    src = _write(tmp_path / "train.xx", "\ufeffla lo\nle\n".encode())
    tgt = _write(tmp_path / "train.yy", b"ba\r\nbe\x00\r\n")
    text = read_parallel(src, tgt)
    assert text.src == ["la lo"] and text.tgt == ["ba"] and text.dropped == {"nul_byte": 1}


def test_load_dir_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(NmtError, match="not a directory"):
        corpora.load_dir(tmp_path / "nope", "xx", "yy")


def test_moses_tokenize_escapes_like_the_corpora() -> None:
    assert moses_tokenize(["I'm here, \"now\"."], "en") == ["I &apos;m here , &quot; now &quot; ."]
