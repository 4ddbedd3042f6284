"""Convert the official model's tensors into ours (and back), name by name.

Public API (stable; used by the model, schedule and search checks):

- :func:`parameter_map` -- ``parameter_map(d_model, enc_layers, dec_layers, pre, qknorm) -> list[Entry]``: every
  (our name, official name, row slice) pair, the whole mapping in one readable table.
- :func:`official_to_ours` -- ``official_to_ours(tensors, entries) -> dict``: official name -> tensor (parameters,
  gradients, Adam moments) to our names. Token rows are permuted, language rows picked, fused projections sliced.
- :func:`ours_to_official` -- the inverse (our tensors into the official layout).
- :func:`convert_model` -- ``convert_model(official_model, our_model, logit_mask=None)``: load the official
  weights (and the official target logit mask, if given) into our model, strictly.
- :func:`token_permutation`, :func:`to_official_ids`, :func:`to_our_ids` -- the two vocabularies differ only in the
  order of the four specials (official PAD 0, BOS 1, EOS 2, UNK 3; ours PAD 0, UNK 1, BOS 2, EOS 3).
- :func:`mask_to_ours` -- an official per-language logit mask (uint8/bool over official ids) as our bool mask.

The mapping (``L`` = layer, ``d`` = d_model; official norms are ``scales[k]`` in sublayer order, then the final one):

=========================================  ================================================  ======================
ours                                       official                                          how
=========================================  ================================================  ======================
embed.weight / embed.output_bias           word_embedding / out_bias                         token rows permuted
embed.lang_embedding [0], [1]              lang_embedding [SRC_LANG_IDX], [TGT_LANG_IDX]     rows picked
embed.logit_mask (buffer)                  data_manager.logit_masks[tgt] (passed to forward)  token rows permuted
{enc,dec}.layers.L.self_attn.in_proj       {enc,dec}oder.atts.L.weights/biases [0:3d]         q, k, v rows
{enc,dec}.layers.L.self_attn.out_proj      {enc,dec}oder.atts.L.weights/biases [3d:4d]        o rows
decoder.layers.L.cross_attn.*              decoder.cross_atts.L.* (same slicing)
*.scoring.gain (QKNorm g)                  *.mha_scale.scale                                 scalar
{enc,dec}.layers.L.ffn.up / down           *.ffs.L.in_proj / out_proj
encoder.layers.L.attn_res / ffn_res .norm  encoder.scales.[2L] / [2L+1]
decoder.layers.L.self_res/cross_res/ffn_res  decoder.scales.[3L] / [3L+1] / [3L+2]
{enc,dec}oder.final_norm (PreNorm only)    {enc,dec}oder.scales.[-1]
=========================================  ================================================  ======================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from fidelity.official import SRC_LANG_IDX, TGT_LANG_IDX
from nmt import vocab

# official special ids (all_constants.py)
OFFICIAL_PAD, OFFICIAL_BOS, OFFICIAL_EOS, OFFICIAL_UNK = 0, 1, 2, 3
_SPECIALS_OURS_TO_OFFICIAL = {vocab.PAD: OFFICIAL_PAD, vocab.UNK: OFFICIAL_UNK, vocab.BOS: OFFICIAL_BOS,
                              vocab.EOS: OFFICIAL_EOS}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One tensor of ours and where it lives in the official model.

    Attributes:
        ours: our state_dict name.
        official: the official state_dict name.
        rows: slice of the official tensor's first dimension (fused projections), or None for all of it.
        kind: ``"tensor"`` (as is), ``"tokens"`` (rows permuted by vocabulary) or ``"lang"`` (rows picked).
    """

    ours: str
    official: str
    rows: slice | None = None
    kind: str = "tensor"


def token_permutation(vocab_size: int) -> Tensor:
    """``perm`` with ``ours[i] == official[perm[i]]`` for every token-indexed row."""
    perm = torch.arange(vocab_size)
    for our_id, official_id in _SPECIALS_OURS_TO_OFFICIAL.items():
        perm[our_id] = official_id
    return perm


def to_official_ids(ids: Tensor) -> Tensor:
    """Our token ids as official ids (same shape)."""
    out = ids.clone()
    for our_id, official_id in _SPECIALS_OURS_TO_OFFICIAL.items():
        out[ids == our_id] = official_id
    return out


def to_our_ids(ids: Tensor) -> Tensor:
    """Official token ids as ours (same shape)."""
    out = ids.clone()
    for our_id, official_id in _SPECIALS_OURS_TO_OFFICIAL.items():
        out[ids == official_id] = our_id
    return out


def mask_to_ours(mask: Tensor) -> Tensor:
    """An official logit mask (1 = kept, over official ids) as our bool mask over our ids."""
    return mask.bool()[token_permutation(mask.numel())]


def _attention(ours: str, official: str, d: int, qknorm: bool) -> list[Entry]:
    entries = [
        Entry(f"{ours}.in_proj.weight", f"{official}.weights", slice(0, 3 * d)),
        Entry(f"{ours}.in_proj.bias", f"{official}.biases", slice(0, 3 * d)),
        Entry(f"{ours}.out_proj.weight", f"{official}.weights", slice(3 * d, 4 * d)),
        Entry(f"{ours}.out_proj.bias", f"{official}.biases", slice(3 * d, 4 * d)),
    ]
    if qknorm:
        entries.append(Entry(f"{ours}.scoring.gain", f"{official}.mha_scale.scale"))
    return entries


def _ffn(ours: str, official: str) -> list[Entry]:
    return [Entry(f"{ours}.{a}.{p}", f"{official}.{b}.{p}")
            for a, b in (("up", "in_proj"), ("down", "out_proj")) for p in ("weight", "bias")]


