"""Typed, frozen configuration: ``data``, ``model``, ``train`` and ``decode`` sections loaded from YAML.

Defaults live only in the dataclass fields below. Loading is strict: unknown keys, wrong types and values outside
a ``Literal`` are :class:`~nmt.errors.NmtError` naming the dotted key and the valid choices. Overrides use dotted
keys (``train.lr=5e-4``) and are parsed as YAML scalars.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml

from nmt.errors import NmtError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable  # Python >= 3.11; annotations only

RESOLVED_KEY = "resolved"  # the section of a run's config.yaml that records values measured on the data



@dataclass(frozen=True)
class Registry:
    """The valid values of a config choice: the keys of the registry dict ``module.name`` (e.g. ``NORMS``), read when
    a value is checked, so that a new variant is one class plus one registry line and this module does not import
    torch before a config names one."""

    module: str
    name: str

    def choices(self) -> list[str]:
        return list(getattr(importlib.import_module(self.module), self.name))


NormName = Annotated[str, Registry("nmt.modules.norms", "NORMS")]
NormPosition = Literal["pre", "post"]
AttentionName = Annotated[str, Registry("nmt.modules.attention", "ATTENTIONS")]
InitName = Literal["smallinit", "xavier"]
ScheduleName = Annotated[str, Registry("nmt.training.optim", "SCHEDULES")]
PrecisionName = Literal["auto", "fp32", "bf16", "fp16"]
SearchName = Annotated[str, Registry("nmt.search", "SEARCHES")]
LengthNormName = Annotated[str, Registry("nmt.search.common", "LENGTH_NORMS")]
DecodePrecisionName = Literal["auto", "fp32", "bf16", "fp16", "int8"]  # int8: nmt/inference/int8.py, CPU only
DeviceName = Literal["auto", "cpu", "cuda", "mps"]
SystemName = Literal[
    "custom",
    "postnorm_layernorm",
    "prenorm_layernorm",
    "prenorm_fixnorm_layernorm",
    "prenorm_fixnorm_scalenorm",
    "qknorm",
]


@dataclass(frozen=True)
class DataConfig:
    """Where the prepared corpus lives and how it was segmented."""

    pair: str = "gl-en"
    data_dir: str = "data"
    bpe_size: int = 8000
    max_len: int = 250  # training pairs with more subwords on either side are skipped (and counted)
    keep_partial: bool = False  # TED: strip NULL markers and keep the rest instead of the official drop rule
    bpe_dropout: float = 0.0  # training: each epoch's pieces sampled, every BPE merge skipped with this probability


@dataclass(frozen=True)
class ModelConfig:
    """Transformer shape and normalization choices (read only by :func:`nmt.model.transformer.build_model`)."""

    enc_layers: int = 6
    dec_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8
    dropout: float = 0.3
    attn_dropout: float = 0.0
    act_dropout: float = 0.0
    word_dropout: float = 0.1
    norm: NormName = "layernorm"
    norm_position: NormPosition = "pre"
    fixnorm: bool = True
    init: InitName = "smallinit"
    attention: AttentionName = "qknorm"
    qknorm_length: float | None = None  # L for g0 = log2(L^2 - L); None: the prepared data's 97.5th percentile
    max_positions: int = 1024
    lang_embedding: bool = False  # official models: a learned embedding per side added to every input token
    logit_mask: bool = False  # official models: only types seen on the training target side (+UNK, EOS) predicted


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, schedule, stopping, checkpoints and logging."""

    save_dir: str = "runs/default"
    seed: int = 1
    device: DeviceName = "auto"
    precision: PrecisionName = "auto"
    max_tokens: int = 4096
    update_freq: int = 1
    schedule: ScheduleName = "warmup_plateau"
    lr: float | None = None  # peak rate; None: d_model^-0.5 * warmup_steps^-0.5
    warmup_steps: int = 8000
    decay: float = 0.8
    patience: int = 3
    stop_lr: float = 1e-5
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    clip_norm: float = 1.0
    label_smoothing: float = 0.1
    max_steps: int = 0  # 0: no limit
    max_epochs: int = 200
    max_minutes: float = 0.0  # wall-clock limit, 0: no limit
    early_stop: int = 0  # stop after this many evaluations without a new best dev BLEU; 0: off
    eval_every: int = 1000
    eval_sentences: int = 0  # dev sentences decoded for BLEU at each evaluation; 0: all
    eval_beam: int = 0  # beam for validation BLEU; 0: decode.beam
    save_every: int = 0  # every N steps a restore point (checkpoint_last.pt) and a kept checkpoint_<step>.pt; 0: off
    keep_last: int = 0  # how many checkpoint_<step>.pt to keep; 0: all
    test_average: int = 0  # make train / reproduce test the average of the last N checkpoint_<step>.pt; 0: best
    ema_decay: float = 0.0  # moving average of the weights, validated and saved as checkpoint_best/ema.pt; 0: off
    ema_start: int = 0  # the average is a copy of the weights up to this update (fairseq --ema-start-update)
    log_every: int = 50
    progress: bool = True
    tensorboard: bool = True
    compile: bool = False  # torch.compile the model (one graph); slower than eager on CPUs (docs/performance.md)
    init_from: str | None = None  # warm start: a new run's weights from this checkpoint (nmt/training/warm_start.py)
    init_reset: str = ""  # with init_from, comma-separated: gains, logit_mask (from this run instead of the parent)


