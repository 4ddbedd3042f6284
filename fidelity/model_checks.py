"""Differential model checks: the official model and ours, same weights, same batch, dropout off, fp32 on CPU.

For each system (:data:`SYSTEMS`) at the gl-en and en-vi paper shapes (layers, heads, QKNorm's L and the pair
config's options; small widths for speed) the official ``Transformer`` is built by its own code, its weights are
converted into ours (:func:`fidelity.convert.convert_model`), and on one padded batch with a random target logit
mask we compare, as the normwise relative error ``||ours - official||_2 / ||official||_2`` per tensor:

- ``encoder output`` and ``logits`` through our training path (explicit attention, QKNorm's hand-written backward);
- ``loss`` (summed label-smoothed loss) and ``nll``;
- ``grad``: every parameter's gradient of the per-token loss (worst parameter named);
- ``adam step``: every parameter after one Adam step with gradient-norm clipping, and ``adam update`` (the step's
  change itself, a stricter test than the parameters);
- the fast paths: ``sdpa encoder output`` and ``sdpa logits`` (``F.scaled_dot_product_attention``, eval mode) and
  ``cached log-probs`` (incremental decoding with the KV cache, one position at a time, teacher-forced).

Masked logits are compared on their own (the official -1e9 against ours), so they do not swamp the relative error.
The non-QKNorm systems are compared with the TwT code (the fork's parent, whose positions are the intended ones),
QKNorm with the QKNorm fork (positions patched, see :mod:`fidelity.official`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fidelity import Row
from fidelity.convert import convert_model, entries_for, mask_to_ours, official_to_ours, to_our_ids
from fidelity.official import SRC_LANG_IDX, TGT_LANG_IDX, Official, build_official, load, official_args
from nmt import kernels
from nmt.config import Config, load_config
from nmt.model.spec import ModelSpec
from nmt.model.transformer import Transformer, build_model
from nmt.training.loss import label_smoothed_nll
from nmt.training.optim import build_optimizer
from nmt.vocab import PAD

REPO_ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("postnorm_layernorm", "prenorm_layernorm", "prenorm_fixnorm_layernorm", "prenorm_fixnorm_scalenorm",
           "qknorm")
# shape -> (our config, the official configurations.py function, QKNorm's L in that function)
SHAPES: dict[str, tuple[str, str, float]] = {"gl-en": ("gl-en.yaml", "gl2en", 79.0),
                                             "en-vi": ("en-vi.yaml", "en2vi", 72.0)}
TOLERANCE = 1e-5
TOLERANCE_FP64 = 1e-9
LR = 1e-3  # large enough that the Adam step moves every parameter visibly
OFFICIAL_PAD, OFFICIAL_BOS, OFFICIAL_EOS, OFFICIAL_UNK = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class Setting:
    """Sizes of one comparison (the paper shapes keep their layers and heads; widths are small for speed).

    Keep ``d_model / n_heads >= 8``: with 4-dimensional heads QKNorm's float32 gradients are so ill-conditioned that
    the official code's own float32 gradients differ from its float64 ones by 2.6e-5 (normwise), above the 1e-5
    tolerance, whoever computes them.
    """

    d_model: int = 128
    d_ff: int = 256
    vocab: int = 96
    src_lengths: tuple[int, ...] = (11, 7, 9, 4)
    tgt_lengths: tuple[int, ...] = (8, 10, 5, 6)
    seed: int = 0


@functools.cache
def _fork(name: str) -> Official:
    return load(name)


def our_config(system: str, shape: str, setting: Setting) -> Config:
    """The pair's paper config with ``system``, small widths, dropout off and the official QKNorm L."""
    path, _, length = SHAPES[shape]
    overrides = [f"system={system}", f"model.d_model={setting.d_model}", f"model.d_ff={setting.d_ff}",
                 f"model.qknorm_length={length}", "model.dropout=0.0", "model.attn_dropout=0.0",
                 "model.act_dropout=0.0", "model.word_dropout=0.0", "model.max_positions=128"]
    return load_config(REPO_ROOT / "configs" / path, overrides)


