"""Translator and ``nmt translate`` on a tiny random checkpoint; search with the real model (cached == uncached,
batched == one-by-one)."""

from __future__ import annotations

import dataclasses
import io
import random
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from nmt import cli
from nmt.checkpoint.files import load_checkpoint, model_payload, save_checkpoint
from nmt.config import config_from_dict, config_to_dict
from nmt.data.bpe import SentencePieceTokenizer, train_sentencepiece
from nmt.errors import NmtError
from nmt.inference.restore import restore_model
from nmt.inference.translator import Translator
from nmt.model.spec import ModelSpec
from nmt.model.transformer import build_model
from nmt.search import beam_search, greedy_search
from nmt.search.batches import decode_batches
from nmt.vocab import spm_digest

WORDS = "the a cat dog sat ran on under mat tree big small red blue , .".split()
QKNORM_LENGTH = 20.0


def synthetic_sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) for _ in range(n)]


def tiny_checkpoint(directory: Path, name: str = "tiny.pt", seed: int = 0, **model: Any) -> Path:
    """A tiny random model (d_model 16, 2+2 layers) with a SentencePiece model trained on synthetic text."""
    spm_dir = directory / "spm"
    if not (spm_dir / "spm.model").exists():
        train_sentencepiece(synthetic_sentences(300), spm_dir, vocab_size=48)
    tokenizer = SentencePieceTokenizer(spm_dir / "spm.model")
    tree = {"data": {"pair": "de-en"},
            "model": {"enc_layers": 2, "dec_layers": 2, "d_model": 16, "d_ff": 32, "n_heads": 2, "init": "xavier",
                      "max_positions": 64, **model},
            "decode": {"beam": 3, "max_len_a": 1.0, "max_len_b": 4, "max_tokens": 60}}
    config = config_from_dict(tree)
    torch.manual_seed(seed)
    net = build_model(config.model, ModelSpec(tokenizer.vocab_size, QKNORM_LENGTH))
    path = directory / name
    spec = ModelSpec(tokenizer.vocab_size, QKNORM_LENGTH, spm_digest(tokenizer.model_bytes()))
    save_checkpoint(path, model_payload(net.state_dict(), config_to_dict(config), tokenizer.model_bytes(),
                                        spec.payload()))
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def translator(checkpoint: Path) -> Translator:
    return Translator.from_checkpoint(checkpoint, device="cpu")


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """``nmt.cli.main`` as the console script runs it."""
    return cli.main(argv)


class FakeStdin(io.TextIOWrapper):
    def __init__(self, data: bytes, tty: bool = False) -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


# --- search with the real model ---------------------------------------------------------------------------------

@dataclasses.dataclass
class UncachedState:
    src: Tensor
    prefix: Tensor  # (N, t) tokens fed so far, BOS first

    def select(self, index: Tensor) -> UncachedState:
        return UncachedState(self.src[index], self.prefix[index])


