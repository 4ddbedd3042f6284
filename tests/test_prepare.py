"""``nmt prepare``: layout, cache == fresh encoding, idempotence, atomicity, downloads, the CLI, real gl-en."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nmt import cli
from nmt.data import binarized, catalog, settings
from nmt.data import prepare as prepare_module
from nmt.data.bpe import SentencePieceTokenizer
from nmt.data.prepare import format_summary, length_percentile, prepare
from nmt.errors import NmtError
from tests import data_fixtures
from tests.data_fixtures import Reply, Server, expect, register_ted, sentences, ted_archive, write_corpus

REPO = Path(__file__).resolve().parents[1]
GL_EN = REPO.parent / "shared" / "data" / "gl-en"
SPLITS = ("train", "dev", "test")

http_server = data_fixtures.http_server  # fixture
fast_retries = data_fixtures.fast_retries  # fixture


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    write_corpus(tmp_path / "corpus")
    return tmp_path / "corpus"


def _prepare(corpus_dir: Path, data_dir: Path, **kwargs: object) -> dict:
    return prepare("xx-yy", data_dir, from_dir=corpus_dir, bpe_size=60, progress=False, **kwargs)  # type: ignore


def test_layout_and_meta(corpus_dir: Path, tmp_path: Path) -> None:
    meta = _prepare(corpus_dir, tmp_path / "data")
    pair_dir = tmp_path / "data" / "xx-yy"
    for split in SPLITS:
        for lang in ("xx", "yy"):
            assert (pair_dir / "raw" / f"{split}.{lang}").is_file()
            assert all(p.is_file() for p in binarized.split_paths(pair_dir, split, lang))
    assert json.loads((pair_dir / "meta.json").read_text()) == meta
    keys = {"pair", "src", "tgt", "source", "bpe_size", "vocab_size", "spm_sha256", "splits", "length_p975"}
    assert keys <= set(meta)
    assert (meta["pair"], meta["src"], meta["tgt"], meta["source"]) == ("xx-yy", "xx", "yy", "dir")
    assert meta["vocab_size"] == SentencePieceTokenizer(pair_dir / "spm.model").vocab_size == 60
    assert [meta["splits"][s]["lines"] for s in SPLITS] == [200, 20, 20]
    assert not [p for p in pair_dir.rglob("*") if ".tmp" in p.name or p.name.startswith(".")]


def test_cache_equals_fresh_encoding(corpus_dir: Path, tmp_path: Path) -> None:
    meta = _prepare(corpus_dir, tmp_path)
    pair_dir = tmp_path / "xx-yy"
    tok = SentencePieceTokenizer(pair_dir / "spm.model")
    lengths = {}
    for split in SPLITS:
        for lang, key in (("xx", "src_tokens"), ("yy", "tgt_tokens")):
            lines = (pair_dir / "raw" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            assert lines == (corpus_dir / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            cached = [a.tolist() for a in binarized.load_split(pair_dir, split, lang)]
            assert cached == [tok.encode(line) for line in lines]
            assert [tok.decode(ids) for ids in cached] == lines
            assert meta["splits"][split][key] == sum(map(len, cached))
            lengths[split, lang] = [len(ids) + 1 for ids in cached]
    pooled = lengths["train", "xx"] + lengths["train", "yy"]
    assert meta["length_p975"] == pytest.approx(np.percentile(pooled, 97.5))
    assert min(pooled) <= meta["length_p975"] <= max(pooled)


def test_length_percentile_closed_form() -> None:
    assert length_percentile([[1] * 9] * 40, [[1] * 19] * 40) == 20.0  # 97.5% of 80 values: 10s then 20s
    assert length_percentile([[5, 5]], [[6]]) == pytest.approx(2 + 0.975)  # linear between 2 and 3


def test_rerun_is_idempotent_and_force_redoes(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    first = _prepare(corpus_dir, tmp_path)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "xx-yy").rglob("*") if p.is_file()}
    calls = []
    real = prepare_module.train_sentencepiece
    monkeypatch.setattr(prepare_module, "train_sentencepiece", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert _prepare(corpus_dir, tmp_path) == first and calls == []
    assert stamps == {p: p.stat().st_mtime_ns for p in stamps}
    assert _prepare(corpus_dir, tmp_path, force=True) == first and len(calls) == 1
    assert _prepare(corpus_dir, tmp_path, max_len=1000)["splits"] == first["splits"] and len(calls) == 2
    with open(corpus_dir / "train.xx", "a", encoding="utf-8") as handle:
        handle.write("la lo .\n")  # changed input -> redone (and now mismatched, so an error)
    with pytest.raises(NmtError, match="line counts differ"):
        _prepare(corpus_dir, tmp_path)


def test_interrupted_prepare_leaves_no_meta(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _prepare(corpus_dir, tmp_path)

    def boom(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module, "train_sentencepiece", boom)
    with pytest.raises(KeyboardInterrupt):
        _prepare(corpus_dir, tmp_path, force=True)
    assert not (tmp_path / "xx-yy" / "meta.json").exists()
    monkeypatch.undo()
    assert _prepare(corpus_dir, tmp_path)["splits"]["train"]["lines"] == 200


def test_max_len_drops_long_training_pairs_only(corpus_dir: Path, tmp_path: Path) -> None:
    full = _prepare(corpus_dir, tmp_path / "a")
    cut = _prepare(corpus_dir, tmp_path / "b", max_len=12)
    dropped = cut["splits"]["train"]["dropped"]["too_long"]
    assert dropped > 0 and cut["splits"]["train"]["lines"] == 200 - dropped
    assert cut["splits"]["dev"] == full["splits"]["dev"]
    assert max(len(a) for a in binarized.load_split(tmp_path / "b" / "xx-yy", "train", "xx")) <= 12
    raw = (tmp_path / "b" / "xx-yy" / "raw" / "train.yy").read_text().splitlines()
    assert len(raw) == cut["splits"]["train"]["lines"]


def test_moses_option_tokenizes_raw_text(tmp_path: Path) -> None:
    corpus = tmp_path / "raw"
    corpus.mkdir()
    for split in SPLITS:
        (corpus / f"{split}.en").write_text("It's here, \"now\".\nHello, world!\n", encoding="utf-8")
        (corpus / f"{split}.de").write_text("Es ist hier.\nHallo, Welt!\n", encoding="utf-8")
    prepare("en-de", tmp_path / "data", from_dir=corpus, bpe_size=40, moses=True, progress=False)
    raw = (tmp_path / "data" / "en-de" / "raw" / "test.en").read_text(encoding="utf-8")
    assert raw == "It &apos;s here , &quot; now &quot; .\nHello , world !\n"


def test_bad_options(corpus_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(NmtError, match="must look like src-tgt"):
        prepare("xxyy", tmp_path, from_dir=corpus_dir)
    with pytest.raises(NmtError, match="--bpe-size"):
        prepare("xx-yy", tmp_path, from_dir=corpus_dir, bpe_size=3)
    with pytest.raises(NmtError, match="exclude each other"):
        prepare("xx-yy", tmp_path, from_dir=corpus_dir, url="http://127.0.0.1:9/x.tar.gz")
    with pytest.raises(NmtError, match="--max-len"):
        prepare("xx-yy", tmp_path, from_dir=corpus_dir, max_len=0)
    with pytest.raises(NmtError, match="train.zz"):
        prepare("xx-zz", tmp_path, from_dir=corpus_dir, progress=False)


def test_prepare_ted_pair_through_http(http_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = ted_archive(n=120)
    register_ted(monkeypatch, archive)
    url = http_server.serve("/ted_talks.tar.gz", archive)
    meta = prepare("xx-yy", tmp_path, url=url, bpe_size=60, progress=False)
    assert meta["source"] == "ted" and meta["splits"]["train"] == {**meta["splits"]["train"], "lines": 108}
    assert meta["splits"]["train"]["dropped"] == {"null": 12} and meta["filter"] == "official"
    assert (tmp_path / "downloads" / "ted_talks" / "all_talks_train.tsv").is_file()
    with pytest.raises(NmtError, match=r"unknown language code 'zz'.*available: en, xx, yy"):
        prepare("zz-en", tmp_path, url=url, progress=False)


def _null_rows(tsv: Path, src: str, tgt: str) -> int:
    """Rows the reference reader keeps: neither side contains NULL or is empty (ted_reader.py filter_text)."""
    lines = tsv.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    i, j = header.index(src), header.index(tgt)
    return sum(1 for line in lines[1:] if all("NULL" not in f and f.strip() for f in (line.split("\t")[i],
                                                                                       line.split("\t")[j])))


def test_null_inside_lines_gives_the_official_counts(http_server: Server, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    archive = ted_archive(n=120, partial=True)
    register_ted(monkeypatch, archive)
    url = http_server.serve("/ted_talks.tar.gz", archive)
    meta = prepare("xx-yy", tmp_path / "a", url=url, bpe_size=60, progress=False)
    tsvs = tmp_path / "a" / "downloads" / "ted_talks"
    official = [_null_rows(tsvs / f"all_talks_{s}.tsv", "xx", "yy") for s in SPLITS]
    assert [meta["splits"][s]["lines"] for s in SPLITS] == official == [93, 16, 16]
    assert meta["splits"]["train"]["dropped"] == {"null": 27}
    raw = (tmp_path / "a" / "xx-yy" / "raw" / "train.yy").read_text(encoding="utf-8")
    assert "NULL" not in raw and "NULL" not in format_summary(meta).split("filter")[0]
    partial = prepare("xx-yy", tmp_path / "b", url=url, bpe_size=60, keep_partial=True, progress=False)
    assert [partial["splits"][s]["lines"] for s in SPLITS] == [108, 18, 18] and partial["filter"] == "keep_partial"
    assert "NULL" not in (tmp_path / "b" / "xx-yy" / "raw" / "train.yy").read_text(encoding="utf-8")
    assert "filter: keep_partial" in format_summary(partial)


def test_poisoned_cache_is_never_reused(http_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = ted_archive(n=60)
    register_ted(monkeypatch, archive)
    page = b"<!DOCTYPE html><html><body>ted_talks.tar.gz is unavailable</body></html>"
    gone = http_server.serve("/gone/ted_talks.tar.gz", page)
    with pytest.raises(NmtError, match=r"announced an HTML page .*; fetch ted_talks.tar.gz by other means and pass "
                                       r"--from-archive FILE"):
        prepare("xx-yy", tmp_path, url=gone, bpe_size=60, progress=False)
    assert not (tmp_path / "downloads" / "ted_talks.tar.gz").exists()
    (tmp_path / "downloads" / "ted_talks.tar.gz").write_bytes(page)  # what an unchecked download used to leave
    good = http_server.serve("/mirror/ted_talks.tar.gz", archive)
    meta = prepare("xx-yy", tmp_path, url=good, bpe_size=60, progress=False)
    assert meta["splits"]["train"]["lines"] == 54 and http_server.hits["/mirror/ted_talks.tar.gz"] == 1
    assert (tmp_path / "downloads" / "ted_talks.tar.gz").read_bytes() == archive


def test_from_archive_is_checked_like_a_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = ted_archive(n=60)
    register_ted(monkeypatch, archive)
    manual = tmp_path / "fetched" / "ted_talks.tar.gz"
    manual.parent.mkdir()
    manual.write_bytes(archive[:-10])
    with pytest.raises(NmtError, match=r"--from-archive .*: size .* expected .* sha256"):
        prepare("xx-yy", tmp_path / "data", from_archive=manual, bpe_size=60, progress=False)
    manual.write_bytes(archive)
    meta = prepare("xx-yy", tmp_path / "data", from_archive=manual, bpe_size=60, progress=False)
    assert meta["splits"]["train"]["lines"] == 54
    with pytest.raises(NmtError, match="exclude each other"):
        prepare("xx-yy", tmp_path / "data", from_archive=manual, url="http://127.0.0.1:9/t.tar.gz", progress=False)


@pytest.mark.usefixtures("fast_retries")
def test_prepare_iwslt_through_http_with_retry(http_server: Server, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for stem, n in {"train": 60, "tst2012": 6, "tst2013": 5}.items():
        for lang in ("en", "vi"):
            body = ("\n".join(sentences(lang, n, seed=len(stem))) + "\n").encode()
            monkeypatch.setitem(catalog.KNOWN, f"{catalog.IWSLT15}/{stem}.{lang}", expect(body))
            http_server.serve(f"/m/{stem}.{lang}", Reply(b"busy", 500), body)
    meta = prepare("vi-en", tmp_path, url=http_server.url("/m/"), bpe_size=50, progress=False)
    assert meta["source"] == "iwslt15" and [meta["splits"][s]["lines"] for s in SPLITS] == [60, 6, 5]
    assert all(hits == 2 for hits in http_server.hits.values()) and meta["filter"] is None


def test_settings_come_from_the_pair_config_and_counts_are_checked(
        http_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "xx-yy.yaml").write_text("data:\n  pair: xx-yy\n  bpe_size: 57\n  max_len: 14\n"
                                        "  keep_partial: true\n", encoding="utf-8")
    (configs / settings.EXPECTED_LINES).write_text(
        "pair\tsplit\tlines\ttolerance\tcounted\torigin\n# comment\nxx-yy\ttrain\t93\t0\tkept\ta paper\n"
        "xx-yy\tdev\t18\t0\tkept\ta paper\n", encoding="utf-8")
    monkeypatch.setattr(settings, "config_dir", lambda: configs)
    archive = ted_archive(n=120, partial=True)
    register_ted(monkeypatch, archive)
    url = http_server.serve("/ted_talks.tar.gz", archive)
    meta = prepare("xx-yy", tmp_path / "a", url=url, keep_partial=False, progress=False)
    assert (meta["bpe_size"], meta["max_len"], meta["filter"]) == (57, 14, "official")
    assert meta["splits"]["train"]["dropped"]["too_long"] > 0
    err = capsys.readouterr().err
    assert "warning: xx-yy train has" in err and "expected 93 (a paper)" in err
    assert "warning: xx-yy dev has 16 pairs (kept), expected 18 (a paper)" in err
    meta = prepare("xx-yy", tmp_path / "b", url=url, bpe_size=60, max_len=250, progress=False)
    assert (meta["bpe_size"], meta["max_len"], meta["filter"]) == (60, 250, "keep_partial")
    (configs / settings.EXPECTED_LINES).write_text("pair\tsplit\tlines\ttolerance\tcounted\torigin\nxx-yy\ttrain\n")
    with pytest.raises(NmtError, match=r"expected_lines.tsv line 2: expected pair, split"):
        settings.expected_lines("xx-yy")


def test_repository_expected_lines_parse() -> None:
    gl_en = settings.expected_lines("gl-en")
    assert {s: e.lines for s, e in gl_en.items()} == {"train": 10017, "dev": 682, "test": 1007}
    assert settings.expected_lines("en-vi")["train"].counted == "read"
    assert settings.expected_lines("vi-en") == settings.expected_lines("en-vi")
    meta = {"pair": "gl-en", "splits": {"train": {"lines": 11233, "dropped": {}}, "dev": {"lines": 682,
                                                                                       "dropped": {"null": 60}}}}
    assert settings.count_warnings(meta, gl_en) == [
        "warning: gl-en train has 11,233 pairs (kept), expected 10,017 (" + gl_en["train"].origin + ")"]


def test_cli_prepare_and_error(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    args = ["prepare", "xx-yy", "--from-dir", str(corpus_dir), "--data-dir", data, "--bpe-size", "60"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "train" in out and "200" in out and "length_p975" in out
    assert cli.main(args + ["--no-progress"]) == 0 and (tmp_path / "data" / "xx-yy" / "meta.json").is_file()
    capsys.readouterr()
    assert cli.main(["prepare", "xx_yy", "--data-dir", data]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "src-tgt" in err[0]


@pytest.mark.skipif(not GL_EN.is_dir(), reason="../shared/data/gl-en not available")
def test_real_gl_en_summary(tmp_path: Path) -> None:
    # ../shared/data/gl-en was extracted with the old rule (NULL markers stripped): 11,233 / 742 / 1,112 pairs, not
    # the papers' 10,017 / 682 / 1,007. configs/gl-en.yaml sets bpe_size 3900 and max_len 250 (1 or 2 pairs longer).
    meta = prepare("gl-en", tmp_path, from_dir=GL_EN, progress=False)
    assert [meta["splits"][s]["lines"] for s in SPLITS] == [11233 - meta["splits"]["train"]["dropped"]["too_long"],
                                                            742, 1112]
    assert 0 < meta["splits"]["train"]["dropped"]["too_long"] <= 2 and len(meta["splits"]["train"]["dropped"]) == 1
    assert all(meta["splits"][s]["dropped"] == {} for s in ("dev", "test"))
    assert meta["vocab_size"] == meta["bpe_size"] == 3900 and meta["filter"] is None
    assert 40 < meta["length_p975"] < 150
    summary = format_summary(meta)
    assert f"{meta['splits']['train']['lines']:,}" in summary and "length_p975" in summary
    tok = SentencePieceTokenizer(tmp_path / "gl-en" / "spm.model")
    for split in ("train", "dev"):  # exact on train; dev may hold characters train never saw (-> UNK)
        lines = (tmp_path / "gl-en" / "raw" / f"{split}.en").read_text(encoding="utf-8").splitlines()
        decoded = [tok.decode(a.tolist()) for a in binarized.load_split(tmp_path / "gl-en", split, "en")]
        same = sum(d == line for d, line in zip(decoded, lines, strict=True))
        assert same == len(lines) if split == "train" else same > 0.99 * len(lines)
