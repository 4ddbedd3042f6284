"""int8 decoding: the Linear layers and the tied output projection are quantized, norms and QKNorm stay float, a
trained model translates (nearly) as in fp32, ``auto`` follows the probe, and the precision is said."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmt.checkpoint.files import load_checkpoint
from nmt.config import DecodeConfig
from nmt.errors import NmtError
from nmt.inference import int8, precision
from nmt.inference.int8 import int8_engine, is_quantized, quantize_for_decoding
from nmt.inference.precision import DecodeSpeeds, choose_decode_precision
from nmt.inference.restore import restore_model
from nmt.inference.translator import Translator
from nmt.model.spec import ModelSpec
from nmt.model.transformer import Transformer
from nmt.modules.embeddings import TiedEmbedding
from nmt.vocab import BOS, EOS, PAD, SPECIALS
from tests.test_translate import run_cli, tiny_checkpoint

CPU = torch.device("cpu")


def copy_task_model(directory: Path) -> Translator:
    """A tiny QKNorm + FixNorm model trained for a few hundred steps to copy its source (seconds on one core)."""
    path = tiny_checkpoint(directory, "copy.pt", d_model=32, d_ff=64, n_heads=2, fixnorm=True, attention="qknorm",
                           dropout=0.0, word_dropout=0.0)
    model, config, tokenizer = restore_model(load_checkpoint(path), CPU, path=path)
    net = model.train()
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    vocab = tokenizer.vocab_size
    for _ in range(300):
        src = torch.randint(SPECIALS, vocab, (32, 6), generator=generator)
        tgt_in = torch.cat([torch.full((32, 1), BOS), src], dim=1)
        tgt_out = torch.cat([src, torch.full((32, 1), EOS)], dim=1)
        logits = net(torch.cat([src, torch.full((32, 1), EOS)], dim=1), tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return Translator(net.eval(), config, tokenizer, CPU, precision="fp32")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    return copy_task_model(tmp_path_factory.mktemp("int8"))


def test_int8_quantizes_linears_and_output_but_keeps_norms_and_qknorm_float(trained: Translator) -> None:
    int8 = Translator(trained.model, trained.config, trained.tokenizer, CPU, precision="int8")
    assert int8.precision == "int8" and int8.model is not trained.model
    model = int8.model
    assert isinstance(model, Transformer)
    names = {name for name, module in model.named_modules() if is_quantized(module)}
    blocks = len(model.encoder.blocks) + len(model.decoder.blocks)
    assert {n for n in names if n.endswith(("ffn.up", "ffn.down"))}.__len__() == 2 * blocks
    assert all(f"decoder.blocks.{i}.cross_attn.in_proj" not in names for i in range(len(model.decoder.blocks)))
    assert "embed.int8_logits.proj" in names
    assert not any(isinstance(module, nn.Linear) and not is_quantized(module) and "cross_attn.in_proj" not in name
                   for name, module in model.named_modules())
    # every remaining parameter (norm gains, QKNorm's g, the embedding table, biases of sliced layers) is float32
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.qknorm_gains() and model.qknorm_gains() == trained.model.qknorm_gains()  # type: ignore[attr-defined]
    # the caller's model is untouched: still float Linear layers and the float output projection
    assert not any(is_quantized(module) for module in trained.model.modules())  # type: ignore[attr-defined]
    assert "logits" not in vars(trained.model.embed)  # type: ignore[attr-defined]


def test_int8_output_projection_is_close_to_the_float_one(trained: Translator) -> None:
    embed = trained.model.embed  # type: ignore[attr-defined]
    assert isinstance(embed, TiedEmbedding)
    int8 = quantize_for_decoding(trained.model)  # type: ignore[arg-type]
    h = torch.randn(16, embed.weight.size(1), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact, approx = embed.logits(h), int8.embed.logits(h)  # type: ignore[operator, union-attr]
    assert exact.shape == approx.shape
    assert not torch.equal(exact, approx)  # really another arithmetic
    error = (exact - approx).abs().max()
    assert error < 0.05 * exact.abs().max()
    # the top token is kept wherever the float one leads by more than the int8 error can close (a random row may
    # hold a near-tie, which any rounding may flip)
    top = exact.topk(2, dim=-1).values
    clear = top[:, 0] - top[:, 1] > 2 * error
    assert int(clear.sum()) >= 4
    assert torch.equal(exact.argmax(-1)[clear], approx.argmax(-1)[clear])


def test_int8_translation_matches_fp32_on_a_trained_model(trained: Translator) -> None:
    int8 = Translator(trained.model, trained.config, trained.tokenizer, CPU, precision="int8")
    vocab = trained.tokenizer.vocab_size
    src = torch.randint(SPECIALS, vocab, (24, 6), generator=torch.Generator().manual_seed(5)).tolist()
    full, quant = trained.translate_ids(src, beam=3), int8.translate_ids(src, beam=3)
    copied = sum(f[0].tokens == s for f, s in zip(full, src, strict=True))
    assert copied >= len(src) * 3 // 4  # the model learned to copy: the comparison means something
    same = sum(f[0].tokens == q[0].tokens for f, q in zip(full, quant, strict=True))
    assert same >= len(src) - 2
    assert any(f[0].logprob != q[0].logprob for f, q in zip(full, quant, strict=True))
    # 0.5 nats: on AVX2-only CPUs (no VNNI) fbgemm's int8 products are coarser; one of these 23 sentences moved by
    # 0.36 on an AMD EPYC of that class (the rest by < 0.05)
    assert all(abs(f[0].logprob - q[0].logprob) < 0.5 for f, q in zip(full, quant, strict=True)
               if f[0].tokens == q[0].tokens)


def test_engine_follows_the_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(int8.hardware, "cpu_flags", lambda: frozenset({"avx2", "avx512_vnni"}))
    assert int8_engine() == "onednn"
    monkeypatch.setattr(int8.hardware, "cpu_flags", lambda: frozenset({"avx2"}))
    assert int8_engine() in ("x86", "fbgemm")


def test_auto_picks_int8_only_when_clearly_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DecodeSpeeds({"fp32": 1.0, "bf16": 0.5, "int8": 0.45}).best == "bf16"  # not 20% faster than bf16
    assert DecodeSpeeds({"fp32": 1.0, "bf16": 0.5, "int8": 0.3}).best == "int8"
    assert DecodeSpeeds({"fp32": 1.0, "int8": 1.2}).best == "fp32"
    assert DecodeSpeeds({"fp32": 1.0, "int8": 0.5}).best == "int8"
    speeds = DecodeSpeeds({"fp32": 2.0, "int8": 1.0})
    monkeypatch.setattr(precision, "decode_speeds", lambda model, vocab: speeds)
    chosen = choose_decode_precision("auto", CPU, model=nn.Linear(2, 2), vocab=8)
    assert chosen.name == "int8"
    assert chosen.reason.startswith("auto: decoder-step probe, time relative to fp32: fp32 1.00, int8 0.50")
    assert choose_decode_precision("fp32", CPU).name == "fp32"


def test_real_probe_decodes_with_the_model_in_every_candidate(tmp_path: Path) -> None:
    model, _, tokenizer = restore_model(load_checkpoint(tiny_checkpoint(tmp_path)), CPU)
    speeds = precision.decode_speeds(model.eval(), tokenizer.vocab_size)
    assert {"fp32", "int8"} <= set(speeds.seconds) and all(s > 0 for s in speeds.seconds.values())
    assert speeds.best in speeds.seconds
    assert not any(is_quantized(m) for m in model.modules())  # the probe's int8 copy leaves the model float


def test_int8_needs_a_cpu() -> None:
    with pytest.raises(NmtError, match="int8' runs on CPU only"):
        choose_decode_precision("int8", torch.device("cuda"))


def test_config_and_cli_accept_int8_and_say_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert DecodeConfig(precision="int8").precision == "int8"
    checkpoint = tiny_checkpoint(tmp_path)
    src = tmp_path / "in.txt"
    src.write_text("the cat sat .\n\na dog ran .\n", encoding="utf-8")
    assert run_cli(["translate", "--checkpoint", str(checkpoint), "--device", "cpu", "--input", str(src),
                    "--precision", "int8", "--pretokenized"], monkeypatch) == 0
    captured = capsys.readouterr()
    assert "precision int8 (set by decode precision;" in captured.err
    assert len(captured.out.split("\n")) == 4 and captured.out.split("\n")[1] == ""


def test_int8_output_projection_keeps_the_target_vocabulary_mask() -> None:
    from nmt.config import ModelConfig
    from nmt.model.transformer import build_model

    cfg = ModelConfig(enc_layers=1, dec_layers=1, d_model=32, d_ff=64, n_heads=2, logit_mask=True,
                      attention="scaled_dot")
    keep = torch.ones(40, dtype=torch.bool)
    keep[10:20] = False
    model = build_model(cfg, ModelSpec(40, logit_mask=keep)).eval()
    int8 = quantize_for_decoding(model)
    h = torch.randn(3, 32)
    logits = int8.embed.logits(h)
    assert bool((logits[:, ~keep] <= -1e8).all()) and bool((logits[:, keep].abs() < 1e3).all())
    assert torch.equal(logits.argmax(-1), model.embed.logits(h).argmax(-1))
