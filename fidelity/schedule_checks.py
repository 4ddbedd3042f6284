"""The learning-rate schedule, plateau decay and stop rule against the official controller, run for real.

The official ``Controller`` (QKNorm fork ``controller.py``) is built by its own ``__init__`` and its own ``train()``
loop runs with only the expensive parts replaced: ``run_log`` (one update) becomes "``adjust_lr()``, record the
rate, count the step" (the order of the real one: the rate is set before the update), ``eval_bleu`` appends the
next BLEU of a scripted sequence, and data loading, perplexity, epoch reports and test translation do nothing.
``adjust_lr``, ``eval_and_decay`` and the stop test in ``train`` are the official code. Ours is the
:class:`~nmt.training.optim.LRController` driven in the order of :meth:`nmt.training.loop.Trainer.run` (stop test before
each update, rate applied with the 1-based step, evaluation every ``train.eval_every`` updates).

Compared for each paper config (``configs/{gl-en,...}.yaml`` against its ``configurations.py`` function):

- ``config``: warmup, stop_lr, decay, patience, evaluation period, scheduler, beam, alpha and the update budget;
- ``lr``: the rate of every update up to 3 x warmup without any decay (relative error);
- for scripted dev-BLEU sequences (:data:`SEQUENCES`: zeros and ties during warmup, flat plateaus, slow declines):
  ``decays`` (evaluations whose decay decision differs), ``stop step`` (difference of the update the run stops
  after) and ``lr`` (the rate of every update of the run).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import random
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fidelity import Row
from fidelity.official import Official, load
from nmt.config import Config, load_config
from nmt.training.optim import LRController

REPO_ROOT = Path(__file__).resolve().parents[1]
# our paper config -> the official configurations.py function
PAIRS = {"gl-en": "gl2en", "sk-en": "sk2en", "en-vi": "en2vi", "en-he": "en2he", "ar-en": "ar2en"}
SCHEDULERS = {"warmup_plateau": "UPFLAT_WU", "inverse_sqrt": "ORG_WU"}  # ours -> official all_constants name
MAX_EVALS = 600  # scripted runs stop by stop_lr long before this


def _warmup_then(after: Callable[[int, random.Random], float]) -> Callable[[int, int], Iterator[float]]:
    """A BLEU sequence: 0.0 at every evaluation before warmup ends, then ``after(i, rng)`` for the i-th one after."""

    def sequence(warmup_evals: int, seed: int) -> Iterator[float]:
        rng = random.Random(seed)
        for i in range(MAX_EVALS):
            yield 0.0 if i < warmup_evals else round(after(i - warmup_evals, rng), 2)

    return sequence


# name -> BLEU sequence factory; all end in a long decline, so every run stops by stop_lr.
SEQUENCES: dict[str, Callable[[int, int], Iterator[float]]] = {
    "zeros in warmup, noisy decline": _warmup_then(lambda i, r: 20.0 - 0.02 * i + r.uniform(-1.0, 1.0)),
    "zeros in warmup, ties": _warmup_then(lambda i, r: 15.0 if i < 60 else 15.0 - 0.5 * ((i - 60) // 2)),
    "zeros in warmup, rise then steps": _warmup_then(lambda i, r: min(i, 30) * 0.8 - 0.3 * max(i - 40, 0)),
}


@dataclass
class Trace:
    """What a schedule did: the rate of each update, the decay decision of each evaluation, the last update."""

    rates: list[float]
    decays: list[bool]
    stop_step: int


def paper_config(pair: str) -> Config:
    return load_config(REPO_ROOT / "configs" / f"{pair}.yaml")


def _official_args(official: Official, cfg: Config, fn: str, dump_dir: str, **overrides: Any) -> argparse.Namespace:
    settings: dict[str, Any] = getattr(official.configurations, fn)()
    logger = logging.getLogger("fidelity.official_controller")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    settings.update(logger=logger, pairs="src2tgt", log_freq=10**9, dump_dir=dump_dir, data_dir=dump_dir,
                    bleu_script="", embed_dim=cfg.model.d_model)
    settings.update(overrides)
    return argparse.Namespace(**settings)


def official_trace(official: Official, args: argparse.Namespace, bleus: Iterator[float] | None) -> Trace:
    """Run the official ``Controller.train()`` with stubbed data and evaluation (see the module docstring)."""
    controller_cls = official.controller.Controller
    data = argparse.Namespace(load_data=lambda: None)
    ctl = controller_cls(args, torch.nn.Linear(1, 1), data)
    rates: list[float] = []
    decays: list[bool] = []

    def run_log(batch_num: int, epoch_num: int) -> None:
        ctl.adjust_lr()
        rates.append(float(ctl.optimizer.param_groups[0]["lr"]))
        ctl.stats["step"] += 1.0

    def eval_bleu() -> None:
        bleu = next(bleus) if bleus is not None else 0.0
        ctl.stats["avg_bleus"].append(bleu)
        ctl.stats["src2tgt"]["dev_bleus"].append(bleu)

    original_decay = ctl.eval_and_decay

    def eval_and_decay() -> None:
        before = ctl.lr
        original_decay()
        decays.append(ctl.lr != before)

    ctl.run_log, ctl.eval_bleu, ctl.eval_and_decay = run_log, eval_bleu, eval_and_decay
    ctl.eval_ppl = ctl.report_epoch = lambda *a: None
    ctl.translate = lambda *a, **k: None
    ctl.train()
    return Trace(rates, decays, int(ctl.stats["step"]))


def our_trace(cfg: Config, bleus: Iterator[float] | None, max_steps: int) -> Trace:
    """Our controller in :meth:`nmt.training.loop.Trainer.run`'s order: stop test, update ``step``, evaluation."""
    ctl = LRController(cfg.train, cfg.model.d_model)
    rates: list[float] = []
    decays: list[bool] = []
    step = 0
    while step < max_steps and not ctl.exhausted(step):
        step += 1
        rates.append(ctl.lr(step))
        if step % cfg.train.eval_every == 0:
            decays.append(ctl.observe(next(bleus) if bleus is not None else 0.0, step))
    return Trace(rates, decays, step)


