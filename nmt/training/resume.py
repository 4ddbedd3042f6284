"""A run's checkpoints: what they hold, writing, resuming (with its compatibility checks), warm starts, pruning, and
the run files beside them (``config.yaml``, ``spm.model``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nmt.atomic import atomic_write_bytes
from nmt.checkpoint.average import numbered_checkpoints
from nmt.checkpoint.files import load_checkpoint, model_payload, save_checkpoint, tensor_to_bytes
from nmt.config import RESOLVED_KEY, config_to_dict
from nmt.errors import NmtError
from nmt.training import rng
from nmt.training.ema import check_equal_across_ranks
from nmt.training.state import Progress, RunState
from nmt.vocab import spm_digest

TRAINING_ENTRIES = ("optimizer", "scheduler", "scaler", "rng", "progress")
AVERAGED_NAMES = ("checkpoint_best.pt", "checkpoint_ema.pt")  # with train.ema_decay: the weight average's files


def rank_rng_states(run: RunState) -> list[dict[str, Any]] | None:
    """Every rank's generator states, gathered on rank 0 (a collective: every rank calls it); None on other ranks
    and in a single process."""
    if not run.rt.distributed:
        return None
    import torch.distributed as dist

    gathered: list[Any] | None = [None] * run.rt.world_size if run.rt.is_main else None
    dist.gather_object(rng.capture(), gathered, dst=0)
    return gathered


def payload(run: RunState, rng_ranks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A training checkpoint: the model's entries (:func:`nmt.checkpoint.files.model_payload`) and the run's state;
    under DDP ``rng_ranks`` holds every rank's generators, so a restarted group draws what an uninterrupted one
    would."""
    extra: dict[str, Any] = {} if rng_ranks is None else {"rng_ranks": rng_ranks}
    if run.ema is not None:
        extra["ema"] = run.ema.state_dict()
    return {**extra,
        **model_payload(run.model.state_dict(), config_to_dict(run.cfg), run.data.spm_bytes, run.data.spec.payload(),
                        run.progress.step, run.progress.epoch),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.lr.state_dict(),
        "scaler": run.scaler.state_dict(),
        "rng": rng.capture(),
        "progress": asdict(run.progress),
    }


def average_payload(run: RunState) -> dict[str, Any]:
    """A checkpoint of the weight average (``train.ema_decay``): the model's entries with the averages as weights
    and the run's progress, no optimizer state (it translates and is tested; it does not resume)."""
    assert run.ema is not None
    return {**model_payload(run.ema.model_state(run.model), config_to_dict(run.cfg), run.data.spm_bytes,
                            run.data.spec.payload(), run.progress.step, run.progress.epoch),
            "progress": asdict(run.progress), "ema_decay": run.ema.decay}


def save(run: RunState, name: str) -> None:
    """Write ``save_dir/name`` atomically (rank 0; every rank calls it); an OSError names the checkpoint.

    With a weight average, ``checkpoint_best.pt`` and ``checkpoint_ema.pt`` hold the average
    (:func:`average_payload`); ``checkpoint_last.pt`` holds the trained weights, their optimizer state and the
    average, and is written only after every rank's average is checked to agree."""
    averaged = run.ema is not None and name in AVERAGED_NAMES
    if run.ema is not None and run.rt.distributed and not averaged:
        check_equal_across_ranks(run.ema, run.rt.world_size, run.rt.rank)
    rng_ranks = None if averaged else rank_rng_states(run)
    if run.rt.is_main:
        try:
            save_checkpoint(run.save_dir / name, average_payload(run) if averaged else payload(run, rng_ranks))
        except OSError as exc:  # e.g. ENOSPC: name the checkpoint (the temporary file is already removed)
            raise OSError(exc.errno, exc.strerror, str(run.save_dir / name)) from None
    if name == "checkpoint_last.pt":
        run.saved_step = run.progress.step


def diverged(run: RunState, what: str, value: float, step: int) -> NmtError:
    """The error that stops a run whose loss or gradients are no longer finite, before anything is saved."""
    last = run.save_dir / "checkpoint_last.pt"
    kept = f"{last} (step {run.saved_step}) is kept" if run.saved_step is not None else "no checkpoint written"
    return NmtError(f"{what} became {value} at step {step}; stopped, {kept} "
                    "(try a lower train.lr or more train.warmup_steps)")