@dataclass(frozen=True)
class DecodeConfig:
    """Beam search settings shared by validation and ``nmt translate``."""

    beam: int = 4
    lenpen: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    max_tokens: int = 8000
    nbest: int = 1
    precision: DecodePrecisionName = "fp32"
    search: SearchName = "official"  # beam-search rules: the papers' decoder, or fairseq's (see nmt/search)
    length_norm: LengthNormName = "gnmt"  # score / ((5+|y|)/6)^lenpen, or fairseq's score / |y|^lenpen


@dataclass(frozen=True)
class Config:
    """A whole run: the system preset plus the four sections."""

    system: SystemName = "custom"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)


# The papers' named systems: model fields each one fixes. A config picks one with `system: NAME`; model keys
# written explicitly in the config still win over the preset.
SYSTEMS: dict[str, dict[str, Any]] = {
    "custom": {},
    "postnorm_layernorm": dict(norm="layernorm", norm_position="post", fixnorm=False, attention="scaled_dot"),
    "prenorm_layernorm": dict(norm="layernorm", norm_position="pre", fixnorm=False, attention="scaled_dot"),
    "prenorm_fixnorm_layernorm": dict(norm="layernorm", norm_position="pre", fixnorm=True, attention="scaled_dot"),
    "prenorm_fixnorm_scalenorm": dict(norm="scalenorm", norm_position="pre", fixnorm=True, attention="scaled_dot"),
    "qknorm": dict(norm="layernorm", norm_position="pre", fixnorm=True, attention="qknorm"),
}


def choices(section: type, key: str) -> list[str]:
    """The valid values of a config choice, from its ``Literal`` or its registry: what the command line's
    ``choices=`` lists are built from, so a registry line is the only place a new choice is added."""
    hints = typing.get_type_hints(section, include_extras=True)
    tp = hints[key]
    if typing.get_origin(tp) is Annotated:
        return tp.__metadata__[0].choices()
    if typing.get_origin(tp) is Literal:
        return [str(a) for a in typing.get_args(tp)]
    raise TypeError(f"{section.__name__}.{key} is not a choice")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin is Annotated:
        return "one of " + ", ".join(tp.__metadata__[0].choices())
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "a list of " + ", ".join(_type_name(a) for a in typing.get_args(tp))
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; return it converted (int -> float, list -> tuple)."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        if value in typing.get_args(tp) and type(value) is type(typing.get_args(tp)[0]):
            return value
    elif origin is Annotated:  # a Registry choice
        if isinstance(value, str) and value in tp.__metadata__[0].choices():
            return value
    elif origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _coerce(key, value, option)
            except NmtError:
                continue
    elif origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, (list, tuple)) and len(value) == len(args):
            return tuple(_coerce(key, v, a) for v, a in zip(value, args, strict=True))
    elif tp is type(None):
        if value is None:
            return None
    elif tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "5e-4" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN passes every comparison a range check makes
                raise NmtError(f"config key '{key}': {value!r} is not a finite number")
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, tp):
        return value
    raise NmtError(f"config key '{key}': {value!r} is not {_type_name(tp)}")


