"""int8 decoding on CPU: dynamic quantization of the Linear layers and of the tied output projection.

``decode.precision: int8`` (``nmt translate --precision int8``) decodes with a copy of the model whose Linear layers
are torch's dynamically quantized ones (``torch.ao.quantization.quantize_dynamic``): weights stored as int8 with one
scale per output row, activations quantized per call, products accumulated in int32. The tied output projection
(``h . w^T + bias`` over the whole vocabulary, the largest matmul of a decoder step) gets the same treatment from the
embedding table as used (unit rows under FixNorm). Everything that is not a matmul with learned weights stays float32:
LayerNorm/ScaleNorm/RMSNorm, the QKNorm scoring (unit-normalized queries and keys times the learned gain g), FixNorm's
normalization, softmax, attention over the cache, the log-softmax that beam search reads. The cross-attention input
projection stays float too: its weight is sliced into the query part (every step) and the key/value part (once per
sentence), which a packed int8 weight cannot be.

The quantized engine is chosen per CPU (:func:`int8_engine`): oneDNN where the CPU has int8 dot-product instructions
(AVX-512 VNNI, AVX-VNNI or AMX-INT8), fbgemm (torch's ``x86`` engine) elsewhere.

``decode.precision: auto`` picks the fastest of fp32, bf16 (only where native, :mod:`nmt.machine.hardware`) and int8 by
:func:`decode_speeds`: a short timing (about a second for the bench model) of the model itself decoding a few
beam-search steps of a probe batch in each arithmetic: encoder, cross-attention keys, every decoder layer, the
output projection and the beams' reordering, so the float work that quantization does not speed up (norms,
attention over the cache, the activations' quantization) is in the comparison. A probe of the matmuls alone picked
int8 on a CPU where bf16 decoded 7% faster end to end. int8 still wins only where it beats the best float
arithmetic by :data:`INT8_MARGIN`, since it costs a little accuracy.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from nmt import kernels
from nmt.errors import NmtError
from nmt.machine import hardware
from nmt.machine.runtime import Precision, choose_precision
from nmt.modules.embeddings import MASKED_LOGIT
from nmt.search.common import Seq2Seq
from nmt.vocab import BOS, EOS, SPECIALS

INT8 = "int8"
# Linear layers whose weight is sliced by the model instead of called as a module (cross-attention's in_proj)
SLICED_WEIGHTS = ("cross_attn.in_proj",)
# CPU flags of int8 dot-product instructions that oneDNN uses (fbgemm covers AVX2 and AVX-512 without them)
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
# the auto probe decodes PROBE_SENTENCES random sources of PROBE_LENGTH pieces at beam PROBE_BEAM for PROBE_STEPS
# steps, the fastest of PROBE_REPEATS timings after a warm-up
PROBE_SENTENCES, PROBE_LENGTH, PROBE_BEAM, PROBE_STEPS = 32, 24, 4, 6
PROBE_REPEATS = 2
INT8_MARGIN = 0.8  # int8's probe time must be below this fraction of the best float arithmetic's


def int8_engine() -> str:
    """The quantized engine for this CPU: ``onednn`` with VNNI/AMX int8 instructions, ``x86`` (fbgemm) otherwise."""
    supported = torch.backends.quantized.supported_engines
    if "onednn" in supported and any(flag in hardware.cpu_flags() for flag in VNNI_FLAGS):
        return "onednn"
    for engine in ("x86", "fbgemm", "qnnpack"):
        if engine in supported:
            return engine
    raise NmtError("decode precision 'int8': this PyTorch build has no quantized CPU engine")


class Int8Logits(nn.Module):
    """The tied output projection ``h . w^T + bias`` with ``w`` quantized to int8 (one scale per vocabulary row)."""

    def __init__(self, table: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        float_linear = nn.Linear(table.size(1), table.size(0), bias=bias is not None)
        with torch.no_grad():
            float_linear.weight.copy_(table)
            if bias is not None:
                float_linear.bias.copy_(bias)
        self.proj = cast(nn.Sequential, _quantize(nn.Sequential(float_linear), {"0"}))[0]

    def forward(self, h: Tensor, table: Tensor | None = None) -> Tensor:
        """Logits (..., V) of ``h`` (..., D); ``table`` (the float rows) is ignored: the int8 copy is used."""
        return self.proj(h)


def _quantize(module: nn.Module, names: set[str]) -> nn.Module:
    """A copy of ``module`` with the Linear layers named in ``names`` dynamically quantized to int8 (per row)."""
    torch.backends.quantized.engine = int8_engine()  # packed weights are engine-specific: set before packing
    spec = {name: torch.ao.quantization.per_channel_dynamic_qconfig for name in names}
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao; the API works as is
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(module, spec, dtype=torch.qint8)  # type: ignore[arg-type]


def quantize_for_decoding(model: nn.Module) -> nn.Module:
    """An int8 copy of ``model`` (a :class:`~nmt.model.transformer.Transformer` on CPU, in eval mode) for decoding.

    Every Linear layer except those in :data:`SLICED_WEIGHTS` becomes a dynamically quantized one, and the tied
    output projection becomes an :class:`Int8Logits`; norms, QKNorm gains, embeddings and positions stay float32.
    """
    if next(model.parameters()).device.type != "cpu":
        raise NmtError("decode precision 'int8' runs on CPU only (use bf16 or fp16 on GPU)")
    names = {name for name, module in model.named_modules()
             if isinstance(module, nn.Linear) and not name.endswith(SLICED_WEIGHTS)}
    # torch's quantization swaps only the exact nn.Linear class: the copy goes plain for it, and back to the wing
    quantized = kernels.accelerate(_quantize(kernels.plain(copy.deepcopy(model)), names))
    quantized.eval()
    embed = getattr(quantized, "embed", None)
    if embed is not None and hasattr(embed, "table"):
        with torch.no_grad():
            bias = getattr(embed, "output_bias", None)
            mask = getattr(embed, "logit_mask", None)
            if bias is not None and mask is not None:  # the target-vocabulary mask, folded in as the float path does
                bias = bias.masked_fill(~mask, MASKED_LOGIT)
            embed.int8_logits = Int8Logits(embed.table().detach().float(), bias)
        # an instance attribute shadows TiedEmbedding.logits: the decoder's output projection now runs in int8
        embed.logits = embed.int8_logits.forward
    return quantized


def is_quantized(module: nn.Module) -> bool:
    """Whether ``module`` is one of torch's dynamically quantized Linear layers."""
    return isinstance(module, torch.ao.nn.quantized.dynamic.Linear)


