"""int8 decoding on CPU: dynamic quantization of the Linear layers and of the tied output projection.

``decode.precision: int8`` (``nmt translate --precision int8``) decodes with a copy of the model whose Linear layers
are :class:`~nmt.inference.int8_linear.RowInt8Linear`: weights stored as int8 with one scale per output row,
activations quantized per call and per row (so no row's product depends on its batch), products accumulated
in int32 by torch's quantized kernels. The tied output projection
(``h . w^T + bias`` over the whole vocabulary, the largest matmul of a decoder step) gets the same treatment from the
embedding table as used (unit rows under FixNorm). Everything that is not a matmul with learned weights stays float32:
LayerNorm/ScaleNorm/RMSNorm, the QKNorm scoring (unit-normalized queries and keys times the learned gain g), FixNorm's
normalization, softmax, attention over the cache, the log-softmax that beam search reads. The cross-attention input
projection stays float too: its weight is sliced into the query part (every step) and the key/value part (once per
sentence), which a packed int8 weight cannot be.

The quantized engine is chosen per CPU (:func:`int8_engine`): oneDNN where the CPU has int8 dot-product instructions
(AVX-512 VNNI, AVX-VNNI or AMX-INT8), fbgemm (torch's ``x86`` engine) elsewhere.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from nmt import kernels
from nmt.errors import NmtError
from nmt.inference.int8_linear import RowInt8Linear
from nmt.machine import hardware
from nmt.modules.embeddings import MASKED_LOGIT

INT8 = "int8"
# Linear layers whose weight is sliced by the model instead of called as a module (cross-attention's in_proj)
SLICED_WEIGHTS = ("cross_attn.in_proj",)
# Linear layers whose inputs are never negative (the feed-forward block's second layer, after its ReLU)
NONNEGATIVE_INPUTS = ("ffn.down",)
# CPU flags of int8 dot-product instructions that oneDNN uses (fbgemm covers AVX2 and AVX-512 without them)
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


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
    """The tied output projection ``h . w^T + bias`` with ``w`` quantized to int8 (one scale per vocabulary row),
    packed for the current quantized engine (:func:`quantize_for_decoding` sets it)."""

    def __init__(self, table: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.proj = RowInt8Linear(table, bias)

    def forward(self, h: Tensor, table: Tensor | None = None) -> Tensor:
        """Logits (..., V) of ``h`` (..., D); ``table`` (the float rows) is ignored: the int8 copy is used."""
        return self.proj(h)


def _quantize(module: nn.Module, names: set[str]) -> nn.Module:
    """``module`` with the Linear layers named in ``names`` replaced by int8 ones (in place), packed for the current
    quantized engine."""
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name)
        linear = getattr(parent, child)
        nonnegative = name.endswith(NONNEGATIVE_INPUTS)
        setattr(parent, child, RowInt8Linear(linear.weight, linear.bias, nonnegative=nonnegative))
    return module


def quantize_for_decoding(model: nn.Module) -> nn.Module:
    """An int8 copy of ``model`` (a :class:`~nmt.model.transformer.Transformer` on CPU, in eval mode) for decoding.

    Every Linear layer except those in :data:`SLICED_WEIGHTS` becomes a :class:`RowInt8Linear`, and the tied
    output projection becomes an :class:`Int8Logits`; norms, QKNorm gains, embeddings and positions stay float32.
    """
    if next(model.parameters()).device.type != "cpu":
        raise NmtError("decode precision 'int8' runs on CPU only (use bf16 or fp16 on GPU)")
    names = {name for name, module in model.named_modules()
             if isinstance(module, nn.Linear) and not name.endswith(SLICED_WEIGHTS)}
    torch.backends.quantized.engine = int8_engine()  # packed weights are engine-specific: set before packing
    quantized = kernels.accelerate(_quantize(copy.deepcopy(model), names))
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
    """Whether ``module`` is an int8 Linear layer of int8 decoding."""
    return isinstance(module, RowInt8Linear)