def _batch(setting: Setting, keep: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """Official-id source (tokens + EOS), target input (BOS + tokens) and targets (tokens + EOS), right-padded.

    Target tokens are drawn from the kept types (as in training, where the mask is the targets' own types)."""
    kept = keep.nonzero().flatten()
    kept = kept[kept != OFFICIAL_EOS]
    B = len(setting.src_lengths)
    src = torch.full((B, max(setting.src_lengths)), OFFICIAL_PAD)
    tgt = torch.full((B, max(setting.tgt_lengths)), OFFICIAL_PAD)
    targets = tgt.clone()
    for i, (s, t) in enumerate(zip(setting.src_lengths, setting.tgt_lengths, strict=True)):
        src[i, : s - 1] = torch.randint(OFFICIAL_UNK, setting.vocab, (s - 1,), generator=gen)
        src[i, s - 1] = OFFICIAL_EOS
        body = kept[torch.randint(0, kept.numel(), (t - 1,), generator=gen)]
        tgt[i, 0] = OFFICIAL_BOS
        tgt[i, 1:t] = body
        targets[i, : t - 1] = body
        targets[i, t - 1] = OFFICIAL_EOS
    return src, tgt, targets


def _random_mask(vocab: int, gen: torch.Generator) -> Tensor:
    """An official-style logit mask (uint8 over official ids): UNK, EOS and about 2/3 of the other types."""
    mask = (torch.rand(vocab, generator=gen) < 2 / 3).to(torch.uint8)
    mask[[OFFICIAL_PAD, OFFICIAL_BOS]] = 0
    mask[[OFFICIAL_UNK, OFFICIAL_EOS]] = 1
    return mask


def rel(ours: Tensor, official: Tensor, floor: float = 0.0) -> float:
    """Normwise relative error ``||ours - official||_2 / max(||official||_2, floor)`` (the difference itself when
    the denominator is 0)."""
    ours, official = ours.detach().double(), official.detach().double()
    diff = float((ours - official).norm())
    scale = max(float(official.norm()), floor)
    return diff / scale if scale > 0 else diff


def _worst(ours: dict[str, Tensor], official: dict[str, Tensor], floor: float = 0.0) -> tuple[float, str]:
    """The largest per-tensor :func:`rel` and its tensor."""
    errors = {name: rel(ours[name], reference, floor) for name, reference in official.items()}
    name = max(errors, key=lambda n: errors[n])
    return errors[name], name


@dataclasses.dataclass
class _Run:
    """What one model produced on the batch (our names, our token order)."""

    encoder: Tensor
    logits: Tensor  # (N, V)
    loss: Tensor
    nll: Tensor
    grads: dict[str, Tensor]
    before: dict[str, Tensor]
    after: dict[str, Tensor]


def _run_official(model: Any, batch: tuple[Tensor, Tensor, Tensor], mask: Tensor, clip: float,
                  to_ours: Callable[[Mapping[str, Tensor]], dict[str, Tensor]]) -> _Run:
    """Forward (capturing the encoder output and the masked logits), backward, clip, one Adam step, as
    ``controller.run_log`` does; ``model`` is the official (untyped) ``Transformer``."""
    captured: dict[str, Tensor] = {}
    hook = model.encoder.register_forward_hook(lambda m, i, out: captured.__setitem__("encoder", out.detach()))
    logit_fn = model.logit_fn

    def capture_logits(*args: Tensor) -> Tensor:
        out: Tensor = logit_fn(*args)
        captured["logits"] = out.detach().clone()
        return out

    model.logit_fn = capture_logits
    model.train()
    src, tgt, targets = (t.clone() for t in batch)
    ret = model(src, tgt, targets, SRC_LANG_IDX, TGT_LANG_IDX, mask)
    hook.remove()
    del model.logit_fn
    ret["opt_loss"].backward()
    params = dict(model.named_parameters())
    grads = to_ours({n: p.grad for n, p in params.items() if p.grad is not None})
    before = to_ours(params)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)  # controller.py: Adam(lr), clip, step
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    after = to_ours(dict(model.named_parameters()))
    perm = to_our_ids(torch.arange(mask.numel()))
    logits = torch.empty_like(captured["logits"])
    logits[:, perm] = captured["logits"]  # official column j is our column perm[j]
    return _Run(captured["encoder"], logits, ret["loss"].detach(), ret["nll_loss"].detach(), grads, before, after)