def _build(cls: Any, values: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            raise NmtError(f"unknown config key '{dotted}' (valid: {', '.join(names)})")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                keys = ", ".join(f.name for f in dataclasses.fields(tp))
                raise NmtError(f"config key '{dotted}' must be a mapping of {keys}")
            kwargs[key] = _build(tp, value, f"{dotted}.")
        else:
            kwargs[key] = _coerce(dotted, value, tp)
    return cls(**kwargs)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise NmtError(f"config key '{dotted}': '{part}' is not a section")
        node = child
    node[parts[-1]] = value


MAX_YAML_NODES = 100_000  # a config whose aliases expand to more values than this is refused


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Values ``node`` stands for once every alias is expanded (memoized per node: shared nodes count each time)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = MAX_YAML_NODES + 1  # a node inside itself (a recursive alias) counts as too large
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    total = 1
    for child in children:
        total += _expanded_size(child, sizes)
        if total > MAX_YAML_NODES:
            break
    sizes[id(node)] = total
    return total


class YAMLTooLarge(yaml.YAMLError):
    """A YAML document refused for the size its aliases expand to."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a document whose aliases expand to more than :data:`MAX_YAML_NODES` values (a
    "billion laughs" document: a few lines of nested aliases that expand to billions of values once anything walks
    the tree)."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None and _expanded_size(node, {}) > MAX_YAML_NODES:
            raise YAMLTooLarge(f"its aliases expand to more than {MAX_YAML_NODES:,} values: refused (nested "
                                 "aliases grow exponentially)")
        return node


def safe_yaml(text: str) -> Any:
    """``yaml.safe_load`` with the alias bound of :class:`_BoundedLoader`."""
    return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader subclass)


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``section.key=value`` and parse the value as a YAML scalar."""
    if "=" not in text:
        raise NmtError(f"override '{text}' must look like section.key=value")
    key, raw = text.split("=", 1)
    try:
        value = safe_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def config_from_dict(tree: dict[str, Any], overrides: typing.Iterable[str] = ()) -> Config:
    """Build a :class:`Config` from a nested dict plus dotted overrides, applying the system preset."""
    tree = {k: (dict(v) if isinstance(v, dict) else v) for k, v in tree.items()}
    for text in overrides:
        key, value = parse_override(text)
        _set_dotted(tree, key, value)
    system = tree.get("system", "custom")
    if system not in SYSTEMS:
        raise NmtError(f"config key 'system': {system!r} is not one of {', '.join(SYSTEMS)}")
    model = tree.get("model", {})
    if not isinstance(model, dict):
        raise NmtError("config key 'model' must be a mapping")
    tree["model"] = {**SYSTEMS[system], **model}
    config: Config = _build(Config, tree, "")
    validate(config)
    return config


def _read_config_text(path: str | Path | Traversable) -> tuple[str, str]:
    """``(name for messages, YAML text)`` of a config file, a packaged config's name or ``-`` (stdin)."""
    from nmt.presets import find_config
    from nmt.stdio import STD, read_text

    if isinstance(path, (str, Path)) and str(path) == STD:
        return "<stdin>", read_text(STD)
    source = find_config(path) if isinstance(path, (str, Path)) else path
    try:
        return str(source), source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NmtError(f"config file not found: {source}") from None
    except IsADirectoryError:
        raise NmtError(f"config {source} is a directory, not a YAML file") from None
    except UnicodeDecodeError as exc:
        line = source.read_bytes()[: exc.start].count(b"\n") + 1 if isinstance(source, Path) else "?"
        raise NmtError(f"config file {source} line {line}: invalid UTF-8 (byte {exc.object[exc.start]:#x})") from None
    except OSError as exc:
        raise NmtError(f"cannot read config file {source}: {exc}") from None


def load_config(path: str | Path | Traversable, overrides: typing.Iterable[str] = ()) -> Config:
    """Load a YAML config and apply dotted ``section.key=value`` overrides.

    ``path`` is a file, ``-`` (stdin), or the name of a packaged config (``gl-en``, ``gl-en-cpu``; see
    :mod:`nmt.presets`). The ``resolved`` section that training adds to a run's ``config.yaml`` (values measured on
    the data) is ignored, so a run's saved config trains again as it is.
    """
    path, text = _read_config_text(path)
    if not text.strip():
        raise NmtError(f"{path} is empty: a config is a mapping of sections (data, model, train, decode); start from "
                       "a packaged one (e.g. `nmt train gl-en-cpu`)")
    try:
        tree = safe_yaml(text)
    except YAMLTooLarge as exc:
        raise NmtError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc) or "invalid YAML"
        raise NmtError(f"{path}{where}: YAML syntax error: {problem}") from None
    if tree is None:
        raise NmtError(f"{path} holds no settings (only comments): a config is a mapping of sections")
    if not isinstance(tree, dict):
        raise NmtError(f"{path}: a config must be a mapping of sections (data, model, train, decode)")
    tree.pop(RESOLVED_KEY, None)
    try:
        return config_from_dict(tree, overrides)
    except NmtError as exc:
        raise NmtError(f"{path}: {exc}") from None


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain nested dict (lists for tuples) suitable for YAML, JSON and checkpoints."""

    def plain(value: Any) -> Any:
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


def _positive(key: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise NmtError(f"config key '{key}': {value} must be {'>= 0' if allow_zero else '> 0'}")


INIT_RESETS = ("gains", "logit_mask")  # what train.init_reset may take from a warm-started run instead of its parent


def init_reset_names(text: str) -> list[str]:
    """The entries of ``train.init_reset`` (comma-separated), checked (see :mod:`nmt.training.warm_start`)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in INIT_RESETS]
    if unknown:
        raise NmtError(f"config key 'train.init_reset': {', '.join(unknown)} is not one of {', '.join(INIT_RESETS)}")
    return names