class Uncached:
    """The naive decoder: every step re-runs the full forward pass on the whole prefix."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def start(self, src: Tensor) -> UncachedState:
        return UncachedState(src, src.new_zeros(src.size(0), 0))

    @torch.no_grad()
    def step(self, prev: Tensor, state: UncachedState) -> tuple[Tensor, UncachedState]:
        prefix = torch.cat([state.prefix, prev[:, None]], dim=1)
        logits = self.model(state.src, prefix)[:, -1]
        return F.log_softmax(logits.float(), dim=-1), UncachedState(state.src, prefix)


def sources(translator: Translator) -> list[list[int]]:
    return translator.encode(synthetic_sentences(7, seed=5), pretokenized=True)


def test_cached_equals_uncached(translator: Translator) -> None:
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(s + [3]) for s in sources(translator)], batch_first=True)
    cached = beam_search(translator.model, src, beam=3, lenpen=0.6, max_len_b=6, nbest=3)
    naive = beam_search(Uncached(translator.model), src, beam=3, lenpen=0.6, max_len_b=6, nbest=3)
    for a, b in zip(cached, naive):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_batched_equals_one_by_one_and_beam_one_equals_greedy(translator: Translator) -> None:
    srcs = sources(translator)
    batched = translator.translate_ids(srcs, beam=3, nbest=2, max_tokens=1000)
    for src, expected in zip(srcs, batched):
        (single,) = translator.translate_ids([src], beam=3, nbest=2)
        assert [h.tokens for h in single] == [h.tokens for h in expected]
        assert [h.score for h in single] == pytest.approx([h.score for h in expected], abs=1e-4)
    padded = torch.nn.utils.rnn.pad_sequence([torch.tensor(s + [3]) for s in srcs], batch_first=True)
    greedy = greedy_search(translator.model, padded, lenpen=0.6, max_len_b=6)
    beam1 = beam_search(translator.model, padded, beam=1, lenpen=0.6, max_len_b=6)
    assert [g[0].tokens for g in greedy] == [b[0].tokens for b in beam1]


def test_restore_model_and_mismatch(checkpoint: Path) -> None:
    payload = load_checkpoint(checkpoint)
    model, config, tokenizer = restore_model(payload, "cpu")
    assert not model.training and config.model.d_model == 16 and tokenizer.vocab_size == payload["vocab_size"]
    payload["config"]["model"]["d_ff"] = 64
    with pytest.raises(NmtError, match="does not match"):
        restore_model(payload, "cpu", path=checkpoint)


# --- Translator ---------------------------------------------------------------------------------------------------

def test_decode_batches_respects_budget_and_covers_all() -> None:
    lengths = [5, 1, 9, 3, 3, 7, 2, 30]
    batches = decode_batches(lengths, max_tokens=12)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or max(lengths[i] for i in batch) * len(batch) <= 12


def test_translate_keeps_order_count_and_empty_lines(translator: Translator) -> None:
    lines = ["the cat sat on the mat .", "", "a big red dog ran under a small tree , a blue cat sat .", "   ",
             "dog", "the cat sat on the mat ."]
    out = translator.translate(lines, max_tokens=20)
    assert len(out) == len(lines) and all(len(n) == 1 for n in out)
    assert out[1] == [("", 0.0)] and out[3] == [("", 0.0)]
    one_by_one = [translator.translate([line])[0] for line in lines]
    assert [n[0][0] for n in out] == [n[0][0] for n in one_by_one]
    assert out[0] == out[5]
    nbest = translator.translate(lines, beam=3, nbest=3, pretokenized=True)
    assert all(len(n) == 3 for n in nbest)
    assert all([s for _, s in n] == sorted((s for _, s in n), reverse=True) for n in nbest)


def test_bf16_decoding_computes_in_bf16_and_stays_close_to_fp32(checkpoint: Path, translator: Translator) -> None:
    bf16 = Translator.from_checkpoint(checkpoint, device="cpu", precision="bf16")
    assert translator.precision == "fp32" and bf16.precision == "bf16"
    src = sources(translator) + translator.encode(synthetic_sentences(20, seed=9), pretokenized=True)
    full, half = translator.translate_ids(src, beam=3), bf16.translate_ids(src, beam=3)
    pairs = [(a[0], b[0]) for a, b in zip(full, half, strict=True)]
    assert any(a.logprob != b.logprob for a, b in pairs)  # the arithmetic really changed
    agree = [(a, b) for a, b in pairs if a.tokens == b.tokens]
    assert len(agree) >= len(pairs) // 2
    assert all(abs(a.logprob - b.logprob) < 0.25 for a, b in agree)


def test_long_line_is_truncated_with_warning(translator: Translator, capsys: pytest.CaptureFixture[str]) -> None:
    (_, out) = translator.translate(["the cat .", " ".join(["cat"] * 100)], beam=1)
    err = capsys.readouterr().err
    assert "input line 2 has" in err and "truncated" in err
    assert isinstance(out[0][0], str)


# --- nmt translate --------------------------------------------------------------------------------------------------

def test_cli_reads_stdin_and_keeps_lines(checkpoint: Path, translator: Translator, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["the cat sat .", "", "a dog ran under the tree .", "red"]
    monkeypatch.setattr("sys.stdin", FakeStdin("\n".join(lines).encode() + b"\n"))
    assert run_cli(["translate", "--checkpoint", str(checkpoint), "--device", "cpu"], monkeypatch) == 0
    out = capsys.readouterr().out.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    assert out[:-1] == [n[0][0] for n in translator.translate(lines)]
    assert out[1] == ""


def test_cli_nbest_format_and_file_output(checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "in.txt"
    src.write_text("the cat sat .\n\na dog ran .\n", encoding="utf-8")
    out = tmp_path / "sub" / "out.txt"
    assert run_cli(["translate", "--checkpoint", str(checkpoint), "--input", str(src), "--output", str(out),
                    "--beam", "3", "--nbest", "2", "--pretokenized", "--device", "cpu"], monkeypatch) == 0
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 1, 1, 2, 2]
    assert all(len(r) == 3 for r in rows)
    float(rows[0][1])
    assert [p.name for p in out.parent.iterdir()] == ["out.txt"]  # no temporary file left behind


@pytest.mark.parametrize("search", ["official", "fairseq"])
def test_cli_search_option_picks_the_rules(search: str, checkpoint: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from nmt.search import SEARCHES

    calls: list[str] = []
    for name, (beam_fn, greedy_fn) in list(SEARCHES.items()):
        def counted(*args: Any, _name: str = name, _fn: Any = beam_fn, **kwargs: Any) -> Any:
            calls.append(_name)
            return _fn(*args, **kwargs)
        monkeypatch.setitem(SEARCHES, name, (counted, greedy_fn))
    src = tmp_path / "in.txt"
    src.write_text("the cat sat .\n", encoding="utf-8")
    assert run_cli(["translate", "--checkpoint", str(checkpoint), "--input", str(src), "--output",
                    str(tmp_path / "out.txt"), "--search", search, "--device", "cpu"], monkeypatch) == 0
    assert calls and set(calls) == {search}


def test_cli_interactive_streams(checkpoint: Path, translator: Translator, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    long_line = " ".join(["cat"] * 100)
    monkeypatch.setattr("sys.stdin", FakeStdin(f"the cat .\n\n{long_line}\n".encode(), tty=True))
    assert run_cli(["translate", "--checkpoint", str(checkpoint), "--device", "cpu"], monkeypatch) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(translator.translate(["the cat ."])[0][0][0] + "\n\n")
    assert "input line 3 has" in captured.err  # each line is translated alone, but warnings count input lines


@pytest.mark.parametrize("case", ["bad_stdin", "bad_file", "missing_input", "missing_checkpoint", "output_dir",
                                  "nbest", "beam", "precision"])
def test_cli_errors_are_one_line(case: str, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    args = ["translate", "--checkpoint", str(checkpoint), "--device", "cpu"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nalso fine\n\xc3\x28 broken\n")
    expected = {"bad_stdin": "<stdin> line 3", "bad_file": f"{bad} line 3", "missing_input": "not found",
                "missing_checkpoint": "checkpoint not found", "output_dir": "is a directory", "nbest": "--nbest",
                "beam": "--beam 0", "precision": "'fp16' needs CUDA"}
    monkeypatch.setattr("sys.stdin", FakeStdin(b"fine\nalso fine\n\xc3\x28 broken\n" if case == "bad_stdin"
                                                else b"a cat\n"))
    extra = {"bad_stdin": [], "bad_file": ["--input", str(bad)], "missing_input": ["--input", str(tmp_path / "no")],
             "missing_checkpoint": [], "output_dir": ["--output", str(tmp_path)], "nbest": ["--nbest", "5"],
             "beam": ["--beam", "0"], "precision": ["--precision", "fp16"]}[case]
    if case == "missing_checkpoint":
        args[2] = str(tmp_path / "none.pt")
    assert run_cli(args + extra, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and expected[case] in err


def test_unwritable_output_is_an_error(checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setattr("sys.stdin", FakeStdin(b"a cat\n"))
    assert run_cli(["translate", "--checkpoint", str(checkpoint), "--output", str(blocker / "out.txt")],
                   monkeypatch) == 2
    assert "not a writable directory" in capsys.readouterr().err


def test_one_settings_value_and_one_request_travel_unchanged_to_the_search(translator: Translator,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import nmt.inference.translator as module
    from nmt.inference.request import DecodeRequest, call_settings

    seen: list[tuple[object, object, object]] = []
    real = module.decode_sources

    def spy(model: Any, sources: Any, settings: Any, runtime: Any, cap: Any, batch_size: Any, progress: Any,
            sampling: Any, *rest: Any) -> Any:
        seen.append((settings, batch_size, sampling))
        return real(model, sources, settings, runtime, cap, batch_size, progress, sampling, *rest)

    monkeypatch.setattr(module, "decode_sources", spy)
    settings = call_settings(translator.config.decode, beam=3, nbest=2)
    request = DecodeRequest(pretokenized=True, batch_size=2)
    stream = list(translator.translate_stream(["a b", "c d e", "f"], 2, settings=settings, request=request))
    assert len(stream) == 3 and all(len(n) == 2 for n in stream)
    assert [s for s, _, _ in seen] == [settings, settings] and all(s is settings for s, _, _ in seen)
    assert {b for _, b, _ in seen} == {2}
    with pytest.raises(NmtError, match="--workers 0 must be at least 1"):
        DecodeRequest(workers=0)
    with pytest.raises(NmtError, match="--batch-size 0 must be at least 1"):
        DecodeRequest(batch_size=0)
    with pytest.raises(NmtError, match="--length-norm fairseq needs --search fairseq"):
        call_settings(translator.config.decode, length_norm="fairseq")