def _norm(ours: str, official: str, norm_params: tuple[str, ...]) -> list[Entry]:
    return [Entry(f"{ours}.{p}", f"{official}.{p}") for p in norm_params]


def parameter_map(
    d_model: int, enc_layers: int, dec_layers: int, pre: bool, qknorm: bool, scalenorm: bool = False,
    lang_embedding: bool = True,
) -> list[Entry]:
    """Every parameter of ours with its official source (see the module docstring's table)."""
    norm_params = ("scale",) if scalenorm else ("weight", "bias")
    d = d_model
    entries = [Entry("embed.weight", "word_embedding", kind="tokens"),
               Entry("embed.output_bias", "out_bias", kind="tokens")]
    if lang_embedding:
        entries.append(Entry("embed.lang_embedding", "lang_embedding", kind="lang"))
    for i in range(enc_layers):
        ours, off = f"encoder.layers.{i}", "encoder"
        entries += _attention(f"{ours}.self_attn", f"{off}.atts.{i}", d, qknorm)
        entries += _ffn(f"{ours}.ffn", f"{off}.ffs.{i}")
        entries += _norm(f"{ours}.attn_res.norm", f"{off}.scales.{2 * i}", norm_params)
        entries += _norm(f"{ours}.ffn_res.norm", f"{off}.scales.{2 * i + 1}", norm_params)
    for i in range(dec_layers):
        ours, off = f"decoder.layers.{i}", "decoder"
        entries += _attention(f"{ours}.self_attn", f"{off}.atts.{i}", d, qknorm)
        entries += _attention(f"{ours}.cross_attn", f"{off}.cross_atts.{i}", d, qknorm)
        entries += _ffn(f"{ours}.ffn", f"{off}.ffs.{i}")
        for k, site in enumerate(("self_res", "cross_res", "ffn_res")):
            entries += _norm(f"{ours}.{site}.norm", f"{off}.scales.{3 * i + k}", norm_params)
    if pre:
        entries += _norm("encoder.final_norm", f"encoder.scales.{2 * enc_layers}", norm_params)
        entries += _norm("decoder.final_norm", f"decoder.scales.{3 * dec_layers}", norm_params)
    return entries


def official_to_ours(tensors: Mapping[str, Tensor], entries: list[Entry]) -> dict[str, Tensor]:
    """Official name -> tensor (parameters, gradients or optimizer moments) as our name -> tensor (copies, same
    dtype)."""
    out: dict[str, Tensor] = {}
    for e in entries:
        t = tensors[e.official].detach()
        if e.rows is not None:
            t = t[e.rows]
        if e.kind == "tokens":
            t = t[token_permutation(t.size(0))]
        elif e.kind == "lang":
            t = t[[SRC_LANG_IDX, TGT_LANG_IDX]]
        out[e.ours] = t.clone()
    return out


def ours_to_official(tensors: Mapping[str, Tensor], entries: list[Entry], official_shapes: Mapping[str, torch.Size],
                     ) -> dict[str, Tensor]:
    """Our name -> tensor into the official layout; official tensors not covered (other language rows) stay 0."""
    dtype = next(iter(tensors.values())).dtype
    out = {name: torch.zeros(shape, dtype=dtype) for name, shape in official_shapes.items()
           if any(e.official == name for e in entries)}
    for e in entries:
        t = tensors[e.ours].detach()
        target = out[e.official]
        if e.kind == "tokens":
            target[token_permutation(t.size(0))] = t
        elif e.kind == "lang":
            target[[SRC_LANG_IDX, TGT_LANG_IDX]] = t
        elif e.rows is not None:
            target[e.rows] = t
        else:
            target.copy_(t)
    return out


def entries_for(model: nn.Module) -> list[Entry]:
    """The :func:`parameter_map` for our built model (shape read from its modules)."""
    from nmt.model.transformer import Transformer
    from nmt.modules.attention import QKNorm
    from nmt.modules.norms import ScaleNorm

    if not isinstance(model, Transformer):
        raise TypeError("expected nmt.model.transformer.Transformer")
    enc = model.encoder.blocks
    dec = model.decoder.blocks
    return parameter_map(
        d_model=enc[0].self_attn.d_model, enc_layers=len(enc), dec_layers=len(dec),
        pre=not isinstance(model.encoder.final_norm, nn.Identity),
        qknorm=isinstance(enc[0].self_attn.scoring, QKNorm),
        scalenorm=isinstance(enc[0].attn_res.norm, ScaleNorm),
        lang_embedding=getattr(model.embed, "lang_embedding", None) is not None,
    )


def convert_model(official: nn.Module, ours: nn.Module, logit_mask: Tensor | None = None) -> None:
    """Load the official model's weights into ``ours`` (built with the same shape), strictly.

    Args:
        official: the official ``Transformer``.
        ours: our :class:`~nmt.model.transformer.Transformer`.
        logit_mask: the official target-language logit mask (over official ids); required when ``ours`` has a
            ``embed.logit_mask`` buffer.

    Raises:
        KeyError: a tensor of ours has no official source or the other way round.
    """
    entries = entries_for(ours)
    state = official_to_ours(dict(official.named_parameters()), entries)
    if "embed.logit_mask" in ours.state_dict():
        if logit_mask is None:
            raise KeyError("our model has a logit mask: pass the official one (logit_mask=...)")
        state["embed.logit_mask"] = mask_to_ours(logit_mask)
    unused = set(dict(official.named_parameters())) - {e.official for e in entries}
    if unused:
        raise KeyError(f"official parameters without a counterpart in ours: {sorted(unused)}")
    ours.load_state_dict(state, strict=True)