def _time(run: Callable[[], object]) -> float:
    """The fastest of a few calls of ``run`` in seconds, after a warm-up call."""
    run()
    best = float("inf")
    for _ in range(PROBE_REPEATS):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


@dataclass(frozen=True)
class DecodeSpeeds:
    """Seconds of the probe's decoding steps in each arithmetic that can run fast here (bf16 only if native)."""

    seconds: dict[str, float]

    @property
    def best(self) -> str:
        """fp32 or bf16, whichever is faster; int8 only where it beats that by :data:`INT8_MARGIN`."""
        floats = {name: s for name, s in self.seconds.items() if name != INT8}
        best_float = min(floats, key=floats.__getitem__)
        if INT8 in self.seconds and self.seconds[INT8] < INT8_MARGIN * floats[best_float]:
            return INT8
        return best_float

    @property
    def reason(self) -> str:
        """``decoder-step probe, time relative to fp32: fp32 1.00, bf16 0.62, int8 0.48``."""
        base = self.seconds["fp32"]
        parts = ", ".join(f"{name} {s / base:.2f}" for name, s in self.seconds.items())
        return f"decoder-step probe, time relative to fp32: {parts}"


def _probe_run(model: nn.Module, vocab: int) -> Callable[[], object]:
    """A few beam-search steps of ``model`` (``start``/``step``/``select``) on random sources: start, widen to the
    beam, then steps each followed by a reordering of the beams within their sentences."""
    seeded = torch.Generator().manual_seed(0)  # never the global generator: runs must stay bitwise reproducible
    n, beam = PROBE_SENTENCES, PROBE_BEAM
    src = torch.randint(SPECIALS, vocab, (n, PROBE_LENGTH), generator=seeded)
    src[:, -1] = EOS
    tokens = torch.randint(SPECIALS, vocab, (PROBE_STEPS, n * beam), generator=seeded)
    widen = torch.arange(n).repeat_interleave(beam)
    reorder = (torch.arange(n)[:, None] * beam + torch.arange(beam).flip(0)).view(-1)  # (n, beam) -> (n * beam,)
    decoder = cast("Seq2Seq[Any]", model)

    def run() -> object:
        _, state = decoder.step(torch.full((n,), BOS), decoder.start(src))
        state = state.select(widen)
        for prev in tokens:
            log_probs, state = decoder.step(prev, state)
            state = state.select(reorder)
        return log_probs

    return run


def decode_speeds(model: nn.Module, vocab: int) -> DecodeSpeeds:
    """Time the probe's steps (:func:`_probe_run`) of the float32 ``model`` (CPU, eval mode, ``vocab`` pieces) in
    fp32, bf16 autocast (if native) and as its int8 copy."""
    candidates: dict[str, tuple[nn.Module, bool]] = {"fp32": (model, False)}
    if hardware.bf16_support().native:
        candidates["bf16"] = (model, True)
    candidates[INT8] = (quantize_for_decoding(model), False)
    seconds: dict[str, float] = {}
    with torch.no_grad():
        for name, (decoder, bf16) in candidates.items():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                seconds[name] = _time(_probe_run(decoder, vocab))
    return DecodeSpeeds(seconds)


def choose_decode_precision(name: str, device: torch.device, setting: str = "decode.precision",
                            model: nn.Module | None = None, vocab: int = 0) -> Precision:
    """:func:`nmt.machine.runtime.choose_precision` for decoding, which also knows ``int8`` (CPU only).

    ``auto`` on a CPU is the fastest arithmetic for ``model`` (of ``vocab`` pieces) by :func:`decode_speeds`
    (fp32 without a model); on other devices it is as for training.
    """
    if name == INT8:
        if device.type != "cpu":
            raise NmtError(f"{setting} 'int8' runs on CPU only; use bf16 or fp16 on {device.type}")
        return Precision(INT8, f"set by {setting}; {int8_engine()} engine")
    if name != "auto" or device.type != "cpu":
        return choose_precision(name, device, setting)
    if model is None:
        return Precision("fp32", "auto: no model to probe")
    speeds = decode_speeds(model, vocab)
    chosen = speeds.best
    engine = f", {int8_engine()} engine" if chosen == INT8 else ""
    return Precision(chosen, f"auto: {speeds.reason}{engine}")
