"""Build the papers' official model from a throwaway, run-time-patched copy of ``../shared/reference``.

The official code (QKNorm: github.com/CyndxAI/QKNorm, a fork of TwT: github.com/tnq177/transformers_without_tears)
is never copied into the project. :func:`load` copies one fork into a temporary directory, applies the patches in
:data:`PATCHES` to the copy, imports its flat modules (``model``, ``layers``, ``utils``, ...) and re-registers them
under a unique prefix (``_official_<fork>_<n>.<name>``), so both forks and our own modules coexist in one process.

Public API (stable; ``fidelity/schedule_checks.py`` and ``fidelity/search_checks.py`` build on it):

- :func:`reference_dir` -- where the official code lives, or None (``$NMT_REFERENCE_DIR`` or ``../shared/reference``).
- :func:`load` -- ``load(fork="qknorm", modules=DEFAULT_MODULES) -> Official``: the patched, imported modules.
- :func:`official_args` -- ``official_args(official, config, vocab_size, *, configuration="base", lang_vocab_size=2,
  **overrides) -> argparse.Namespace``: the args namespace the official ``Transformer`` reads, derived from one of
  our :class:`~nmt.config.Config` (architecture, dropout, smoothing, decoding) on top of one of the official
  ``configurations.py`` functions (schedule fields stay as in that function unless overridden).
- :func:`build_official` -- ``build_official(official, args, seed=0) -> torch.nn.Module``: the official Transformer,
  in fp32 on CPU, initialized by its own code under ``torch.manual_seed(seed)``.
- :data:`SRC_LANG_IDX`, :data:`TGT_LANG_IDX` -- the language indices our checks give the official model.

Patches (each must apply exactly once, else :class:`PatchError`):

- QKNorm fork ``utils.py``: positions use ``sin`` on both halves (a bug of the fork; TwT and the papers use ``cos`` on
  odd dimensions). The copy is patched to ``cos`` so the comparison tests the intended encoding, which we implement.

Nothing else is needed: the official model builds, trains one step and beam-decodes unmodified on CPU under current
torch (its ``.cuda`` use is conditional on ``torch.cuda.is_available()``; see ``docs/fidelity.md``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch

from nmt.config import Config

REPO_ROOT = Path(__file__).resolve().parents[1]
FORKS = ("qknorm", "twt")
DEFAULT_MODULES = ("all_constants", "utils", "layers", "model", "configurations")
SRC_LANG_IDX = 0
TGT_LANG_IDX = 1

# fork -> [(file, exact text, replacement)]
PATCHES: dict[str, list[tuple[str, str, str]]] = {
    "qknorm": [
        ("utils.py", "encoded_vec[:, 1::2] = torch.sin(encoded_vec[:, 1::2])",
         "encoded_vec[:, 1::2] = torch.cos(encoded_vec[:, 1::2])"),
    ],
    "twt": [],
}

_counter = itertools.count()


class PatchError(RuntimeError):
    """A run-time patch no longer matches the official code exactly once."""


@dataclasses.dataclass(frozen=True)
class Official:
    """One imported fork: its modules by their official names, and the temporary copy they were loaded from."""

    fork: str
    modules: dict[str, types.ModuleType]
    path: Path

    def __getattr__(self, name: str) -> types.ModuleType:
        try:
            return self.modules[name]
        except KeyError:
            raise AttributeError(name) from None


def reference_dir() -> Path | None:
    """The folder holding ``qknorm/`` and ``twt/``: ``$NMT_REFERENCE_DIR``, else ``<repo>/../shared/reference``."""
    env = os.environ.get("NMT_REFERENCE_DIR")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "reference"
    return path if (path / "qknorm" / "model.py").is_file() and (path / "twt" / "model.py").is_file() else None


def _patched_copy(fork: str, source: Path) -> Path:
    target = Path(tempfile.mkdtemp(prefix=f"official_{fork}_")) / fork
    shutil.copytree(source, target)
    for name, old, new in PATCHES[fork]:
        path = target / name
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise PatchError(f"{fork}/{name}: expected exactly one occurrence of {old!r}, found {text.count(old)}")
        path.write_text(text.replace(old, new), encoding="utf-8")
    return target


def load(fork: str = "qknorm", modules: tuple[str, ...] = DEFAULT_MODULES) -> Official:
    """Copy, patch and import one fork's modules (e.g. add ``"controller"`` for the schedule; it seeds torch).

    Raises:
        FileNotFoundError: no official code (see :func:`reference_dir`).
        ValueError: unknown fork.
    """
    if fork not in FORKS:
        raise ValueError(f"unknown fork {fork!r} (valid: {', '.join(FORKS)})")
    root = reference_dir()
    if root is None:
        raise FileNotFoundError("official code not found: set NMT_REFERENCE_DIR or provide ../shared/reference")
    path = _patched_copy(fork, root / fork)
    flat = sorted(p.stem for p in path.glob("*.py"))
    saved = {name: sys.modules.pop(name) for name in flat if name in sys.modules}
    prefix = f"_official_{fork}_{next(_counter)}"
    sys.path.insert(0, str(path))
    loaded: dict[str, types.ModuleType] = {}
    try:
        for name in modules:
            loaded[name] = importlib.import_module(name)
        for name in flat:  # also dependencies imported along the way
            if name in sys.modules:
                loaded.setdefault(name, sys.modules[name])
    finally:
        sys.path.remove(str(path))
        for name in flat:
            module = sys.modules.pop(name, None)
            if module is not None:
                sys.modules[f"{prefix}.{name}"] = module
        sys.modules.update(saved)
    return Official(fork, loaded, path)


def official_args(
    official: Official,
    config: Config,
    vocab_size: int,
    *,
    configuration: str = "base",
    lang_vocab_size: int = 2,
    **overrides: Any,
) -> argparse.Namespace:
    """The official args namespace for the model our ``config`` describes.

    Args:
        official: a loaded fork.
        config: our config; its model section fixes the architecture, dropout rates and QKNorm's L, its train
            section the label smoothing, its decode section beam size and length penalty.
        vocab_size: joint vocabulary size (the same for both models).
        configuration: the official ``configurations.py`` function to start from (``base``, ``gl2en``, ``en2vi``...).
        lang_vocab_size: rows of the official language embedding.
        overrides: final values for any official key (e.g. ``mask_logit=False``).
    """
    m = config.model
    if m.enc_layers < 1 or m.dec_layers < 1:
        raise ValueError("the official model needs at least one encoder and one decoder layer")
    settings: dict[str, Any] = getattr(official.configurations, configuration)()
    settings.update(
        embed_dim=m.d_model, ff_dim=m.d_ff, num_enc_layers=m.enc_layers, num_dec_layers=m.dec_layers,
        num_heads=m.n_heads, use_bias=True, fix_norm=m.fixnorm, scnorm=m.norm == "scalenorm",
        pre_act=m.norm_position == "pre", mask_logit=getattr(m, "logit_mask", True),
        dropout=m.dropout, att_dropout=m.attn_dropout, ff_dropout=m.act_dropout, word_dropout=m.word_dropout,
        label_smoothing=config.train.label_smoothing, clip_grad=config.train.clip_norm,
        beam_size=config.decode.beam, beam_alpha=config.decode.lenpen,
        joint_vocab_size=vocab_size, lang_vocab_size=lang_vocab_size,
    )
    if official.fork == "qknorm":
        settings.update(mha_sup=m.attention == "qknorm", seq_len_threshold=m.qknorm_length)
    elif m.attention != "scaled_dot":
        raise ValueError(f"the twt fork has no {m.attention} attention")
    if m.norm not in ("layernorm", "scalenorm"):
        raise ValueError(f"the official model has no {m.norm}")
    settings.update(overrides)
    return argparse.Namespace(**settings)


def build_official(official: Official, args: argparse.Namespace, seed: int = 0) -> torch.nn.Module:
    """The official ``Transformer(args)`` in fp32, initialized by its own code under ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    model: torch.nn.Module = official.model.Transformer(args)
    return model.float()
