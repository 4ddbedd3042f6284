"""The encoder-decoder Transformer, its incremental-decoding state, and :func:`build_model`.

``build_model`` is the only reader of :class:`~nmt.config.ModelConfig`; every module below takes plain arguments.
Contracts (``forward``, ``start``/``step``/``select``, ``qknorm_gains``, ``attention_maps``) are in
``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import ModelConfig
from nmt.model.decoder_state import CACHE_GROW, DecoderState
from nmt.model.incremental import decoder_layer_step
from nmt.model.spec import ModelSpec
from nmt.modules.attention import ATTENTIONS, MultiHeadAttention, QKNorm, pad_keys, pads_keys
from nmt.modules.embeddings import TiedEmbedding
from nmt.modules.feedforward import FeedForward
from nmt.modules.layers import DecoderLayer, EncoderLayer, Residual
from nmt.modules.norms import NORMS
from nmt.vocab import PAD

# Where attention sits, by kind (the keys of ``attention_maps``): kind -> (stack, attribute of its layers). Every
# attention module is named ``{stack}.{layer}.{attribute}`` (``attention_modules``, ``qknorm_gains``); the names are
# written here only, read back with ``attention_site``/``site_of``.
ATTENTION_SITES: dict[str, tuple[str, str]] = {"encoder": ("encoder", "self_attn"), "decoder": ("decoder", "self_attn"),
                                               "cross": ("decoder", "cross_attn")}


def attention_site(kind: str, layer: int) -> str:
    """The name of layer ``layer``'s attention of ``kind`` (a key of :data:`ATTENTION_SITES`)."""
    stack, attribute = ATTENTION_SITES[kind]
    return f"{stack}.{layer}.{attribute}"


def site_of(name: str) -> tuple[str, int] | None:
    """``(kind, layer)`` of an attention module's name (:func:`attention_site`'s inverse); None for other names."""
    parts = name.split(".")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    kind = next((k for k, site in ATTENTION_SITES.items() if site == (parts[0], parts[2])), None)
    return (kind, int(parts[1])) if kind is not None else None


def padding_mask(src: Tensor) -> Tensor | None:
    """Boolean key mask (B, 1, 1, S), True = real token; None when ``src`` has no PAD (keeps fused kernels fast).

    A row that is entirely PAD attends to all its positions rather than to none, so no softmax row is empty (NaN).
    """
    pad = src.eq(PAD)
    # A data-dependent branch breaks compiled graphs, and on a GPU reading pad.any() would stall the host once per
    # forward: there the mask is always built (the kernels give the same result with an all-True mask).
    if src.device.type == "cpu" and not torch.compiler.is_compiling() and not bool(pad.any()):
        return None
    keep = ~pad | pad.all(-1, keepdim=True)
    return keep[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


class Encoder(nn.Module):
    """A stack of encoder layers, with a final norm under PreNorm (``nn.Identity`` under PostNorm)."""

    def __init__(self, layers: list[EncoderLayer], final_norm: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    @property
    def blocks(self) -> list[EncoderLayer]:
        """The layers, typed."""
        return typing.cast("list[EncoderLayer]", list(self.layers))

    def forward(self, x: Tensor, mask: Tensor | None, records: list[list[Tensor]] | None = None) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, None if records is None else records[i])
        return self.final_norm(x)


class Decoder(nn.Module):
    """A stack of decoder layers, with a final norm under PreNorm (``nn.Identity`` under PostNorm)."""

    def __init__(self, layers: list[DecoderLayer], final_norm: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    @property
    def blocks(self) -> list[DecoderLayer]:
        """The layers, typed."""
        return typing.cast("list[DecoderLayer]", list(self.layers))

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        records: list[tuple[list[Tensor], list[Tensor]]] | None = None,
    ) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, src_mask, None if records is None else records[i])
        return self.final_norm(x)