def _max_rel(ours: list[float], theirs: list[float]) -> tuple[float, str]:
    n = min(len(ours), len(theirs))
    errors = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(ours[:n], theirs[:n], strict=True)]
    worst = max(range(n), key=errors.__getitem__) if n else 0
    error = max(errors, default=0.0) if len(ours) == len(theirs) else float("inf")
    return error, f"{n} updates, worst at step {worst + 1}" + ("" if len(ours) == len(theirs) else
                                                             f"; lengths {len(ours)} vs {len(theirs)}")


def config_rows(official: Official, pair: str) -> list[Row]:
    cfg, theirs = paper_config(pair), getattr(official.configurations, PAIRS[pair])()
    t, d = cfg.train, cfg.decode
    constants = official.all_constants
    pairs = [("warmup_steps", t.warmup_steps, theirs["warmup_steps"]), ("stop_lr", t.stop_lr, theirs["stop_lr"]),
             ("decay", t.decay, theirs["lr_decay"]), ("patience", t.patience, theirs["patience"]),
             ("eval_every", t.eval_every, theirs["epoch_size"]), ("beam", d.beam, theirs["beam_size"]),
             ("lenpen", d.lenpen, theirs["beam_alpha"]),
             ("schedule", getattr(constants, SCHEDULERS.get(t.schedule, "NO_WU")), theirs["lr_scheduler"]),
             ("lr_scale", 1.0 if t.lr is None else float("nan"), theirs["lr_scale"])]
    # official max_epochs counts "epochs" of epoch_size updates (controller.py train()): our max_steps
    budget = theirs["max_epochs"] * theirs["epoch_size"]
    pairs.append(("max_steps", t.max_steps, budget))
    wrong = [f"{name} {a} vs {b}" for name, a, b in pairs if a != b]
    note = "; ".join(wrong) or (f"{len(pairs)} fields; budget {theirs['max_epochs']} x {theirs['epoch_size']} = "
                                f"{budget} updates (ours max_epochs {t.max_epochs} data epochs)")
    return [Row("schedule", pair, "config", float(len(wrong)), 0.0, note)]