def _run_ours(model: Transformer, config: Config, src: Tensor, tgt_in: Tensor, tgt_out: Tensor,
              step_with: dict[str, Tensor] | None) -> _Run:
    """Forward, backward, then one clipped Adam step from our gradients, or from ``step_with`` if given."""
    captured: dict[str, Tensor] = {}
    hook = model.encoder.register_forward_hook(lambda m, i, out: captured.__setitem__("encoder", out.detach()))
    model.train()
    logits = model(src, tgt_in)
    hook.remove()
    loss, nll = label_smoothed_nll(logits, tgt_out, config.train.label_smoothing, model.logit_mask)
    (loss / tgt_out.ne(PAD).sum()).backward()
    params = dict(model.named_parameters())
    grads = {n: p.grad.detach().clone() for n, p in params.items() if p.grad is not None}
    before = {n: p.detach().clone() for n, p in params.items()}
    if step_with is not None:
        for name, p in params.items():
            p.grad = step_with[name].to(p.dtype).clone()
    optimizer = build_optimizer(model, config.train)
    for group in optimizer.param_groups:
        group["lr"] = LR
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.clip_norm)
    optimizer.step()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    return _Run(captured["encoder"], logits.detach().flatten(0, 1), loss.detach(), nll.detach(), grads, before, after)