class Transformer(nn.Module):
    """Encoder-decoder Transformer over one joint vocabulary with tied embeddings.

    Args:
        embed: the shared token embedding (inputs of both sides and the output projection).
        encoder: the encoder stack.
        decoder: the decoder stack.
    """

    def __init__(self, embed: TiedEmbedding, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        self.embed = embed
        self.encoder = encoder
        self.decoder = decoder

    @property
    def logit_mask(self) -> Tensor | None:
        """The target-vocabulary mask (V,) bool (True = may be predicted), or None when the model has none."""
        return self.embed.logit_mask

    @property
    def max_positions(self) -> int:
        """Longest source or target sequence (in tokens, BOS included) the position table covers."""
        return int(self.embed.positions.size(0))

    def encode(self, src: Tensor, table: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Encode ``src`` (B, S); returns the memory (B, S, D) and the source key mask (B, 1, 1, S) or None."""
        mask = padding_mask(src)
        return self.encoder(self.embed(src, table, side=0), mask), mask

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Logits (B, T, V) for target inputs ``tgt_in`` (B, T, starting with BOS) given ``src`` (B, S)."""
        table = self.embed.table()
        memory, src_mask = self.encode(src, table)
        h = self.decoder(self.embed(tgt_in, table, side=1), memory, src_mask)
        return self.embed.logits(h, table)

    @torch.no_grad()
    def start(self, src: Tensor) -> DecoderState:
        """Encode ``src`` (N, S) and precompute every layer's cross-attention keys/values; empty self cache."""
        memory, src_mask = self.encode(src)
        memory_kv = torch.stack(
            [torch.stack(layer.cross_attn.project_memory(memory)) for layer in self.decoder.blocks]
        )  # L x 2 x (N, H, S, D/H) -> (L, 2, N, H, S, D/H)
        if pads_keys(memory):  # a sentence's cross-attention sums round the same in any batch (pad_keys)
            src_mask, (memory_kv,) = pad_keys(src_mask, src.size(0), memory_kv)
        return DecoderState.empty(memory_kv, src_mask, min(CACHE_GROW, self.embed.positions.size(0)))

    @torch.no_grad()
    def step(self, prev: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Decode one position: ``prev`` (N,) is the previous token (BOS at step 0).

        Returns:
            log-probabilities (N, V) of the next token in float32 (float64 for a float64 model), and the advanced
            state.
        """
        state = state.advanced()
        t = state.length
        table = self.embed.table()
        x = self.embed(prev[:, None], table, offset=t, side=1)  # (N,) -> (N, 1, D)
        visible = state.visible()
        for i, layer in enumerate(self.decoder.blocks):
            x = decoder_layer_step(layer, x, state.self_kv[i], visible, t, state.memory_kv[i, 0],
                                   state.memory_kv[i, 1], state.src_mask, state.place)
        logits = self.embed.logits(self.decoder.final_norm(x[:, 0]), table)
        state = dataclasses.replace(state, length=t + 1)
        # the float32 result straight from bf16 logits (bitwise the same as casting first, without the copy)
        return F.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)), state

    def attention_modules(self) -> dict[str, MultiHeadAttention]:
        """Every attention module by name (:func:`attention_site`): ``encoder.{i}.self_attn``,
        ``decoder.{i}.self_attn|cross_attn``."""
        stacks: dict[str, list[EncoderLayer] | list[DecoderLayer]] = {"encoder": self.encoder.blocks,
                                                                      "decoder": self.decoder.blocks}
        return {attention_site(kind, i): getattr(layer, attribute)
                for kind, (stack, attribute) in ATTENTION_SITES.items() for i, layer in enumerate(stacks[stack])}

    def qknorm_gains(self) -> dict[str, float]:
        """The learned QKNorm gain g of every attention module (empty when not using QKNorm)."""
        return {
            name: float(attn.scoring.gain.detach())
            for name, attn in self.attention_modules().items()
            if isinstance(attn.scoring, QKNorm)
        }

    @torch.no_grad()
    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> dict[str, list[Tensor]]:
        """Attention weights through the explicit path: keys ``encoder``, ``decoder``, ``cross``, each a list of
        one (B, H, Tq, Tk) float32 tensor per layer."""
        table = self.embed.table()
        enc_records: list[list[Tensor]] = [[] for _ in self.encoder.layers]
        dec_records: list[tuple[list[Tensor], list[Tensor]]] = [([], []) for _ in self.decoder.layers]
        src_mask = padding_mask(src)
        memory = self.encoder(self.embed(src, table, side=0), src_mask, enc_records)
        self.decoder(self.embed(tgt_in, table, side=1), memory, src_mask, dec_records)
        return {
            "encoder": [r[0] for r in enc_records],
            "decoder": [r[0][0] for r in dec_records],
            "cross": [r[1][0] for r in dec_records],
        }


def _small_init(model: Transformer) -> None:
    """SmallInit (arXiv 1910.05895): attention N(0, sqrt(2/(5d))), feed-forward N(0, sqrt(2/(d+d_ff))), biases 0."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            std = math.sqrt(2.0 / (5 * module.d_model))
            linears = [module.in_proj, module.out_proj]
        elif isinstance(module, FeedForward):
            std = math.sqrt(2.0 / (module.up.in_features + module.up.out_features))
            linears = [module.up, module.down]
        else:
            continue
        for linear in linears:
            nn.init.normal_(linear.weight, 0.0, std)
            nn.init.zeros_(linear.bias)


def _xavier_init(model: Transformer) -> None:
    """Xavier-uniform weights (each of q, k, v initialized as its own d x d matrix), biases 0."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            for weight in [*module.in_proj.weight.chunk(3), module.out_proj.weight]:
                nn.init.xavier_uniform_(weight)
            linears = [module.in_proj, module.out_proj]
        elif isinstance(module, FeedForward):
            linears = [module.up, module.down]
            for linear in linears:
                nn.init.xavier_uniform_(linear.weight)
        else:
            continue
        for linear in linears:
            nn.init.zeros_(linear.bias)


INITS: dict[str, Callable[[Transformer], None]] = {"smallinit": _small_init, "xavier": _xavier_init}


def build_model(cfg: ModelConfig, spec: ModelSpec) -> Transformer:
    """Build the plain Transformer described by ``cfg`` for the data described by ``spec``.

    Args:
        cfg: the model section of the config.
        spec: the vocabulary size, QKNorm's L (used only by scorers with ``needs_length``) and, with
            ``cfg.logit_mask``, the target types that may be predicted (None leaves every type allowed until a
            checkpoint's buffer is loaded), resolved once by :meth:`~nmt.model.spec.ModelSpec.resolve` or read from
            a checkpoint by :meth:`~nmt.model.spec.ModelSpec.from_payload`.

    The trainer and :func:`nmt.inference.restore.restore_model` then apply :func:`nmt.kernels.accelerate`.

    Raises:
        NmtError: QKNorm is selected but ``spec`` has no length.
    """
    d, pre = cfg.d_model, cfg.norm_position == "pre"
    norm, scoring = NORMS[cfg.norm], ATTENTIONS[cfg.attention]
    length = spec.length_for(cfg.attention) if scoring.needs_length else None

    def attention() -> MultiHeadAttention:
        return MultiHeadAttention(d, cfg.n_heads, scoring(d // cfg.n_heads, length), cfg.attn_dropout)

    def residual() -> Residual:
        return Residual(norm(d), cfg.dropout, pre)

    def ffn() -> FeedForward:
        return FeedForward(d, cfg.d_ff, cfg.act_dropout)

    def final_norm() -> nn.Module:
        return norm(d) if pre else nn.Identity()

    encoder = Encoder([EncoderLayer(attention(), ffn(), residual(), residual()) for _ in range(cfg.enc_layers)],
                      final_norm())
    decoder = Decoder(
        [DecoderLayer(attention(), attention(), ffn(), residual(), residual(), residual())
         for _ in range(cfg.dec_layers)],
        final_norm(),
    )
    embed = TiedEmbedding(spec.vocab_size, d, cfg.fixnorm, cfg.max_positions, cfg.dropout, cfg.word_dropout,
                          cfg.lang_embedding, cfg.logit_mask)
    if cfg.logit_mask and spec.logit_mask is not None:
        embed.set_logit_mask(spec.logit_mask)
    model = Transformer(embed, encoder, decoder)
    INITS[cfg.init](model)
    return model