def schedule_rows(official: Official, pair: str, quick: bool) -> list[Row]:
    cfg = paper_config(pair)
    fn = PAIRS[pair]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fidelity_schedule_") as tmp:
        warmup, period = cfg.train.warmup_steps, cfg.train.eval_every
        # no decay: plain rates, 3 x warmup updates (the official run is cut by max_epochs)
        epochs = -(-3 * warmup // period)
        theirs = official_trace(official, _official_args(official, cfg, fn, tmp, max_epochs=epochs), None)
        ours = our_trace(cfg, None, epochs * period)
        error, note = _max_rel(ours.rates[: 3 * warmup], theirs.rates[: 3 * warmup])
        rows.append(Row("schedule", pair, "lr, steps 1..3 x warmup", error, 1e-12, note))
        sequences = list(SEQUENCES.items())[:1] if quick else list(SEQUENCES.items())
        for seed, (name, make) in enumerate(sequences):
            warmup_evals = warmup // period
            args = _official_args(official, cfg, fn, tmp, max_epochs=MAX_EVALS)
            theirs = official_trace(official, args, make(warmup_evals, seed))
            ours = our_trace(cfg, make(warmup_evals, seed), MAX_EVALS * period)
            n = min(len(ours.decays), len(theirs.decays))
            differ = sum(a != b for a, b in zip(ours.decays, theirs.decays, strict=False)) + abs(
                len(ours.decays) - len(theirs.decays))
            case = f"{pair}: {name}"
            rows.append(Row("schedule", case, "decay decisions", float(differ), 0.0,
                            f"{n} evaluations, {sum(theirs.decays)} official decays"))
            rows.append(Row("schedule", case, "stop step", float(abs(ours.stop_step - theirs.stop_step)), 0.0,
                            f"official stops after update {theirs.stop_step}"))
            error, note = _max_rel(ours.rates, theirs.rates)
            rows.append(Row("schedule", case, "lr of every update", error, 1e-12, note))
    return rows


def inverse_sqrt_row(official: Official, pair: str) -> Row:
    """Our ``inverse_sqrt`` against the official ``ORG_WU`` (not used by the paper configs), 3 x warmup updates."""
    cfg = paper_config(pair)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, schedule="inverse_sqrt"))
    warmup, period = cfg.train.warmup_steps, cfg.train.eval_every
    epochs = -(-3 * warmup // period)
    with tempfile.TemporaryDirectory(prefix="fidelity_schedule_") as tmp:
        args = _official_args(official, cfg, PAIRS[pair], tmp, max_epochs=epochs,
                              lr_scheduler=official.all_constants.ORG_WU)
        theirs = official_trace(official, args, None)
    ours = our_trace(cfg, None, epochs * period)
    error, note = _max_rel(ours.rates[: 3 * warmup], theirs.rates[: 3 * warmup])
    return Row("schedule", f"{pair}: inverse_sqrt vs ORG_WU", "lr, steps 1..3 x warmup", error, 1e-12, note)


def run(quick: bool = False) -> list[Row]:
    """Rows for every paper config (``quick``: gl-en and en-vi, one BLEU sequence)."""
    official = load("qknorm", ("all_constants", "utils", "configurations", "controller"))
    rows: list[Row] = []
    for pair in (("gl-en", "en-vi") if quick else tuple(PAIRS)):
        rows += config_rows(official, pair)
        rows += schedule_rows(official, pair, quick)
    rows.append(inverse_sqrt_row(official, "gl-en"))
    return rows
