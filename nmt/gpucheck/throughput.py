"""The ``throughput`` phase of ``scripts/gpu_check``: the papers' 6+6-layer d512 model at 4096-token batches.

Training is timed through :func:`nmt.perf.bench.time_training` (the real training step) in bf16 and in fp32 (TF32
matmuls on CUDA), then the bf16 batch is doubled until it no longer fits (or the phase's time is up). Model FLOP
utilisation (MFU) is the model's useful arithmetic, counted on real (non-PAD) tokens by :func:`training_flops`, per
second, over the GPU's dense peak rate for that arithmetic (:data:`PEAK_TFLOPS`).
"""

from __future__ import annotations

import gc
import time
from typing import Any

import numpy as np
import torch

from nmt.config import Config, ModelConfig, load_config

# Dense (no sparsity) peak tensor-core rates in TFLOP/s: (bf16/fp16, tf32), from the vendors' data sheets. Matched
# by substring of torch.cuda.get_device_name(), first match wins.
PEAK_TFLOPS: list[tuple[str, float, float]] = [
    ("H200", 989.4, 494.7), ("H100 PCIe", 756.0, 378.0), ("H100", 989.4, 494.7), ("H800", 989.4, 494.7),
    ("A100", 312.0, 156.0), ("A800", 312.0, 156.0), ("L40S", 362.1, 183.0), ("L4", 121.0, 60.0),
    ("A10G", 70.0, 35.0), ("A10", 125.0, 62.5), ("RTX 4090", 165.2, 82.6), ("V100", 125.0, 15.7),
]
BATCH_LADDER = (8192, 16384, 32768, 65536, 131072)


def peak_tflops(name: str) -> dict[str, float] | None:
    """``{"bf16": ..., "tf32": ...}`` dense peak TFLOP/s of the GPU called ``name``, None if not in the table."""
    for key, bf16, tf32 in PEAK_TFLOPS:
        if key in name:
            return {"bf16": bf16, "fp16": bf16, "tf32": tf32}
    return None


def sentence_flops(m: ModelConfig, vocab: int, src: np.ndarray, tgt: np.ndarray) -> float:
    """Forward-pass FLOPs (2 per multiply-add) of ``m`` on sentences of ``src``/``tgt`` lengths (EOS/BOS included).

    Linear layers count on every real token; attention scores and weighted sums on the real query x key pairs
    (causal self-attention: half); the output projection to the vocabulary on every target token.
    """
    d, ff = m.d_model, m.d_ff
    s, t = src.astype(np.float64), tgt.astype(np.float64)
    encoder = m.enc_layers * (s * (4 * d * d + 2 * d * ff) + 2 * s * s * d)
    decoder = m.dec_layers * (t * (4 * d * d + 2 * d * d + 2 * d * ff) + s * 2 * d * d + t * t * d + 2 * t * s * d)
    output = t * d * vocab
    return float(2 * (encoder + decoder + output).sum())


def training_flops(cfg: Config, vocab: int, src_lens: np.ndarray, tgt_lens: np.ndarray,
                   batches: list[np.ndarray]) -> float:
    """Training FLOPs (forward + backward = 3 x forward) of ``batches`` (index arrays into the length arrays)."""
    return sum(3 * sentence_flops(cfg.model, vocab, src_lens[b], tgt_lens[b]) for b in batches)


def measure(cfg: Config, steps: int, warmup: int) -> dict[str, Any]:
    """Tokens/s, FLOP/s and peak memory of ``steps`` timed updates of ``cfg`` (after ``warmup``)."""
    from nmt.machine.runtime import setup, teardown
    from nmt.perf.bench import time_training
    from nmt.training.loop import Trainer

    runtime = setup(cfg.train.device, cfg.train.precision)
    cuda = runtime.device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(cfg, runtime)
    try:
        timed = time_training(trainer, steps, warmup, repeats=1)
        trainer.settle()
        batches = trainer.epoch_batches(1)
        uf = cfg.train.update_freq  # the batches time_training timed
        chunks = [batches[i % len(batches)] for i in range(warmup * uf, (warmup + steps) * uf)]
        flops = training_flops(cfg, trainer.data.spec.vocab_size, *trainer.epoch_data(1).lengths(), chunks)
        seconds = steps / timed["steps_per_s"]["median"]
        result = {"precision": runtime.precision, "max_tokens": cfg.train.max_tokens, "steps": steps,
                  "src_tgt_tokens_per_s": timed["src_tgt_tokens_per_s"]["median"],
                  "tgt_tokens_per_s": timed["tgt_tokens_per_s"]["median"],
                  "sentences_per_s": timed["sentences_per_s"]["median"], "updates_per_s": steps / seconds,
                  "tflops_per_s": flops / seconds / 1e12,
                  "parameters": sum(p.numel() for p in trainer.model.parameters())}
        if cuda:
            result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return result
    finally:
        del trainer
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        teardown(runtime)


def throughput_phase(settings: Any) -> dict[str, Any]:
    """bf16 and fp32 (TF32) at 4096-token batches, then the largest bf16 batch that fits in the time left."""
    started = time.time()
    limit = 80.0 if not settings.dry_run else 60.0
    steps, warmup = (30, 5) if not settings.dry_run else (3, 1)
    overrides = [*settings.paper_overrides, *settings.throughput_overrides, "train.max_tokens=4096"]
    peaks = peak_tflops(torch.cuda.get_device_name(0)) if settings.device == "cuda" else None
    runs: dict[str, Any] = {}
    for precision in ("bf16", "fp32"):
        cfg = load_config(settings.paper_config, [*overrides, f"train.precision={precision}"])
        runs[precision] = measure(cfg, steps, warmup)
        if peaks:
            peak = peaks["bf16" if precision == "bf16" else "tf32"]
            runs[precision]["mfu"] = runs[precision]["tflops_per_s"] / peak
    largest: dict[str, Any] | None = None
    for max_tokens in BATCH_LADDER[: 2 if settings.dry_run else None]:
        if time.time() - started > limit * 0.6:
            break
        cfg = load_config(settings.paper_config, [*overrides, "train.precision=bf16", f"train.max_tokens={max_tokens}"])
        try:
            largest = measure(cfg, max(steps // 3, 2), 1)
        except torch.cuda.OutOfMemoryError:
            gc.collect()
            torch.cuda.empty_cache()
            break
    parts = []
    for precision, r in runs.items():
        label = "fp32 (TF32)" if precision == "fp32" and settings.device == "cuda" else precision
        mfu = f", MFU {100 * r['mfu']:.1f}%" if "mfu" in r else ""
        memory = f", peak {r['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in r else ""
        parts.append(f"{label} {r['src_tgt_tokens_per_s']:,.0f} tok/s{mfu}{memory}")
    if largest:
        parts.append(f"largest batch tried that fits: {largest['max_tokens']} tokens, "
                     f"{largest['src_tgt_tokens_per_s']:,.0f} tok/s")
    return {"status": "pass", "summary": "; ".join(parts), "runs": runs, "largest_batch": largest, "peak": peaks,
            "model": "6+6 layers, d_model 512, d_ff 2048, 8 heads", "fairseq": "not run (needs wheels carried)"}
