"""One optimizer update over ``update_freq`` batches, and its figures, kept on the device until they are read."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from nmt.data.batching import Batch
from nmt.machine.runtime import all_sum
from nmt.training.loss import label_smoothed_nll
from nmt.training.resume import diverged
from nmt.training.state import RunState

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


class Updates:
    """Runs updates of ``run`` (:meth:`step`) and reads their figures back in one synchronisation (:meth:`settle`)."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self.pending: list[PendingStep] = []
        self.figures: dict[str, float] | None = None  # the latest settled update's figures

    def step(self, batches: list[Batch]) -> dict[str, float]:
        """Forward/backward over ``update_freq`` batches, then one clipped optimizer update.

        Nothing here waits for the device (on a single process): the loss sums and the gradient norm stay on the
        device in :attr:`pending` until :meth:`settle` reads them, at log intervals and before every checkpoint.
        Returns the learning rate and the update's token counts.
        """
        run = self.run
        rt, net, scaler, optimizer = run.rt, run.net, run.scaler, run.optimizer
        local = [float(sum(b.n_tgt_tokens for b in batches)), float(sum(b.n_src_tokens for b in batches))]
        tgt_tokens, src_tokens = all_sum(rt, local)
        net.train()
        sums = torch.zeros(2, device=rt.device)  # label-smoothed loss and NLL, summed over target tokens
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            sync = contextlib.nullcontext() if last or not rt.distributed else net.no_sync()  # type: ignore[operator]
            with sync:
                with rt.autocast():
                    logits = net(batch.src, batch.tgt_in)
                loss, nll = label_smoothed_nll(logits, batch.tgt_out, run.cfg.train.label_smoothing,
                                               run.model.logit_mask)
                del logits  # backward needs the log-probabilities, not the (B, T, V) logits: free them first
                scaler.scale(loss * (rt.world_size / tgt_tokens)).backward()
            sums += torch.stack([loss.detach(), nll.detach()]).float()
        step = run.progress.step + 1
        rate = run.lr.apply(optimizer, step, run.progress.train_seconds)
        scaler.unscale_(optimizer)
        clip = run.cfg.train.clip_norm if run.cfg.train.clip_norm > 0 else float("inf")
        gnorm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), clip)
        skipped = None
        if scaler.is_enabled():  # fp16: the scaler skips a step with non-finite gradients and lowers its scale
            scale_before = scaler._get_scale_async().clone()  # type: ignore[union-attr]
            scaler.step(optimizer)
            scaler.update()
            skipped = scaler._get_scale_async() < scale_before  # type: ignore[operator]
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if run.ema is not None:
            run.ema.update(step)
        run.progress.step = step
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
        run = self.run
        pending, self.pending = self.pending, []
        if not pending:
            return self.figures
        values = torch.stack([p.values for p in pending])  # (n, 3): loss sum, NLL sum, gradient norm
        if run.rt.distributed:  # the sums are per rank; the gradient norm is already global
            sums = values[:, :2].contiguous()
            torch.distributed.all_reduce(sums)
            values = torch.cat([sums, values[:, 2:]], dim=1)
        skipped = [p.skipped for p in pending if p.skipped is not None]
        if skipped:
            run.progress.skipped_steps += int(torch.stack(skipped).sum())
        rows = values.tolist()
        for p, (loss_sum, _, gnorm) in zip(pending, rows, strict=True):
            if not math.isfinite(loss_sum) and run.rt.precision != "fp16":
                raise diverged(run, "training loss", loss_sum, p.step)
            if not math.isfinite(gnorm) and not run.scaler.is_enabled():
                raise diverged(run, "gradient norm", gnorm, p.step)
        last, (loss_sum, nll_sum, gnorm) = pending[-1], rows[-1]
        self.figures = {"loss": loss_sum / last.tgt_tokens, "nll": nll_sum / last.tgt_tokens, "lr": last.lr,
                        "gnorm": gnorm, "tgt_tokens": last.tgt_tokens, "src_tokens": last.src_tokens}
        return self.figures
