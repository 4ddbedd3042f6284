"""The training loop: token-budget batches, label smoothing, Adam, the papers' schedules, validation by BLEU,
atomic checkpoints that resume bitwise, and DDP under ``torchrun``.

One plain loop (:meth:`Trainer.run`) over the parts of :mod:`nmt.training`.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from nmt.checkpoint.files import remove_temporaries
from nmt.config import Config
from nmt.data.batching import Batch, ParallelData, make_batches
from nmt.errors import NmtError
from nmt.machine.hardware import MACHINE_LINE, describe_machine, machine_info
from nmt.machine.runtime import Runtime, setup, teardown
from nmt.training import validation
from nmt.training.loader import BatchLoader
from nmt.training.resume import keep_numbered, restore, save, warm_start, write_run_files
from nmt.training.run_lock import RunLock
from nmt.training.run_log import RunLog
from nmt.training.state import Progress, RunState
from nmt.training.stopping import stop_reason
from nmt.training.updates import Updates


class Trainer:
    """Owns one run (:class:`~nmt.training.state.RunState`) and runs it; :meth:`train_step` and :meth:`settle`
    are the public step that ``nmt bench`` drives."""

    def __init__(self, cfg: Config, runtime: Runtime) -> None:
        self.state = RunState.build(cfg, runtime)
        self.updates = Updates(self.state)
        self.stop_signal = 0
        self._epoch_cache: tuple[int, ParallelData, list[np.ndarray]] | None = None
        self.postfix: dict[str, str] = {}

    cfg = property(lambda self: self.state.cfg)
    rt = property(lambda self: self.state.rt)
    data = property(lambda self: self.state.data)
    model = property(lambda self: self.state.model)

    @property
    def progress(self) -> Progress:
        return self.state.progress

    def _epoch(self, epoch: int) -> tuple[int, ParallelData, list[np.ndarray]]:
        """The epoch's training pairs and this rank's share of its batches (built once per epoch)."""
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            data = self.data.epoch_data(epoch)  # the same on every rank: a pure function of (seed, epoch)
            src_lens, tgt_lens = data.lengths()
            batches = make_batches(src_lens, tgt_lens, self.cfg.train.max_tokens, self.cfg.train.seed, epoch)
            per_rank = len(batches) // self.rt.world_size
            self._epoch_cache = (epoch, data, batches[self.rt.rank::self.rt.world_size][:per_rank])
        return self._epoch_cache

    def epoch_data(self, epoch: int) -> ParallelData:
        """The training pairs as ``epoch`` sees them (:meth:`nmt.training.data.TrainingData.epoch_data`)."""
        return self._epoch(epoch)[1]

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's share of the epoch's batches (indices into :meth:`epoch_data`): every rank gets the same
        number of batches."""
        return self._epoch(epoch)[2]

    def train_step(self, batches: list[Batch]) -> dict[str, float]:
        """One update (:meth:`nmt.training.updates.Updates.step`)."""
        return self.updates.step(batches)

    def settle(self) -> dict[str, float] | None:
        """The pending updates' figures (:meth:`nmt.training.updates.Updates.settle`)."""
        return self.updates.settle()

    def save(self, name: str) -> None:
        self.settle()  # a diverged update stops the run before its weights are written
        save(self.state, name)

    def evaluate(self, log: RunLog) -> float:
        self.settle()
        return validation.evaluate(self.state, log, self.save)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signal = signum

    def start(self, resume: bool) -> str:
        """Resume, refuse to overwrite a run, or warm-start; prepare ``save_dir``. Returns the warm-start note."""
        run, last = self.state, self.state.save_dir / "checkpoint_last.pt"
        warm = ""
        if resume and last.exists():
            restore(run, last)
        elif last.exists():
            raise NmtError(f"{run.save_dir} already holds a run (checkpoint_last.pt); pass --resume to continue it "
                           "or set another train.save_dir")
        elif self.cfg.train.init_from:
            warm = warm_start(run, Path(self.cfg.train.init_from))
        if self.rt.is_main:
            run.save_dir.mkdir(parents=True, exist_ok=True)
            remove_temporaries(run.save_dir)  # left by a run killed in the middle of a checkpoint write
            write_run_files(run)
        return warm

    def run(self, resume: bool) -> dict[str, Any]:
        warm = self.start(resume)
        p, t = self.progress, self.cfg.train
        p.stopped = ""
        log = RunLog(self.state.save_dir, self.rt.is_main, t.max_steps, p.step, t.progress, t.tensorboard)
        log.line(self.describe(resumed=resume and p.step > 0))
        if warm:
            log.line(warm)
        log.line(MACHINE_LINE + describe_machine(machine_info()))  # what the run's speed figures were measured on
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        started, start_seconds = time.time(), p.train_seconds
        window = {"tokens": 0.0, "time": time.time()}
        reason = ""
        loader = BatchLoader(self.rt.device)
        try:
            while not (reason := stop_reason(self.state, self.stop_signal, started, start_seconds)):
                _, data, batches = self._epoch(p.epoch)
                uf = t.update_freq
                if p.batch_in_epoch + uf > len(batches):
                    p.epoch, p.batch_in_epoch = p.epoch + 1, 0
                    continue
                start, ahead = p.batch_in_epoch, p.batch_in_epoch + uf
                following = batches[ahead:ahead + uf] if ahead + uf <= len(batches) else None
                stats = self.train_step(loader.get(data, (p.epoch, start), batches[start:ahead], (p.epoch, ahead),
                                                   following))
                p.batch_in_epoch += uf
                p.train_seconds = start_seconds + time.time() - started
                window["tokens"] += stats["tgt_tokens"] + stats["src_tokens"]
                self.report(log, stats, window)
                if p.step % t.eval_every == 0:
                    self.evaluate(log)
                if t.save_every > 0 and p.step % t.save_every == 0:  # a restore point, and its numbered copy
                    if self.state.saved_step != p.step:  # (an evaluation at this step has just written it)
                        self.save("checkpoint_last.pt")
                    keep_numbered(self.state)
            p.train_seconds = start_seconds + time.time() - started  # a time-limited run stays stopped on resume
            p.stopped = "" if reason == "interrupted" else reason
            if p.last_eval_step != p.step and reason != "interrupted":
                self.evaluate(log)
            else:
                self.save("checkpoint_last.pt")
            log.line(f"stopped at step {p.step} (epoch {p.epoch}): {reason}; best dev BLEU {p.best_bleu:.2f} "
                     f"at step {p.best_step}" + (f"; {p.skipped_steps} fp16 steps skipped" if p.skipped_steps else ""))
        finally:
            loader.close()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            log.close()
        return {"step": p.step, "epoch": p.epoch, "best_bleu": p.best_bleu, "best_step": p.best_step,
                "reason": reason, "signal": self.stop_signal, "train_seconds": p.train_seconds}

    def report(self, log: RunLog, stats: dict[str, float], window: dict[str, float]) -> None:
        """Log every ``train.log_every`` updates (the only place a training step's figures leave the device)."""
        p, t = self.progress, self.cfg.train
        elapsed = max(time.time() - window["time"], 1e-9)
        tok_s = window["tokens"] / elapsed
        if p.step % t.log_every == 0:
            settled = self.settle()
            assert settled is not None  # this update was pending, or train_step has just settled it
            stats = settled
            self.postfix = {"loss": f"{stats['loss']:.3f}", "lr": f"{stats['lr']:.2e}", "tok/s": f"{tok_s:.0f}"}
        log.advance(1, self.postfix)
        if p.step % t.log_every == 0:
            log.line(f"step {p.step} | epoch {p.epoch} | loss {stats['loss']:.3f} | nll {stats['nll']:.3f} | "
                     f"lr {stats['lr']:.3e} | gnorm {stats['gnorm']:.3f} | batch {stats['tgt_tokens']:.0f} tgt + "
                     f"{stats['src_tokens']:.0f} src tokens | {tok_s:.0f} tok/s")
            log.scalars(p.step, {"loss": stats["loss"], "nll": stats["nll"], "lr": stats["lr"],
                                 "gnorm": stats["gnorm"], "tokens_per_s": tok_s,
                                 "batch_tokens": stats["tgt_tokens"]}, "train")
            log.scalars(p.step, self.model.qknorm_gains(), "qknorm_g")
            window.update(tokens=0.0, time=time.time())

    def describe(self, resumed: bool) -> str:
        n_params = sum(p.numel() for p in self.model.parameters())
        d, spec = self.data, self.data.spec
        length = "unset" if spec.qknorm_length is None else f"{spec.qknorm_length:.1f}"
        return (f"{'resuming' if resumed else 'training'} {self.cfg.system} on {self.cfg.data.pair}: "
                f"{n_params / 1e6:.2f}M parameters, {len(d.train)} training pairs ({d.dropped_long} longer than "
                f"data.max_len skipped), {len(d.dev.data)} dev pairs, vocab {spec.vocab_size}, QKNorm L "
                f"{length}, device {self.rt.device} x{self.rt.world_size}, precision "
                f"{self.rt.describe_precision()}, step {self.progress.step}")


def train(cfg: Config, resume: bool = False) -> dict[str, Any]:
    """Train according to ``cfg`` (resuming ``checkpoint_last.pt`` when asked); returns a summary dict.

    The main process holds ``train.save_dir``'s lock (:mod:`nmt.training.run_lock`) for the whole run. A file that
    cannot be written (a full disk, a lost permission) stops the run with one line naming it; the checkpoints written
    before are intact (every one is written atomically), so ``--resume`` continues once the cause is fixed."""
    runtime = setup(cfg.train.device, cfg.train.precision)
    lock = RunLock(Path(cfg.train.save_dir)).acquire() if runtime.is_main else None
    try:
        return Trainer(cfg, runtime).run(resume)
    except OSError as exc:
        where = exc.filename or f"a file in {cfg.train.save_dir}"
        raise NmtError(f"{where}: {exc.strerror or exc}; the run stopped and the checkpoints written before are "
                       "intact: free space (or fix the cause) and rerun with --resume") from None
    finally:
        if lock is not None:
            lock.release()
        teardown(runtime)
