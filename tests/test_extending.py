"""The how-to of ``docs/design.md`` ("Adding a variant"), run: each toy variant is one class (or function) plus one
registry line, and then a config can name it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from nmt import config
from nmt.config import config_from_dict
from nmt.model.spec import ModelSpec
from nmt.model.transformer import build_model
from nmt.modules.attention import ATTENTIONS, Scoring
from nmt.modules.norms import NORMS
from nmt.training.optim import SCHEDULES, LRController
from nmt.vocab import BOS, EOS
from tests.synthetic import prepare_synthetic, tiny_config

TINY = {"enc_layers": 2, "dec_layers": 2, "d_model": 16, "d_ff": 32, "n_heads": 2, "max_positions": 32}
V = 20


class CenterNorm(nn.Module):
    """A toy norm: subtract the mean over the last dimension (no scaling)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model

    def forward(self, x: Tensor) -> Tensor:
        return x - x.mean(-1, keepdim=True)


class HalfScaled(Scoring):
    """A toy scorer: plain dot products at a fixed logit scale of 1/2."""

    scale = 0.5


def halving(step: int, peak: float, warmup: int, multiplier: float = 1.0) -> float:
    """A toy schedule: ``peak`` halved every ``warmup`` steps."""
    return peak * 0.5 ** (step // max(warmup, 1))


def _translate_one(model: nn.Module) -> Tensor:
    src = torch.tensor([[5, 6, 7, EOS]])
    return model(src, torch.tensor([[BOS, 8, 9]]))


def test_adding_a_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(config.NmtError, match="'model.norm': 'centernorm' is not one of layernorm"):
        config_from_dict({"model": {**TINY, "norm": "centernorm"}})
    monkeypatch.setitem(NORMS, "centernorm", CenterNorm)  # the registry line
    cfg = config_from_dict({"model": {**TINY, "norm": "centernorm", "attention": "scaled_dot"}})
    model = build_model(cfg.model, ModelSpec(V))
    assert any(isinstance(m, CenterNorm) for m in model.modules())
    assert _translate_one(model).shape == (1, 3, V)


def test_adding_an_attention_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ATTENTIONS, "half_scaled", HalfScaled)
    cfg = config_from_dict({"model": {**TINY, "attention": "half_scaled"}})
    model = build_model(cfg.model, ModelSpec(V))  # no QKNorm length needed: HalfScaled.needs_length is False
    scorers = [attn.scoring for attn in model.attention_modules().values()]
    assert len(scorers) == 6 and all(isinstance(s, HalfScaled) for s in scorers)
    model.eval()
    state = model.start(torch.tensor([[5, 6, 7, EOS]]))
    log_probs, _ = model.step(torch.tensor([BOS]), state)  # incremental decoding works through the new scorer
    full = torch.log_softmax(_translate_one(model)[:, 0].float(), dim=-1)
    torch.testing.assert_close(log_probs, full, atol=1e-5, rtol=1e-5)


def test_adding_a_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SCHEDULES, "halving", halving)
    cfg = config_from_dict({"train": {"schedule": "halving", "lr": 1e-3, "warmup_steps": 10}})
    lr = LRController(cfg.train, d_model=16)
    assert [lr.lr(step) for step in (1, 10, 25)] == [1e-3, 5e-4, 2.5e-4]


def test_adding_a_language_pair(tmp_path: Path) -> None:
    """A pair is data plus a config: ``nmt prepare xx-yy --from-dir DIR`` and ``data.pair: xx-yy``."""
    from nmt.training.data import load_training_data

    data_dir = prepare_synthetic(tmp_path)
    cfg = config_from_dict(tiny_config(data_dir, tmp_path / "run"))
    data = load_training_data(cfg)
    assert len(data.train) > 0 and data.spec.vocab_size <= 64
    model = build_model(cfg.model, data.spec)
    assert model.qknorm_gains()  # the data's length L initialised QKNorm


def test_adding_a_decoding_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoding rule is its module (a beam search with the rule sets' signature and a greedy rule) plus one line in
    ``SEARCHES``; then ``decode.search`` and ``nmt translate --search`` accept it (their choices come from there)."""
    from nmt import cli
    from nmt.checkpoint.files import model_payload, save_checkpoint
    from nmt.config import DecodeConfig, choices, config_to_dict
    from nmt.data.bpe import SentencePieceTokenizer
    from nmt.search import SEARCHES, Hypothesis, Seq2Seq, official

    calls: list[int] = []

    def counting_beam_search(model: Seq2Seq[Any], src: Tensor, settings: DecodeConfig,
                             max_len_cap: int | None) -> list[list[Hypothesis]]:
        """The toy rule: the papers' beam search, counted."""
        calls.append(settings.beam)
        return official.official_beam_search(model, src, settings, max_len_cap)

    with pytest.raises(config.NmtError, match="'decode.search': 'counting' is not one of official"):
        config_from_dict({"decode": {"search": "counting"}})
    monkeypatch.setitem(SEARCHES, "counting", (counting_beam_search, official.greedy_rule))  # the registry line
    assert "counting" in choices(DecodeConfig, "search")
    data_dir = prepare_synthetic(tmp_path)
    cfg = config_from_dict(tiny_config(data_dir, tmp_path / "run"), ["decode.search=counting"])
    tokenizer = SentencePieceTokenizer(data_dir / "xx-yy" / "spm.model")
    torch.manual_seed(0)
    spec = ModelSpec(tokenizer.vocab_size, 20.0)
    model = build_model(cfg.model, spec)
    checkpoint = tmp_path / "model.pt"
    save_checkpoint(checkpoint, model_payload(model.state_dict(), config_to_dict(cfg), tokenizer.model_bytes(),
                                              spec.payload()))
    source = tmp_path / "in.txt"
    source.write_text("a b c\nd e\n", encoding="utf-8")
    outputs = {}
    for rule in ("counting", "official"):
        out = tmp_path / f"{rule}.txt"
        assert cli.main(["translate", "--path", str(checkpoint), "--search", rule, "--pretokenized", "--input",
                         str(source), "--output", str(out), "-q"]) == 0
        outputs[rule] = out.read_text(encoding="utf-8")
    assert calls and outputs["counting"] == outputs["official"]  # the toy rule ran, and it is the papers' search


def test_adding_a_corpus_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A corpus source is its loader (with its own download and checksums where it has any) plus one line in
    ``SOURCES`` saying which pairs it serves; then ``nmt prepare PAIR`` takes those pairs from it."""
    from nmt.data import corpora
    from nmt.data.prepare import prepare
    from tests.synthetic import write_corpus

    folder = write_corpus(tmp_path / "toy-corpus", {"train": 300, "dev": 10, "test": 10}, "xx", "zz")
    requests: list[corpora.Request] = []

    def load_toy(request: corpora.Request) -> corpora.Corpus:
        """The toy loader: a local folder (a real one downloads and checks its archive: nmt/data/download.py)."""
        requests.append(request)
        return corpora.load_dir(folder, request.src, request.tgt)

    assert corpora.source_for("xx", "zz") == "ted"
    monkeypatch.setitem(corpora.SOURCES, "toy", corpora.Source(load_toy, lambda src, tgt: {src, tgt} == {"xx", "zz"}))
    assert corpora.source_for("xx", "zz") == "toy" and corpora.source_for("gl", "en") == "ted"
    meta = prepare("xx-zz", tmp_path / "data", bpe_size=40, progress=False)
    assert [(r.src, r.tgt) for r in requests] == [("xx", "zz")]
    assert meta["source"] == "toy" and meta["splits"]["train"]["lines"] == 300
