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

``decode.precision: auto`` picks the fastest of fp32, bf16 (only where native, :mod:`nmt.hardware`) and int8 by
:func:`decode_speeds`: one short timing (tens of milliseconds, once per process, on one thread) of a decoder step's
matmuls at a beam-search batch in each arithmetic. int8 wins only where its measured time beats the others by
:data:`INT8_MARGIN`, since end-to-end decoding also pays float work that quantization does not speed up.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from nmt import hardware
from nmt.errors import NmtError
from nmt.modules.embeddings import MASKED_LOGIT
from nmt.runtime import Precision, choose_precision

INT8 = "int8"
# Linear layers whose weight is sliced by the model instead of called as a module (cross-attention's in_proj)
SLICED_WEIGHTS = ("cross_attn.in_proj",)
# CPU flags of int8 dot-product instructions that oneDNN uses (fbgemm covers AVX2 and AVX-512 without them)
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
# a decoder step at beam 4 x ~32 sentences: (rows, in, out) of its matmuls (self-attention in/out, FFN up/down,
# the output projection over a 4k vocabulary), for the auto probe
PROBE_SHAPES = ((128, 256, 768), (128, 256, 256), (128, 256, 1024), (128, 1024, 256), (128, 256, 4000))
PROBE_REPEATS = 5
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
    """An int8 copy of ``model`` (a :class:`~nmt.model.Transformer` on CPU, in eval mode) for decoding.

    Every Linear layer except those in :data:`SLICED_WEIGHTS` becomes a dynamically quantized one, and the tied
    output projection becomes an :class:`Int8Logits`; norms, QKNorm gains, embeddings and positions stay float32.
    """
    if next(model.parameters()).device.type != "cpu":
        raise NmtError("decode precision 'int8' runs on CPU only (use bf16 or fp16 on GPU)")
    names = {name for name, module in model.named_modules()
             if isinstance(module, nn.Linear) and not name.endswith(SLICED_WEIGHTS)}
    quantized = _quantize(model, names)
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
    """Seconds of one probe decoder step's matmuls in each arithmetic that can run fast here (bf16 only if native)."""

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
        """``probe: step matmuls fp32 1.00, bf16 0.62, int8 0.48 (relative time)``."""
        base = self.seconds["fp32"]
        parts = ", ".join(f"{name} {s / base:.2f}" for name, s in self.seconds.items())
        return f"decoder-step probe, time relative to fp32: {parts}"


@functools.cache
def decode_speeds() -> DecodeSpeeds:
    """Time :data:`PROBE_SHAPES` once per process, on one thread, in fp32, bf16 (if native) and int8."""
    seeded = torch.Generator().manual_seed(0)  # never the global generator: runs must stay bitwise reproducible
    layers = nn.Sequential(*[nn.Linear(d_in, d_out) for _, d_in, d_out in PROBE_SHAPES]).eval()
    inputs = [torch.randn(rows, d_in, generator=seeded) for rows, d_in, _ in PROBE_SHAPES]
    int8 = _quantize(layers, {str(i) for i in range(len(PROBE_SHAPES))})

    def run(stack: nn.Module) -> Callable[[], object]:
        return lambda: [layer(x) for layer, x in zip(stack.children(), inputs, strict=True)]

    candidates = {"fp32": (layers, False)}
    if hardware.bf16_support().native:
        candidates["bf16"] = (layers, True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    seconds: dict[str, float] = {}
    try:
        with torch.no_grad():
            for name, (stack, bf16) in candidates.items():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    seconds[name] = _time(run(stack))
            seconds[INT8] = _time(run(int8))
    finally:
        torch.set_num_threads(threads)
    return DecodeSpeeds(seconds)


def choose_decode_precision(name: str, device: torch.device, setting: str = "decode.precision") -> Precision:
    """:func:`nmt.runtime.choose_precision` for decoding, which also knows ``int8`` (CPU only).

    ``auto`` on a CPU is the fastest arithmetic by :func:`decode_speeds`; on other devices it is as for training.
    """
    if name == INT8:
        if device.type != "cpu":
            raise NmtError(f"{setting} 'int8' runs on CPU only; use bf16 or fp16 on {device.type}")
        return Precision(INT8, f"set by {setting}; {int8_engine()} engine")
    if name != "auto" or device.type != "cpu":
        return choose_precision(name, device, setting)
    speeds = decode_speeds()
    chosen = speeds.best
    engine = f", {int8_engine()} engine" if chosen == INT8 else ""
    return Precision(chosen, f"auto: {speeds.reason}{engine}")
