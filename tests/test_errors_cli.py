"""Every user error through the real CLI: one line ``error: ...`` naming the file, line or key, exit status 2.

One table (:data:`CASES`) of bad inputs for ``nmt prepare``, ``train``, ``translate``, ``evaluate``, ``score`` and
``average`` (corrupt caches and checkpoints, configs that are empty, not UTF-8, a directory, a YAML bomb or NaN, a
1 GB line on stdin, files that disagree); each case builds
its files in a temp dir and lists the fragments the message must contain. Inputs that must be *accepted* (CRLF
files, whitespace-only lines, an extremely long line, an empty translation input) are checked separately, and
``--debug`` is checked to show the traceback instead. The unit tests in test_config/test_corpora/test_download/
test_prepare/test_translate cover the same failures one layer down.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from nmt import cli
from nmt.checkpoint.files import bytes_to_tensor, load_checkpoint, save_checkpoint
from nmt.data.bpe import train_sentencepiece
from tests import data_fixtures
from tests.data_fixtures import Reply, Server, make_tar, register_ted, ted_archive
from tests.synthetic import sentences, tiny_config, translate, write_corpus

ROOT = Path(__file__).resolve().parents[1]
LONG_WORDS = 2000  # one training pair and one translation input this many words long

http_server = data_fixtures.http_server  # fixture
fast_retries = data_fixtures.fast_retries  # fixture


@dataclass(frozen=True)
class World:
    """Prepared data, a valid config and a short trained run, made once through the CLI."""

    corpus: Path
    data: Path
    config: Path
    run: Path
    checkpoint: Path
    prepare_code: int
    prepare_err: str
    train_code: int


def quiet_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue()


def write_lines(path: Path, lines: list[str], ending: str = "\n") -> None:
    path.write_bytes("".join(line + ending for line in lines).encode("utf-8"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("world")
    corpus = write_corpus(root / "corpus", {"train": 300, "dev": 10, "test": 10})
    # The training split has CRLF endings, a whitespace-only pair and one extremely long pair: all accepted.
    src = (corpus / "train.xx").read_text().splitlines()
    src.insert(5, " \t  ")
    src.append(" ".join(["ka", "lo"] * (LONG_WORDS // 2)))
    write_lines(corpus / "train.xx", src, "\r\n")
    write_lines(corpus / "train.yy", [translate(s) if s.strip() else "   " for s in src], "\r\n")
    # --max-len far above data.max_len keeps the long pair in the prepared data, so training must skip it itself.
    prepare_code, prepare_err = quiet_cli(["prepare", "xx-yy", "--from-dir", str(corpus), "--data-dir",
                                           str(root / "data"), "--bpe-size", "48", "--max-len", "1000000",
                                           "--no-progress"])
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config(root / "data", root / "run", max_steps=2, eval_every=2,
                                                 eval_sentences=2, log_every=1)))
    train_code, _ = quiet_cli(["train", str(config)])
    return World(corpus, root / "data", config, root / "run", root / "run" / "checkpoint_last.pt", prepare_code,
                 prepare_err, train_code)


# --- the cases --------------------------------------------------------------------------------------------------
# Each builder gets (world, tmp_path, http_server) and returns (argv, fragments the one error line must contain).
Case = Callable[[World, Path, Server], tuple[list[str], list[str]]]


def _config(tmp: Path, text: str) -> Path:
    path = tmp / "config.yaml"
    path.write_text(text)
    return path


def _prepare(tmp: Path, pair: str = "xx-yy", *source: str) -> list[str]:
    return ["prepare", pair, *source, "--data-dir", str(tmp / "data"), "--bpe-size", "48", "--no-progress"]


def _corpus_copy(w: World, tmp: Path) -> Path:
    return Path(shutil.copytree(w.corpus, tmp / "corpus"))


def _run_copy(w: World, tmp: Path) -> Path:
    return Path(shutil.copytree(w.run, tmp / "run"))


def _resume(w: World, save_dir: Path, *overrides: str) -> list[str]:
    sets = [arg for o in (f"train.save_dir={save_dir}", *overrides) for arg in ("--set", o)]
    return ["train", str(w.config), "--resume", *sets]


def _translate(w: World, checkpoint: Path, tmp: Path, *extra: str) -> list[str]:
    source = tmp / "in.txt"
    source.write_text("ka lo mi\n")
    return ["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--device", "cpu", *extra]


def unknown_key(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    path = _config(tmp, w.config.read_text() + "bogus_section:\n  x: 1\n")
    return ["train", str(path)], [str(path), "'bogus_section'"]


def unknown_nested_key(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    return ["train", str(w.config), "--set", "train.bogus=1"], [str(w.config), "'train.bogus'"]


def wrong_type(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    path = _config(tmp, "train:\n  max_steps: many\n")
    return ["train", str(path)], [str(path), "'train.max_steps'", "'many'"]


def yaml_syntax(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    path = _config(tmp, "model:\n  d_model: 32\n  norm: [unclosed\ntrain:\n  lr: 1\n")
    return ["train", str(path)], [f"{path} line ", "YAML syntax error"]


def missing_config(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    return ["train", str(tmp / "nope.yaml")], ["config file not found", str(tmp / "nope.yaml")]


def train_before_prepare(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    argv = ["train", str(w.config), "--set", f"data.data_dir={tmp / 'empty'}", "--set", f"train.save_dir={tmp / 'r'}"]
    return argv, [str(tmp / "empty" / "xx-yy"), "meta.json", "nmt prepare"]


def missing_binarized(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    data = Path(shutil.copytree(w.data, tmp / "data"))
    lost = data / "xx-yy" / "bin" / "train.yy.tokens.npy"
    lost.unlink()
    argv = ["train", str(w.config), "--set", f"data.data_dir={data}", "--set", f"train.save_dir={tmp / 'r'}"]
    return argv, [str(lost), "nmt prepare"]


def bad_pair_in_config(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    return ["train", str(w.config), "--set", "data.pair=english"], ["'data.pair'", "'english'"]


def unknown_pair(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    return _prepare(tmp, "english", "--from-dir", str(w.corpus)), ["'english'", "src-tgt"]


_KNOWN_TED: list[bytes] = []  # archives a case declares to be the catalog's ted_talks.tar.gz for its run


def _known(archive: bytes) -> bytes:
    """Declare ``archive`` the known ted_talks.tar.gz for this case (so extraction errors can be reached)."""
    _KNOWN_TED.append(archive)
    return archive


def unknown_language_code(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    archive = tmp / "ted_talks.tar.gz"
    archive.write_bytes(_known(ted_archive(n=30)))
    return _prepare(tmp, "zz-en", "--url", str(archive)), ["unknown language code 'zz'", "all_talks_train.tsv",
                                                           "available: en, xx, yy"]


def line_count_mismatch(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    corpus = _corpus_copy(w, tmp)
    with open(corpus / "dev.yy", "a") as handle:
        handle.write("one more line\n")
    return _prepare(tmp, "xx-yy", "--from-dir", str(corpus)), [str(corpus / "dev.xx"), str(corpus / "dev.yy"),
                                                               "10 lines", "has 11"]


def empty_corpus(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    corpus = _corpus_copy(w, tmp)
    (corpus / "test.xx").write_text("")
    (corpus / "test.yy").write_text("")
    return _prepare(tmp, "xx-yy", "--from-dir", str(corpus)), ["no sentence pairs", str(corpus / "test.xx")]


def blank_corpus(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    corpus = _corpus_copy(w, tmp)
    (corpus / "dev.xx").write_text(" \n\t\n")
    (corpus / "dev.yy").write_text("a\nb\n")
    return _prepare(tmp, "xx-yy", "--from-dir", str(corpus)), ["no sentence pairs", str(corpus / "dev.xx"),
                                                               "2 empty"]


def invalid_utf8(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    corpus = _corpus_copy(w, tmp)
    bad = corpus / "train.yy"
    lines = bad.read_bytes().split(b"\r\n")
    lines[6] = b"caf\xe9 latin-1"
    bad.write_bytes(b"\r\n".join(lines))
    return _prepare(tmp, "xx-yy", "--from-dir", str(corpus)), [f"{bad} line 7", "invalid UTF-8"]


def archive_without_members(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    archive = tmp / "ted_talks.tar.gz"
    archive.write_bytes(_known(make_tar({"ted_talks/README": b"nothing here\n"})))
    return _prepare(tmp, "xx-yy", "--url", str(archive)), ["lacks the expected member 'all_talks_train.tsv'"]


def corrupt_archive(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    archive = tmp / "ted_talks.tar.gz"
    archive.write_bytes(b"<html>503 Service Unavailable</html>\n")  # what the original host serves since 2026-02
    return _prepare(tmp, "xx-yy", "--url", str(archive)), ["ted_talks.tar.gz", "HTML page",
                                                           "expected 352,222,045 bytes, sha256 03457b9e"]


def truncated_archive(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    data = _known(ted_archive(n=30))
    archive = tmp / "ted_talks.tar.gz"
    archive.write_bytes(data[: len(data) // 2])
    return _prepare(tmp, "xx-yy", "--url", str(archive)), ["ted_talks.tar.gz", f"a file of {len(data) // 2:,} bytes",
                                                           f"expected {len(data):,} bytes"]


def truncated_download(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    data = _known(ted_archive(n=30))
    url = s.serve("/ted_talks.tar.gz", Reply(data[:1000], length=len(data)))
    return _prepare(tmp, "xx-yy", "--url", url), [url, "truncated", "3 attempts"]


def escaping_member(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    archive = tmp / "ted_talks.tar.gz"
    members = {"ted_talks/../../../escaped.tsv": b"x\n", **{f"all_talks_{k}.tsv": b"talk_name\txx\tyy\n"
                                                            for k in ("train", "dev", "test")}}
    archive.write_bytes(_known(make_tar(members)))
    return _prepare(tmp, "xx-yy", "--url", str(archive)), ["unsafe member", "escaped.tsv", "ted_talks.tar.gz"]


def corrupt_checkpoint_translate(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    bad = tmp / "bad.pt"
    bad.write_bytes(os.urandom(4096))
    return _translate(w, bad, tmp), [str(bad), "corrupt"]


def truncated_checkpoint_translate(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    data = w.checkpoint.read_bytes()
    bad = tmp / "half.pt"
    bad.write_bytes(data[: len(data) // 2])
    return _translate(w, bad, tmp), [str(bad), "truncated"]


def bit_flipped_checkpoint_translate(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    data = bytearray(w.checkpoint.read_bytes())
    data[len(data) // 2] ^= 0x10  # lands in tensor data, which torch.load alone would read without noticing
    bad = tmp / "flipped.pt"
    bad.write_bytes(bytes(data))
    return _translate(w, bad, tmp), [str(bad), "corrupt", "CRC-32"]


def missing_checkpoint(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    return _translate(w, tmp / "none.pt", tmp), ["checkpoint not found", str(tmp / "none.pt")]


def truncated_checkpoint_resume(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    run = _run_copy(w, tmp)
    last = run / "checkpoint_last.pt"
    last.write_bytes(last.read_bytes()[:-5000])
    return _resume(w, run), [str(last), "truncated"]


def other_architecture_resume(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    run = _run_copy(w, tmp)
    return _resume(w, run, "model.d_ff=128"), [str(run / "checkpoint_last.pt"), "model.d_ff"]


def _other_spm(tmp: Path, vocab_size: int) -> bytes:
    train_sentencepiece(sentences(200, seed=99) + ["qq vv ww xx"] * 5, tmp / "spm", vocab_size)
    return (tmp / "spm" / "spm.model").read_bytes()


def _swap_vocabulary(w: World, tmp: Path, vocab_size: int) -> tuple[Path, int]:
    run = _run_copy(w, tmp)
    payload = load_checkpoint(run / "checkpoint_last.pt")
    theirs = payload["vocab_size"]
    payload["spm"] = bytes_to_tensor(_other_spm(tmp, vocab_size))
    payload["vocab_size"] = vocab_size
    save_checkpoint(run / "checkpoint_last.pt", payload)
    return run, theirs


def other_vocab_size_resume(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    run, ours = _swap_vocabulary(w, tmp, 40)
    return _resume(w, run), [str(run / "checkpoint_last.pt"), str(w.data / "xx-yy" / "spm.model"), "vocab_size 40",
                             f"vocab_size {ours}"]


def other_spm_model_resume(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    run, ours = _swap_vocabulary(w, tmp, 48)
    assert ours == 48
    return _resume(w, run), [str(run / "checkpoint_last.pt"), str(w.data / "xx-yy" / "spm.model"),
                             "SentencePiece model"]


def unwritable_output(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    blocker = tmp / "a_file"
    blocker.write_text("x")
    out = blocker / "out.txt"
    return _translate(w, w.checkpoint, tmp, "--output", str(out)), [str(out), "not a writable directory"]


def output_is_directory(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    return _translate(w, w.checkpoint, tmp, "--output", str(tmp)), [str(tmp), "is a directory"]


def translate_invalid_utf8(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    argv = _translate(w, w.checkpoint, tmp)
    (tmp / "in.txt").write_bytes(b"ka lo\r\nmi \xff\xfe\r\n")
    return argv, [f"{tmp / 'in.txt'} line 2", "invalid UTF-8"]


def translate_missing_input(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    argv = _translate(w, w.checkpoint, tmp)
    (tmp / "in.txt").unlink()
    return argv, ["file not found", str(tmp / "in.txt")]


# --- widened (issue #29): caches, configs, stdin, evaluate, score, average -----------------------------------------
_STDIN: list[object] = []  # a stream a case wants as sys.stdin for its run


class _EndlessLine(io.RawIOBase):
    """A binary stdin of one 1 GB line (generated as it is read, never held in memory)."""

    def __init__(self, size: int = 2**30) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = b"k" * n
        self.left -= n
        return n


def _train_on_copy(w: World, tmp: Path) -> tuple[Path, list[str]]:
    data = Path(shutil.copytree(w.data, tmp / "data"))
    return data, ["train", str(w.config), "--set", f"data.data_dir={data}", "--set", f"train.save_dir={tmp / 'r'}"]


def corrupt_binarized_cache(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    data, argv = _train_on_copy(w, tmp)
    bad = data / "xx-yy" / "bin" / "train.yy.tokens.npy"
    bad.write_bytes(os.urandom(2000))
    return argv, [str(bad), "nmt prepare"]


def truncated_binarized_cache(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    data, argv = _train_on_copy(w, tmp)
    bad = data / "xx-yy" / "bin" / "dev.xx.offsets.npy"
    bad.write_bytes(bad.read_bytes()[:-16])
    return argv, [str(bad), "nmt prepare"]


def empty_config(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    path = _config(tmp, "")
    return ["train", str(path)], [str(path), "is empty"]


def non_utf8_config(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    path = tmp / "config.yaml"
    path.write_bytes(b"train:\n  lr: 0.001  # caf\xe9\n")
    return ["train", str(path)], [str(path), "line 2", "invalid UTF-8"]


def config_is_directory(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    folder = tmp / "config.yaml"
    folder.mkdir()
    return ["train", str(folder)], [str(folder), "is a directory"]


def yaml_bomb_config(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    levels, previous = ['&a ["x","x","x","x","x","x","x","x","x"]'], "a"
    for name in "bcdefghij":  # 9 ** 10 values once expanded, from 81 aliases
        levels.append(f"&{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    path = _config(tmp, "model:\n  norm: [" + ", ".join(levels) + "]\n")
    return ["train", str(path)], [str(path), "aliases expand to more than"]


def nan_config_value(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    return ["train", str(w.config), "--set", "train.lr=.nan"], [str(w.config), "'train.lr'"]


def huge_line_on_stdin(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    _STDIN.append(io.TextIOWrapper(io.BufferedReader(_EndlessLine()), encoding="utf-8"))
    return ["translate", "--checkpoint", str(w.checkpoint), "--device", "cpu"], ["<stdin> line 1", "longer than 4 MiB"]


def _texts(tmp: Path, hyp: list[str], ref: list[str]) -> tuple[Path, Path]:
    write_lines(tmp / "hyp.txt", hyp)
    write_lines(tmp / "ref.txt", ref)
    return tmp / "hyp.txt", tmp / "ref.txt"


def evaluate_line_count_mismatch(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    hyp, ref = _texts(tmp, ["a b", "c d"], ["a b", "c d", "e f"])
    return ["evaluate", "--hyp", str(hyp), "--ref", str(ref)], [str(hyp), "2", "3"]


def evaluate_missing_reference(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    hyp, _ = _texts(tmp, ["a b"], ["a b"])
    return ["evaluate", "--hyp", str(hyp), "--ref", str(tmp / "none.txt")], ["not found", str(tmp / "none.txt")]


def evaluate_invalid_utf8(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    hyp, ref = _texts(tmp, ["a b", "c d"], ["a b", "c d"])
    hyp.write_bytes(b"a b\nc \xff\n")
    return ["evaluate", "--hyp", str(hyp), "--ref", str(ref)], [str(hyp), "line 2", "invalid UTF-8"]


def score_line_count_mismatch(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    src, tgt = _texts(tmp, ["ka lo", "mi ka"], ["ka lo"])
    return ["score", "--checkpoint", str(w.checkpoint), "--src", str(src), "--tgt", str(tgt), "--device", "cpu",
            "--pretokenized"], [str(src), str(tgt)]


def score_corrupt_checkpoint(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    src, tgt = _texts(tmp, ["ka lo"], ["ka lo"])
    bad = tmp / "bad.pt"
    bad.write_bytes(os.urandom(3000))
    return ["score", "--checkpoint", str(bad), "--src", str(src), "--tgt", str(tgt), "--device", "cpu"], [str(bad),
                                                                                                         "corrupt"]


def average_other_architecture(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    payload = load_checkpoint(w.checkpoint)
    payload["config"]["model"]["d_ff"] = 128
    other = tmp / "other.pt"
    save_checkpoint(other, payload)
    return ["average", str(w.checkpoint), str(other), "--output", str(tmp / "avg.pt")], [str(other), "model.d_ff"]


def average_corrupt_checkpoint(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    bad = tmp / "bad.pt"
    bad.write_bytes(w.checkpoint.read_bytes()[:-3000])
    return ["average", str(w.checkpoint), str(bad), "--output", str(tmp / "avg.pt")], [str(bad), "truncated"]


def ensemble_of_another_vocabulary(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    run, _ = _swap_vocabulary(w, tmp, 48)
    return _translate(w, w.checkpoint, tmp, "--checkpoint", str(run / "checkpoint_last.pt")), ["SentencePiece"]


def checkpoint_is_directory(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    return _translate(w, tmp, tmp), [str(tmp), "directory"]


def prepare_from_a_file(w: World, tmp: Path, s: Server) -> tuple[list[str], list[str]]:
    not_a_dir = tmp / "corpus.txt"
    not_a_dir.write_text("x\n")
    return _prepare(tmp, "xx-yy", "--from-dir", str(not_a_dir)), [str(not_a_dir)]


CASES: dict[str, Case] = {
    "unknown_key": unknown_key,
    "unknown_nested_key": unknown_nested_key,
    "wrong_type": wrong_type,
    "yaml_syntax": yaml_syntax,
    "missing_config": missing_config,
    "train_before_prepare": train_before_prepare,
    "missing_binarized": missing_binarized,
    "bad_pair_in_config": bad_pair_in_config,
    "unknown_pair": unknown_pair,
    "unknown_language_code": unknown_language_code,
    "line_count_mismatch": line_count_mismatch,
    "empty_corpus": empty_corpus,
    "blank_corpus": blank_corpus,
    "invalid_utf8": invalid_utf8,
    "archive_without_members": archive_without_members,
    "corrupt_archive": corrupt_archive,
    "truncated_archive": truncated_archive,
    "truncated_download": truncated_download,
    "escaping_member": escaping_member,
    "corrupt_checkpoint_translate": corrupt_checkpoint_translate,
    "truncated_checkpoint_translate": truncated_checkpoint_translate,
    "bit_flipped_checkpoint_translate": bit_flipped_checkpoint_translate,
    "missing_checkpoint": missing_checkpoint,
    "truncated_checkpoint_resume": truncated_checkpoint_resume,
    "other_architecture_resume": other_architecture_resume,
    "other_vocab_size_resume": other_vocab_size_resume,
    "other_spm_model_resume": other_spm_model_resume,
    "unwritable_output": unwritable_output,
    "output_is_directory": output_is_directory,
    "translate_invalid_utf8": translate_invalid_utf8,
    "translate_missing_input": translate_missing_input,
    "corrupt_binarized_cache": corrupt_binarized_cache,
    "truncated_binarized_cache": truncated_binarized_cache,
    "empty_config": empty_config,
    "non_utf8_config": non_utf8_config,
    "config_is_directory": config_is_directory,
    "yaml_bomb_config": yaml_bomb_config,
    "nan_config_value": nan_config_value,
    "huge_line_on_stdin": huge_line_on_stdin,
    "evaluate_line_count_mismatch": evaluate_line_count_mismatch,
    "evaluate_missing_reference": evaluate_missing_reference,
    "evaluate_invalid_utf8": evaluate_invalid_utf8,
    "score_line_count_mismatch": score_line_count_mismatch,
    "score_corrupt_checkpoint": score_corrupt_checkpoint,
    "average_other_architecture": average_other_architecture,
    "average_corrupt_checkpoint": average_corrupt_checkpoint,
    "ensemble_of_another_vocabulary": ensemble_of_another_vocabulary,
    "checkpoint_is_directory": checkpoint_is_directory,
    "prepare_from_a_file": prepare_from_a_file,
}


@pytest.mark.parametrize("case", list(CASES))
def test_user_error_is_one_line(case: str, world: World, tmp_path: Path, http_server: Server, fast_retries: None,
                                capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    argv, fragments = CASES[case](world, tmp_path, http_server)
    while _KNOWN_TED:
        register_ted(monkeypatch, _KNOWN_TED.pop())
    while _STDIN:
        monkeypatch.setattr(sys, "stdin", _STDIN.pop())
    before = {p: p.stat().st_mtime_ns for p in world.run.iterdir()}
    capsys.readouterr()
    code = cli.main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert not list(tmp_path.parent.glob("escaped.tsv")) and not (tmp_path / "escaped.tsv").exists()
    assert {p: p.stat().st_mtime_ns for p in world.run.iterdir()} == before  # the shared run is never touched


# --- accepted inputs --------------------------------------------------------------------------------------------

def test_crlf_whitespace_only_and_long_lines_are_accepted(world: World) -> None:
    assert world.prepare_code == 0, world.prepare_err
    assert world.train_code == 0 and torch.load(world.checkpoint, weights_only=True)["step"] == 2
    meta = yaml.safe_load((world.data / "xx-yy" / "meta.json").read_text())
    assert meta["splits"]["train"]["lines"] == 301 and meta["splits"]["train"]["dropped"] == {"empty": 1}
    raw = (world.data / "xx-yy" / "raw" / "train.xx").read_bytes()
    assert b"\r" not in raw and raw.count(b"\n") == 301
    log = (world.run / "train.log").read_text()
    assert "300 training pairs (1 longer than data.max_len skipped)" in log  # the long pair, counted


def test_translate_keeps_blank_lines_and_truncates_a_long_one(world: World, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    write_lines(source, ["ka lo mi", "  \t ", " ".join(["ka"] * LONG_WORDS), ""], "\r\n")
    argv = ["translate", "--checkpoint", str(world.checkpoint), "--input", str(source), "--output", str(out),
            "--device", "cpu", "--beam", "1"]
    assert cli.main(argv) == 0
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 5 and lines[1] == lines[3] == lines[4] == ""
    assert "warning: input line 3 has" in capsys.readouterr().err


def test_translate_empty_input_gives_empty_output(world: World, tmp_path: Path) -> None:
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(b"")
    argv = ["translate", "--checkpoint", str(world.checkpoint), "--input", str(source), "--output", str(out),
            "--device", "cpu"]
    assert cli.main(argv) == 0
    assert out.read_bytes() == b""


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    missing = tmp_path / "nope.yaml"
    result = subprocess.run([sys.executable, "-m", "nmt", "--debug", "train", str(missing)], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert f"nmt.errors.NmtError: config file not found: {missing}" in result.stderr
    plain = subprocess.run([sys.executable, "-m", "nmt", "train", str(missing)], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=120)
    assert plain.returncode == 2 and plain.stderr == f"error: config file not found: {missing}\n"