def restore(run: RunState, path: Path) -> None:
    """Continue from the training checkpoint ``path``: same model and data config, same vocabulary."""
    # Loaded into host memory: load_state_dict copies weights and optimizer state to the model's device, and
    # the RNG states must stay on the CPU (rng.restore also copies them back there, wherever they were loaded).
    ckpt = load_checkpoint(path, map_location="cpu")
    for section in ("model", "data"):
        theirs, ours = ckpt["config"].get(section), config_to_dict(run.cfg)[section]
        if theirs != ours:
            diff = [k for k in ours if theirs is None or theirs.get(k) != ours.get(k)]
            raise NmtError(f"checkpoint {path} was trained with another {section} config "
                           f"(differs in {', '.join(f'{section}.{k}' for k in diff)})")
    check_vocabulary(run, ckpt, path)
    missing = [k for k in TRAINING_ENTRIES if k not in ckpt]
    if missing:
        raise NmtError(f"checkpoint {path} has no '{missing[0]}' entry: not a training checkpoint (an averaged "
                       "checkpoint cannot be resumed)")
    try:
        run.model.load_state_dict(ckpt["model"])
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())[:300]
        raise NmtError(f"checkpoint {path} does not fit the model of the config ({detail})") from None
    run.optimizer.load_state_dict(ckpt["optimizer"])
    run.lr.load_state_dict(ckpt["scheduler"])
    run.scaler.load_state_dict(ckpt["scaler"])
    run.progress = Progress(**ckpt["progress"])
    if run.ema is not None:  # a run that had no average starts one from the restored weights
        if "ema" in ckpt:
            run.ema.load_state_dict(ckpt["ema"], str(path))
        else:
            run.ema.update(0)
    run.saved_step = run.progress.step
    ranks = ckpt.get("rng_ranks")
    if isinstance(ranks, list) and len(ranks) == run.rt.world_size:  # the same group: each rank where it was
        rng.restore(ranks[run.rt.rank])
    elif run.rt.rank == 0:
        rng.restore(ckpt["rng"])
    else:  # another world size (or an older checkpoint): fresh, distinct streams
        rng.seed_all(run.cfg.train.seed + 1000 * run.rt.rank + run.progress.step)


def check_vocabulary(run: RunState, ckpt: dict[str, Any], path: Path) -> None:
    """A run resumes only on the SentencePiece model it was trained with (the data may have been re-prepared)."""
    spm_path = Path(run.cfg.data.data_dir) / run.cfg.data.pair / "spm.model"
    ours = run.data.spec
    theirs = spm_digest(tensor_to_bytes(ckpt["spm"])) if "spm" in ckpt else spm_digest(b"")
    size = int(ckpt.get("vocab_size", -1))
    if size != ours.vocab_size or theirs != ours.spm_sha256:
        raise NmtError(f"checkpoint {path} (vocab_size {size}, SentencePiece model sha256 {theirs[:12]}) was "
                       f"trained on another vocabulary than the prepared data's {spm_path} (vocab_size "
                       f"{ours.vocab_size}, sha256 {ours.spm_sha256[:12]}); resume on the data it was trained on or "
                       "set another train.save_dir")


def warm_start(run: RunState, path: Path) -> str:
    """Load a parent's weights into this new run (:mod:`nmt.training.warm_start`); returns the log line saying so."""
    from nmt.config import init_reset_names
    from nmt.training.warm_start import initial_state

    if not path.is_file():
        raise NmtError(f"--init-from {path}: file not found" if not path.exists() else
                       f"--init-from {path} is not a file")
    spm_where = Path(run.cfg.data.data_dir) / run.cfg.data.pair / "spm.model"
    state, note = initial_state(load_checkpoint(path, map_location="cpu"), path, run.model.state_dict(),
                                run.data.spm_bytes, spm_where, init_reset_names(run.cfg.train.init_reset))
    run.model.load_state_dict(state)
    return note


def keep_numbered(run: RunState) -> None:
    """``checkpoint_{step}.pt`` as a copy of the ``checkpoint_last.pt`` just written (a hard link where the file
    system has them: every checkpoint write replaces the file, so the link keeps this version), then only the newest
    ``train.keep_last`` numbered checkpoints (rank 0)."""
    if not run.rt.is_main:
        return
    last, copy = run.save_dir / "checkpoint_last.pt", run.save_dir / f"checkpoint_{run.progress.step}.pt"
    copy.unlink(missing_ok=True)
    try:
        os.link(last, copy)
    except OSError:  # no hard links here: a second atomic write of the same bytes
        atomic_write_bytes(copy, last.read_bytes())
    keep = run.cfg.train.keep_last
    if keep <= 0:
        return
    for _, old in numbered_checkpoints(run.save_dir)[:-keep]:
        old.unlink(missing_ok=True)


def write_run_files(run: RunState) -> None:
    """``config.yaml`` (the resolved config and the model spec's facts) and ``spm.model`` beside the checkpoints."""
    import yaml

    resolved = config_to_dict(run.cfg)
    spec = run.data.spec
    resolved[RESOLVED_KEY] = {"qknorm_length": spec.qknorm_length, "qknorm_length_source": spec.qknorm_length_source,
                              "vocab_size": spec.vocab_size}
    (run.save_dir / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    (run.save_dir / "spm.model").write_bytes(run.data.spm_bytes)
