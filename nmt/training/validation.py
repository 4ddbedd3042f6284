"""Validation during training: dev loss and BLEU on rank 0 (of the weight average when ``train.ema_decay`` is set),
shared with every rank, the best score and the plateau schedule's observation, ``metrics.jsonl``, and the
best/last (and average) checkpoints."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from nmt.machine.runtime import broadcast_floats
from nmt.metrics import tokenized_bleu
from nmt.training.dev import decode_ids, dev_loss
from nmt.training.resume import diverged
from nmt.training.run_log import RunLog
from nmt.training.state import RunState


def dev_scores(run: RunState) -> dict[str, Any]:
    """Dev loss, NLL, perplexity and tokenized BLEU of the model as it is (rank 0 only)."""
    t = run.cfg.train
    run.model.eval()
    loss, nll = dev_loss(run.model, run.data.dev, run.cfg.decode.max_tokens, run.rt, t.label_smoothing)
    settings = replace(run.cfg.decode, beam=t.eval_beam or run.cfg.decode.beam)
    ids = decode_ids(run.model, run.data.dev.data.src, settings, run.rt)
    bleu = tokenized_bleu([run.data.tokenizer.decode(h) for h in ids], run.data.dev.references)
    return {"dev_loss": loss, "dev_nll": nll, "dev_ppl": math.exp(min(nll, 50)), "bleu": bleu,
            "lr": run.lr.lr(run.progress.step), "gains": run.model.qknorm_gains()}


def evaluate(run: RunState, log: RunLog, save: Callable[[str], None]) -> float:
    """Score the dev set, keep the best score (``save("checkpoint_best.pt")`` when it improves) and the plateau
    schedule's observation, record the evaluation, then ``save("checkpoint_last.pt")``; returns the dev BLEU."""
    p = run.progress
    # train_seconds: wall time trained so far (earlier validations included), for dev BLEU against time
    record: dict[str, Any] = {"step": p.step, "epoch": p.epoch, "train_seconds": round(p.train_seconds, 1)}
    if run.rt.is_main:
        with run.ema.swapped_in() if run.ema is not None else contextlib.nullcontext():
            record.update(dev_scores(run))
        if run.ema is not None:
            record["weights"] = "ema"
    bleu, dev = broadcast_floats(run.rt, [record.get("bleu", 0.0), record.get("dev_loss", 0.0)])
    if not math.isfinite(dev) and run.rt.precision != "fp16":  # weights gone bad: keep the last checkpoint
        raise diverged(run, "dev loss", dev, p.step)
    decayed = run.lr.observe(bleu, p.step)
    improved = bleu > p.best_bleu
    if improved:
        p.best_bleu, p.best_step, p.evals_since_best = bleu, p.step, 0
    else:
        p.evals_since_best += 1
    p.last_eval_step = p.step
    if run.rt.is_main:
        record.update(best_bleu=p.best_bleu, lr_decayed=decayed)
        p.history.append(record)
        with open(run.save_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        gains = record.pop("gains")
        log.line(f"eval step {p.step} | dev loss {record['dev_loss']:.3f} | dev ppl {record['dev_ppl']:.2f} | "
                 f"dev BLEU {bleu:.2f} (best {p.best_bleu:.2f} at {p.best_step})"
                 + (" | lr decayed" if decayed else ""))
        log.scalars(p.step, {"loss": record["dev_loss"], "nll": record["dev_nll"], "bleu": bleu}, "dev")
        log.scalars(p.step, gains, "qknorm_g")
    if improved:
        save("checkpoint_best.pt")
    if run.ema is not None:
        save("checkpoint_ema.pt")
    save("checkpoint_last.pt")
    return bleu