def validate(config: Config) -> None:
    """Value checks that types alone cannot express."""
    m, t, d = config.model, config.train, config.decode
    ints: list[tuple[str, int]] = [("model.enc_layers", m.enc_layers), ("model.dec_layers", m.dec_layers),
                       ("model.d_model", m.d_model), ("model.d_ff", m.d_ff), ("model.n_heads", m.n_heads),
                       ("train.max_tokens", t.max_tokens), ("train.update_freq", t.update_freq),
                       ("train.eval_every", t.eval_every), ("decode.beam", d.beam), ("decode.nbest", d.nbest),
                       ("data.bpe_size", config.data.bpe_size), ("data.max_len", config.data.max_len)]
    for key, count in ints:
        _positive(key, count)
    if m.d_model % m.n_heads:
        raise NmtError(f"config key 'model.n_heads': d_model {m.d_model} is not divisible by {m.n_heads} heads")
    rates: list[tuple[str, float]] = [("model.dropout", m.dropout), ("model.attn_dropout", m.attn_dropout),
                       ("model.act_dropout", m.act_dropout), ("model.word_dropout", m.word_dropout),
                       ("train.label_smoothing", t.label_smoothing), ("data.bpe_dropout", config.data.bpe_dropout)]
    for key, value in rates:
        if not 0.0 <= value < 1.0:
            raise NmtError(f"config key '{key}': {value} must be in [0, 1)")
    if config.data.bpe_dropout > 0 and m.logit_mask:
        raise NmtError("config key 'data.bpe_dropout': sampled segmentations produce pieces the logit mask (the "
                       "types of the deterministic training targets) forbids; set model.logit_mask false")
    if m.qknorm_length is not None and not m.qknorm_length > 1:
        raise NmtError(f"config key 'model.qknorm_length': L={m.qknorm_length} must be > 1")
    if t.init_reset:
        init_reset_names(t.init_reset)
    if d.length_norm != "gnmt" and d.search != "fairseq":
        raise NmtError(f"config key 'decode.length_norm': {d.length_norm} needs decode.search fairseq (the official "
                       "decoder uses the GNMT penalty)")
    if t.schedule == "linear_decay" and t.max_steps <= 0 and t.max_minutes <= 0:
        raise NmtError("config key 'train.schedule': linear_decay decays to zero at the end of the budget, so it "
                       "needs train.max_steps or train.max_minutes")
    if not 0.0 <= t.ema_decay < 1.0:
        raise NmtError(f"config key 'train.ema_decay': {t.ema_decay} must be in [0, 1) (0: no weight average)")
    _positive("train.ema_start", t.ema_start, allow_zero=True)
    if t.test_average < 0:
        raise NmtError(f"config key 'train.test_average': {t.test_average} must be >= 0")
    if t.test_average > 0 and (t.save_every <= 0 or 0 < t.keep_last < t.test_average):
        raise NmtError(f"config key 'train.test_average': averaging the last {t.test_average} checkpoints needs "
                       f"train.save_every > 0 and train.keep_last 0 or >= {t.test_average}")
    if d.nbest > d.beam:
        raise NmtError(f"config key 'decode.nbest': {d.nbest} exceeds decode.beam {d.beam}")
    if "-" not in config.data.pair or len(config.data.pair.split("-")) != 2:
        raise NmtError(f"config key 'data.pair': {config.data.pair!r} must look like src-tgt (e.g. gl-en)")