@torch.no_grad()
def _fast_paths(model: Transformer, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Encoder output and logits through the fused attention path, and the cached step-by-step log-probs."""
    model.eval()
    memory, _ = model.encode(src)
    logits = model(src, tgt_in)
    state = model.start(src)
    steps = []
    for t in range(tgt_in.size(1)):
        log_probs, state = model.step(tgt_in[:, t], state)
        steps.append(log_probs)
    return memory, logits.flatten(0, 1), torch.stack(steps, 1).flatten(0, 1)


def _masked_rows(ours: Tensor, official: Tensor, keep: Tensor, rows: Tensor) -> tuple[float, float]:
    """Relative error on the kept columns, and on the masked ones (official -1e9 or log-prob ~ -1e9)."""
    kept = rel(ours[rows][:, keep], official[rows][:, keep])
    masked = rel(ours[rows][:, ~keep], official[rows][:, ~keep]) if (~keep).any() else 0.0
    return kept, masked


def _models(system: str, shape: str, setting: Setting, dtype: torch.dtype
            ) -> tuple[Config, torch.nn.Module, Transformer, Tensor, Official]:
    config = our_config(system, shape, setting)
    fork = _fork("qknorm" if system == "qknorm" else "twt")
    configuration = SHAPES[shape][1] if fork.fork == "qknorm" else "base"
    args = official_args(fork, config, setting.vocab, configuration=configuration)
    if not (args.mask_logit and config.model.lang_embedding):
        raise ValueError(f"{shape}: the paper config must enable model.logit_mask and model.lang_embedding")
    official = build_official(fork, args, seed=setting.seed).to(dtype)
    mask = _random_mask(setting.vocab, torch.Generator().manual_seed(setting.seed))
    spec = ModelSpec.resolve(config.model, setting.vocab, None)
    ours = kernels.accelerate(build_model(config.model, spec))  # the model the trainer trains
    convert_model(official, ours, logit_mask=mask)
    ours.to(dtype)
    if dtype == torch.float64:  # the official table is computed in float32 (angles included); use it as is
        table = fork.utils.get_positional_encoding(setting.d_model, ours.max_positions)
        ours.embed.positions.copy_(table)
    return config, official, ours, mask, fork


def compare(system: str, shape: str, setting: Setting = Setting(), dtype: torch.dtype = torch.float32) -> list[Row]:
    """Every row of one system at one shape.

    In float32 the Adam step starts from the official gradients on both sides (``adam step``): Adam's first step
    ``lr * g / (|g| + 1e-8)`` turns round-off in gradients that are mathematically zero (e.g. the key biases of
    scaled dot-product attention) into O(lr) differences, so from each side's own gradients it is compared in
    float64 (``adam update``), where that round-off is far below Adam's epsilon. float32 gradients are relative to
    each tensor's norm, or to 1e-3 of the largest gradient-tensor norm when larger: scalar gains (QKNorm's g,
    ScaleNorm's g) are sums with heavy cancellation whose float32 round-off exceeds 1e-5 of their own size in the
    official code itself (measured against its float64 run); float64 ones are plainly relative.
    """
    wide = dtype == torch.float64
    config, official, ours, mask, _ = _models(system, shape, setting, dtype)
    entries = entries_for(ours)
    keep = mask_to_ours(mask)
    batch = _batch(setting, mask.bool(), torch.Generator().manual_seed(setting.seed + 1))
    src, tgt_in, tgt_out = (to_our_ids(t) for t in batch)

    fast_memory, fast_logits, cached = _fast_paths(ours, src, tgt_in)
    theirs = _run_official(official, batch, mask, config.train.clip_norm,
                           lambda d: {k: v.to(dtype) for k, v in official_to_ours(d, entries).items()})
    mine = _run_ours(ours, config, src, tgt_in, tgt_out, None if wide else theirs.grads)

    real = tgt_out.flatten().ne(PAD)
    every = torch.ones_like(real)
    official_lp = F.log_softmax(theirs.logits, dim=-1)
    rows: list[tuple[str, float, str]] = [("encoder output", rel(mine.encoder, theirs.encoder), "")]
    kept, masked = _masked_rows(mine.logits, theirs.logits, keep, every)
    rows += [("logits", kept, f"masked logits {masked:.1e}")]
    rows += [("loss", rel(mine.loss, theirs.loss), f"{float(theirs.loss):.4f}"),
             ("nll", rel(mine.nll, theirs.nll), f"{float(theirs.nll):.4f}")]
    largest = max(float(g.double().norm()) for g in theirs.grads.values())
    error, name = _worst(mine.grads, theirs.grads, 0.0 if wide else 1e-3 * largest)
    rows += [("grad", error, f"{len(theirs.grads)} tensors, worst {name}")]
    error, name = _worst(mine.after, theirs.after)
    rows += [("adam step" if not wide else "adam step (own grads)", error, f"worst {name}")]
    if wide:
        update_ours = {n: mine.after[n] - mine.before[n] for n in mine.after}
        update_theirs = {n: theirs.after[n] - theirs.before[n] for n in theirs.after}
        error, name = _worst(update_ours, update_theirs)
        rows += [("adam update (own grads)", error, f"worst {name}")]
    rows += [("sdpa encoder output", rel(fast_memory, theirs.encoder), "")]
    kept, masked = _masked_rows(fast_logits, theirs.logits, keep, every)
    rows += [("sdpa logits", kept, f"masked logits {masked:.1e}")]
    kept, masked = _masked_rows(cached, official_lp, keep, real)
    rows += [("cached log-probs", kept, f"masked {masked:.1e}")]
    suffix, tolerance = (" fp64", TOLERANCE_FP64) if wide else ("", TOLERANCE)
    return [Row(system, shape + suffix, quantity, error, tolerance, note) for quantity, error, note in rows]


def init_row(system: str, shape: str, setting: Setting = Setting()) -> Row:
    """Initialization: the official model and ours, each initialized by its own code (different random draws).

    Constant tensors (biases, norm gains, QKNorm's g0 = log2(L^2 - L), ScaleNorm's sqrt(d)) must be equal; random
    ones must have the same standard deviation: the z-score ``|s_ours - s_official| / (s_official / sqrt(2 n))``
    (n elements; the standard error of a normal sample's standard deviation) must stay below 5 for every tensor, a
    false alarm rate of ~1e-4 over 200 tensors, while a 10% error in a 64 x 64 weight gives z ~ 9. The error is the
    worst z over all tensors (an unequal constant counts as infinite).
    """
    config = our_config(system, shape, setting)
    fork = _fork("qknorm" if system == "qknorm" else "twt")
    configuration = SHAPES[shape][1] if fork.fork == "qknorm" else "base"
    official = build_official(fork, official_args(fork, config, setting.vocab, configuration=configuration),
                              seed=setting.seed)
    torch.manual_seed(setting.seed + 1)
    ours = build_model(config.model, ModelSpec.resolve(config.model, setting.vocab, None))
    theirs = official_to_ours(dict(official.named_parameters()), entries_for(ours))
    worst, where = 0.0, ""
    for name, reference in theirs.items():
        mine = dict(ours.named_parameters())[name].detach()
        if reference.numel() == 1 or float(reference.std()) == 0.0:
            z = 0.0 if torch.equal(mine, reference) else float("inf")
        else:
            n = reference.numel()
            z = abs(float(mine.std()) - float(reference.std())) / (float(reference.std()) * (2 * n) ** -0.5)
        if z >= worst:
            worst, where = z, name
    return Row(system, shape, "init (std z-score)", worst, 5.0, f"{len(theirs)} tensors, worst {where}")


def run(quick: bool = False) -> list[Row]:
    """All systems at both shapes (``quick``: narrower models, for the test suite)."""
    setting = Setting(d_model=64, d_ff=64, vocab=48) if quick else Setting()
    rows = []
    for system in SYSTEMS:
        for shape in SHAPES:
            rows.append(init_row(system, shape, setting))
            for dtype in (torch.float32, torch.float64):
                rows += compare(system, shape, setting, dtype)
    return rows
