"""The training loop: token-budget batches, label smoothing, Adam, the papers' schedules, validation by BLEU,
atomic checkpoints that resume bitwise, and DDP under ``torchrun``.

One plain loop (:meth:`Trainer.run`) with named helpers for a step, an evaluation and a checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import signal
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import torch

from nmt import kernels, rng
from nmt.checkpoint import load_checkpoint, model_payload, remove_temporaries, save_checkpoint, tensor_to_bytes
from nmt.config import RESOLVED_KEY, Config, config_to_dict
from nmt.data.batching import Batch, make_batches
from nmt.errors import NmtError
from nmt.evaluate import tokenized_bleu
from nmt.hardware import MACHINE_LINE, describe_machine, machine_info
from nmt.loader import BatchLoader
from nmt.loss import label_smoothed_nll
from nmt.model import build_model
from nmt.optim import LRController, build_optimizer
from nmt.run_lock import RunLock
from nmt.run_log import RunLog
from nmt.runtime import Runtime, all_sum, broadcast_floats, setup, teardown
from nmt.train_data import TrainingData, load_training_data
from nmt.validation import decode_ids, dev_loss

# Updates whose figures may wait on the device before train_step reads them anyway (bench runs never log).
MAX_PENDING = 256


@dataclass(frozen=True)
class PendingStep:
    """One update's figures, still on the device: ``values`` = (loss sum, NLL sum, gradient norm); ``skipped``: the
    fp16 scaler skipped the update (None without a scaler)."""

    step: int
    values: torch.Tensor
    skipped: torch.Tensor | None
    lr: float
    tgt_tokens: float
    src_tokens: float


@dataclass
class Progress:
    """Everything about where a run stands that a checkpoint must carry besides tensors."""

    step: int = 0
    epoch: int = 1
    batch_in_epoch: int = 0
    best_bleu: float = -1.0
    best_step: int = 0
    evals_since_best: int = 0
    skipped_steps: int = 0
    train_seconds: float = 0.0
    last_eval_step: int = -1
    stopped: str = ""  # why the run stopped by itself (a finished run); "" while it runs or after an interrupt
    history: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    """Owns the model, optimizer, schedule and data of one run."""

    def __init__(self, cfg: Config, runtime: Runtime) -> None:
        self.cfg, self.rt = cfg, runtime
        self.save_dir = Path(cfg.train.save_dir)
        self.data: TrainingData = load_training_data(cfg)
        rng.seed_all(cfg.train.seed + runtime.rank)
        self.model = kernels.accelerate(build_model(cfg.model, self.data.vocab_size, self.data.qknorm_length,
                                                    self.data.target_vocabulary)).to(runtime.device)
        self.net: torch.nn.Module = self.model
        if runtime.distributed:
            ids = [runtime.device.index] if runtime.device.type == "cuda" else None
            self.net = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        if cfg.train.compile:
            self.net = torch.compile(self.net)  # type: ignore[assignment]
        self.optimizer = build_optimizer(self.model, cfg.train)
        self.lr = LRController(cfg.train, cfg.model.d_model)
        self.scaler = torch.amp.GradScaler(runtime.device.type, enabled=runtime.precision == "fp16")
        self.progress = Progress()
        self.stop_signal = 0
        self.saved_step: int | None = None  # step of the checkpoint_last.pt this run wrote or resumed from
        self.src_lens, self.tgt_lens = self.data.train.lengths()
        self._epoch_cache: tuple[int, list[np.ndarray]] | None = None
        self.pending: list[PendingStep] = []
        self.figures: dict[str, float] | None = None  # the latest settled update's figures
        self.postfix: dict[str, str] = {}

    # ----------------------------------------------------------------------------------------------- checkpoints
    def payload(self) -> dict[str, Any]:
        return {
            **model_payload(self.model.state_dict(), config_to_dict(self.cfg), self.data.spm_bytes,
                            self.data.vocab_size, self.data.qknorm_length, self.progress.step, self.progress.epoch),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.lr.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng.capture(),
            "progress": asdict(self.progress),
        }

    def save(self, name: str) -> None:
        self.settle()  # a diverged update stops the run before its weights are written
        if self.rt.is_main:
            try:
                save_checkpoint(self.save_dir / name, self.payload())
            except OSError as exc:  # e.g. ENOSPC: name the checkpoint (the temporary file is already removed)
                raise OSError(exc.errno, exc.strerror, str(self.save_dir / name)) from None
        if name == "checkpoint_last.pt":
            self.saved_step = self.progress.step

    def diverged(self, what: str, value: float, step: int) -> NmtError:
        """The error that stops a run whose loss or gradients are no longer finite, before anything is saved."""
        last = self.save_dir / "checkpoint_last.pt"
        kept = f"{last} (step {self.saved_step}) is kept" if self.saved_step is not None else "no checkpoint written"
        return NmtError(f"{what} became {value} at step {step}; stopped, {kept} "
                        "(try a lower train.lr or more train.warmup_steps)")

    def restore(self, path: Path) -> None:
        # Loaded into host memory: load_state_dict copies weights and optimizer state to the model's device, and
        # the RNG states must stay on the CPU (rng.restore also copies them back there, wherever they were loaded).
        ckpt = load_checkpoint(path, map_location="cpu")
        for section in ("model", "data"):
            theirs, ours = ckpt["config"].get(section), config_to_dict(self.cfg)[section]
            if theirs != ours:
                diff = [k for k in ours if theirs is None or theirs.get(k) != ours.get(k)]
                raise NmtError(f"checkpoint {path} was trained with another {section} config "
                               f"(differs in {', '.join(f'{section}.{k}' for k in diff)})")
        self.check_vocabulary(ckpt, path)
        missing = [k for k in ("optimizer", "scheduler", "scaler", "rng", "progress") if k not in ckpt]
        if missing:
            raise NmtError(f"checkpoint {path} has no '{missing[0]}' entry: not a training checkpoint (an averaged "
                           "checkpoint cannot be resumed)")
        try:
            self.model.load_state_dict(ckpt["model"])
        except RuntimeError as exc:
            detail = " ".join(str(exc).split())[:300]
            raise NmtError(f"checkpoint {path} does not fit the model of the config ({detail})") from None
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.lr.load_state_dict(ckpt["scheduler"])
        self.scaler.load_state_dict(ckpt["scaler"])
        self.progress = Progress(**ckpt["progress"])
        self.saved_step = self.progress.step
        if self.rt.rank == 0:
            rng.restore(ckpt["rng"])
        else:
            rng.seed_all(self.cfg.train.seed + 1000 * self.rt.rank + self.progress.step)

    def warm_start(self, path: Path) -> str:
        """Load a parent's weights into this new run (:mod:`nmt.warm_start`); returns the log line saying so."""
        from nmt.config import init_reset_names
        from nmt.warm_start import initial_state

        if not path.is_file():
            raise NmtError(f"--init-from {path}: file not found" if not path.exists() else
                           f"--init-from {path} is not a file")
        spm_where = Path(self.cfg.data.data_dir) / self.cfg.data.pair / "spm.model"
        state, note = initial_state(load_checkpoint(path, map_location="cpu"), path, self.model.state_dict(),
                                    self.data.spm_bytes, spm_where, init_reset_names(self.cfg.train.init_reset))
        self.model.load_state_dict(state)
        return note

    def check_vocabulary(self, ckpt: dict[str, Any], path: Path) -> None:
        """A run resumes only on the SentencePiece model it was trained with (the data may have been re-prepared)."""
        spm_path = Path(self.cfg.data.data_dir) / self.cfg.data.pair / "spm.model"
        theirs = tensor_to_bytes(ckpt["spm"]) if "spm" in ckpt else b""
        sizes = int(ckpt.get("vocab_size", -1)), self.data.vocab_size
        if sizes[0] != sizes[1] or theirs != self.data.spm_bytes:
            digests = [hashlib.sha256(b).hexdigest()[:12] for b in (theirs, self.data.spm_bytes)]
            raise NmtError(f"checkpoint {path} (vocab_size {sizes[0]}, SentencePiece model sha256 {digests[0]}) was "
                           f"trained on another vocabulary than the prepared data's {spm_path} (vocab_size {sizes[1]}, "
                           f"sha256 {digests[1]}); resume on the data it was trained on or set another train.save_dir")

    def prune_numbered(self) -> None:
        keep = self.cfg.train.keep_last
        if not self.rt.is_main or keep <= 0:
            return
        numbered = sorted(self.save_dir.glob("checkpoint_[0-9]*.pt"), key=lambda p: int(p.stem.split("_")[1]))
        for old in numbered[:-keep]:
            old.unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------------- batches
    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's share of the epoch: every rank gets the same number of batches (built once per epoch)."""
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            batches = make_batches(self.src_lens, self.tgt_lens, self.cfg.train.max_tokens, self.cfg.train.seed,
                                   epoch)
            per_rank = len(batches) // self.rt.world_size
            self._epoch_cache = (epoch, batches[self.rt.rank::self.rt.world_size][:per_rank])
        return self._epoch_cache[1]

    # ---------------------------------------------------------------------------------------------------- step
    def train_step(self, batches: list[Batch]) -> dict[str, float]:
        """Forward/backward over ``update_freq`` batches, then one clipped optimizer update.

        Nothing here waits for the device (on a single process): the loss sums and the gradient norm stay on the
        device in :attr:`pending` until :meth:`settle` reads them, at log intervals and before every checkpoint.
        Returns the learning rate and the update's token counts.
        """
        local = [float(sum(b.n_tgt_tokens for b in batches)), float(sum(b.n_src_tokens for b in batches))]
        tgt_tokens, src_tokens = all_sum(self.rt, local)
        self.net.train()
        sums = torch.zeros(2, device=self.rt.device)  # label-smoothed loss and NLL, summed over target tokens
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            sync = contextlib.nullcontext() if last or not self.rt.distributed else self.net.no_sync()  # type: ignore[operator]
            with sync:
                with self.rt.autocast():
                    logits = self.net(batch.src, batch.tgt_in)
                loss, nll = label_smoothed_nll(logits, batch.tgt_out, self.cfg.train.label_smoothing,
                                               self.model.logit_mask)
                del logits  # backward needs the log-probabilities, not the (B, T, V) logits: free them first
                self.scaler.scale(loss * (self.rt.world_size / tgt_tokens)).backward()
            sums += torch.stack([loss.detach(), nll.detach()]).float()
        step = self.progress.step + 1
        rate = self.lr.apply(self.optimizer, step)
        self.scaler.unscale_(self.optimizer)
        clip = self.cfg.train.clip_norm if self.cfg.train.clip_norm > 0 else float("inf")
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        skipped = None
        if self.scaler.is_enabled():  # fp16: the scaler skips a step with non-finite gradients and lowers its scale
            scale_before = self.scaler._get_scale_async().clone()  # type: ignore[union-attr]
            self.scaler.step(self.optimizer)
            self.scaler.update()
            skipped = self.scaler._get_scale_async() < scale_before  # type: ignore[operator]
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.progress.step = step
        self.pending.append(PendingStep(step, torch.cat([sums, gnorm.detach().float().reshape(1)]), skipped, rate,
                                        tgt_tokens, src_tokens))
        if len(self.pending) >= MAX_PENDING:
            self.settle()
        return {"lr": rate, "tgt_tokens": tgt_tokens, "src_tokens": src_tokens}

    def settle(self) -> dict[str, float] | None:
        """Read the pending updates' figures from the device (one synchronisation) and stop at the first update
        whose loss or gradient norm was not finite (fp16 skips those instead, counting them).

        Returns the latest update's figures (``loss``, ``nll`` per target token, ``gnorm``, ``lr``, token counts),
        or None before the first update.
        """
        pending, self.pending = self.pending, []
        if not pending:
            return self.figures
        values = torch.stack([p.values for p in pending])  # (n, 3): loss sum, NLL sum, gradient norm
        if self.rt.distributed:  # the sums are per rank; the gradient norm is already global
            sums = values[:, :2].contiguous()
            torch.distributed.all_reduce(sums)
            values = torch.cat([sums, values[:, 2:]], dim=1)
        skipped = [p.skipped for p in pending if p.skipped is not None]
        if skipped:
            self.progress.skipped_steps += int(torch.stack(skipped).sum())
        rows = values.tolist()
        for p, (loss_sum, _, gnorm) in zip(pending, rows, strict=True):
            if not math.isfinite(loss_sum) and self.rt.precision != "fp16":
                raise self.diverged("training loss", loss_sum, p.step)
            if not math.isfinite(gnorm) and not self.scaler.is_enabled():
                raise self.diverged("gradient norm", gnorm, p.step)
        last, (loss_sum, nll_sum, gnorm) = pending[-1], rows[-1]
        self.figures = {"loss": loss_sum / last.tgt_tokens, "nll": nll_sum / last.tgt_tokens, "lr": last.lr,
                        "gnorm": gnorm, "tgt_tokens": last.tgt_tokens, "src_tokens": last.src_tokens}
        return self.figures

    # ---------------------------------------------------------------------------------------------- evaluation
    def evaluate(self, log: RunLog) -> float:
        """Dev loss and BLEU on rank 0, shared with all ranks; updates best checkpoint and the plateau schedule."""
        self.settle()
        p, t = self.progress, self.cfg.train
        record: dict[str, Any] = {"step": p.step, "epoch": p.epoch}
        bleu = dev = 0.0
        if self.rt.is_main:
            self.model.eval()
            loss, nll = dev_loss(self.model, self.data.dev, self.cfg.decode.max_tokens, self.rt, t.label_smoothing)
            dev = loss
            settings = replace(self.cfg.decode, beam=t.eval_beam or self.cfg.decode.beam)
            ids = decode_ids(self.model, self.data.dev.data.src, settings, self.rt)
            hyps = [self.data.tokenizer.decode(h) for h in ids]
            bleu = tokenized_bleu(hyps, self.data.dev.references)
            record.update(dev_loss=loss, dev_nll=nll, dev_ppl=math.exp(min(nll, 50)), bleu=bleu,
                          lr=self.lr.lr(p.step), gains=self.model.qknorm_gains())
        bleu, dev = broadcast_floats(self.rt, [bleu, dev])
        if not math.isfinite(dev) and self.rt.precision != "fp16":  # weights gone bad: keep the last checkpoint
            raise self.diverged("dev loss", dev, p.step)
        decayed = self.lr.observe(bleu, p.step)
        improved = bleu > p.best_bleu
        if improved:
            p.best_bleu, p.best_step, p.evals_since_best = bleu, p.step, 0
        else:
            p.evals_since_best += 1
        p.last_eval_step = p.step
        if self.rt.is_main:
            record.update(best_bleu=p.best_bleu, lr_decayed=decayed)
            p.history.append(record)
            with open(self.save_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
            gains = record.pop("gains")
            log.line(f"eval step {p.step} | dev loss {record['dev_loss']:.3f} | dev ppl {record['dev_ppl']:.2f} | "
                     f"dev BLEU {bleu:.2f} (best {p.best_bleu:.2f} at {p.best_step})"
                     + (" | lr decayed" if decayed else ""))
            log.scalars(p.step, {"loss": record["dev_loss"], "nll": record["dev_nll"], "bleu": bleu}, "dev")
            log.scalars(p.step, gains, "qknorm_g")
        if improved:
            self.save("checkpoint_best.pt")
        self.save("checkpoint_last.pt")
        return bleu

    # -------------------------------------------------------------------------------------------------- stopping
    def stop_reason(self, started: float, start_seconds: float) -> str:
        p, t = self.progress, self.cfg.train
        reasons = [
            (self.stop_signal != 0, "interrupted"),
            (t.max_steps > 0 and p.step >= t.max_steps, f"reached train.max_steps={t.max_steps}"),
            (p.epoch > t.max_epochs, f"reached train.max_epochs={t.max_epochs}"),
            (t.max_minutes > 0 and start_seconds + time.time() - started >= 60 * t.max_minutes,
             f"reached train.max_minutes={t.max_minutes}"),
            (t.early_stop > 0 and p.evals_since_best >= t.early_stop,
             f"no dev BLEU improvement in {t.early_stop} evaluations"),
            (self.lr.exhausted(p.step), f"learning rate fell below train.stop_lr={t.stop_lr}"),
        ]
        codes = [float(flag) for flag, _ in reasons]
        codes = broadcast_floats(self.rt, codes)
        return next((text for code, (_, text) in zip(codes, reasons, strict=True) if code), "")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signal = signum

    # ------------------------------------------------------------------------------------------------------ run
    def run(self, resume: bool) -> dict[str, Any]:
        last = self.save_dir / "checkpoint_last.pt"
        warm = ""
        if resume and last.exists():
            self.restore(last)
        elif last.exists():
            raise NmtError(f"{self.save_dir} already holds a run (checkpoint_last.pt); pass --resume to continue it "
                           "or set another train.save_dir")
        elif self.cfg.train.init_from:
            warm = self.warm_start(Path(self.cfg.train.init_from))
        if self.rt.is_main:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            remove_temporaries(self.save_dir)  # left by a run killed in the middle of a checkpoint write
            self.write_run_files()
        p, t = self.progress, self.cfg.train
        p.stopped = ""
        log = RunLog(self.save_dir, self.rt.is_main, t.max_steps, p.step, t.progress, t.tensorboard)
        log.line(self.describe(resumed=resume and p.step > 0))
        if warm:
            log.line(warm)
        log.line(MACHINE_LINE + describe_machine(machine_info()))  # what the run's speed figures were measured on
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        started, start_seconds = time.time(), p.train_seconds
        window = {"tokens": 0.0, "time": time.time()}
        reason = ""
        loader = BatchLoader(self.data.train, self.rt.device)
        try:
            while not (reason := self.stop_reason(started, start_seconds)):
                batches = self.epoch_batches(p.epoch)
                uf = t.update_freq
                if p.batch_in_epoch + uf > len(batches):
                    p.epoch, p.batch_in_epoch = p.epoch + 1, 0
                    continue
                start, ahead = p.batch_in_epoch, p.batch_in_epoch + uf
                following = batches[ahead:ahead + uf] if ahead + uf <= len(batches) else None
                stats = self.train_step(loader.get((p.epoch, start), batches[start:ahead], (p.epoch, ahead),
                                                   following))
                p.batch_in_epoch += uf
                p.train_seconds = start_seconds + time.time() - started
                window["tokens"] += stats["tgt_tokens"] + stats["src_tokens"]
                self.report(log, stats, window)
                if p.step % t.eval_every == 0:
                    self.evaluate(log)
                if t.save_every > 0 and p.step % t.save_every == 0:
                    self.save(f"checkpoint_{p.step}.pt")
                    self.prune_numbered()
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
        d = self.data
        return (f"{'resuming' if resumed else 'training'} {self.cfg.system} on {self.cfg.data.pair}: "
                f"{n_params / 1e6:.2f}M parameters, {len(d.train)} training pairs ({d.dropped_long} longer than "
                f"data.max_len skipped), {len(d.dev.data)} dev pairs, vocab {d.vocab_size}, QKNorm L "
                f"{d.qknorm_length:.1f}, device {self.rt.device} x{self.rt.world_size}, precision "
                f"{self.rt.describe_precision()}, step {self.progress.step}")

    def write_run_files(self) -> None:
        import yaml

        resolved = config_to_dict(self.cfg)
        resolved[RESOLVED_KEY] = {"qknorm_length": self.data.qknorm_length,
                                "qknorm_length_source": self.data.qknorm_length_source,
                                "vocab_size": self.data.vocab_size}
        (self.save_dir / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
        (self.save_dir / "spm.model").write_bytes(self.data.spm_bytes)


def train(cfg: Config, resume: bool = False) -> dict[str, Any]:
    """Train according to ``cfg`` (resuming ``checkpoint_last.pt`` when asked); returns a summary dict.

    The main process holds ``train.save_dir``'s lock (:mod:`nmt.run_lock`) for the whole run. A file that cannot be
    written (a full disk, a lost permission) stops the run with one line naming it; the checkpoints written before
    are intact (every one is written atomically), so ``--resume`` continues once the cause is fixed.
    """
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
