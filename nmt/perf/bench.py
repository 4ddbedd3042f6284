"""Speed measurements: training throughput, peak memory and decoding speed on prepared data (``nmt bench``).

Training is timed through the real :meth:`nmt.training.loop.Trainer.train_step` (collation, forward, loss, backward,
clipping, optimizer) from wall clock over a fixed run of batches after a warm-up; every repeat replays the same
batches so the repeats differ only by noise. Decoding goes through :class:`nmt.inference.translator.Translator` (the
``nmt translate`` path: token-budget batches, beam search or greedy) on the first N test sentences. Each figure is
reported as the median of the repeats with its min and max, and the machine's load average is recorded before and
after, since a shared machine makes every number here smaller.

Benchmarks are measurements, never timed tests: nothing here asserts a speed.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nmt.config import Config
from nmt.machine.hardware import describe_machine, machine_info
from nmt.machine.runtime import Runtime, setup, teardown
from nmt.perf.roof import copy_bandwidth
from nmt.training.loader import BatchLoader

if TYPE_CHECKING:
    from nmt.data.batching import Batch
    from nmt.training.loop import Trainer

@dataclass(frozen=True)
class BenchSettings:
    """What ``nmt bench`` runs.

    Attributes:
        steps: timed training updates per repeat; None times one whole epoch (every batch once, so two tools or
            settings compared this way consume exactly the same sentences, free of batch-sampling noise).
        warmup: untimed updates first (allocator, autocast caches, ``torch.compile``).
        repeats: timed repeats of the training and of each decoding mode.
        decode_sentences: test sentences decoded per repeat (0: no decoding).
        beam: beam size of the beam-search measurement (greedy is measured too).
        checkpoint: decode with these trained weights instead of the freshly trained-for-a-few-steps model (an
            untrained model rambles until the length limit, which is slower than real decoding).
        roof_samples: updates (spread over the timed ones) on which the step is compared with its matmul roof
            (:mod:`nmt.perf.roof`); 0 skips it.
    """

    steps: int | None = 20
    warmup: int = 3
    repeats: int = 3
    decode_sentences: int = 200
    beam: int = 4
    checkpoint: str | None = None
    roof_samples: int = 8


def summarize(values: list[float]) -> dict[str, Any]:
    """Median, min, max and relative spread ((max - min) / median) of the repeats."""
    median = statistics.median(values)
    return {"median": median, "min": min(values), "max": max(values),
            "spread": (max(values) - min(values)) / median if median else 0.0, "runs": values}


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if platform.system() == "Darwin" else peak / 1024


def load_average() -> list[float]:
    """1-, 5- and 15-minute load averages (empty where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_trainer(cfg: Config, runtime: Runtime) -> Trainer:
    from nmt.training.loop import Trainer

    return Trainer(cfg, runtime)


def time_training(trainer: Trainer, steps: int | None, warmup: int, repeats: int,
                  roof_samples: int = 0) -> dict[str, Any]:
    """Throughput of ``trainer.train_step`` over ``steps`` updates (after ``warmup``), ``repeats`` times; with
    ``roof_samples``, also the step against its matmul roof on that many updates spread over the timed ones.

    Every repeat replays the same batches of epoch 1 (the first ``warmup`` batches warm up, the next ``steps`` are
    timed, wrapping around to the epoch's start), so repeats see identical shapes. ``steps=None`` times every
    update of the epoch once.
    """
    batches = trainer.epoch_batches(1)
    uf = trainer.cfg.train.update_freq
    steps = steps if steps is not None else max(len(batches) // uf, 1)
    needed = (warmup + steps) * uf
    chunks = [batches[i % len(batches)] for i in range(needed)]
    device = trainer.rt.device
    data = trainer.epoch_data(1)
    loader = BatchLoader(device)  # as in training: collated ahead, pinned on CUDA

    def update(k: int) -> tuple[float, float, int]:
        indices = chunks[k * uf:(k + 1) * uf]
        following = chunks[(k + 1) * uf:(k + 2) * uf] or None
        stats = trainer.train_step(loader.get(data, (0, k), indices, (0, k + 1), following))
        return stats["src_tokens"], stats["tgt_tokens"], sum(len(ix) for ix in indices)

    try:
        # the copy bandwidth first, while the process is small: its two buffers then raise no peak RSS reported here
        bandwidth = copy_bandwidth(device) if roof_samples > 0 else 0.0
        result = _timed_repeats(update, device, steps, warmup, repeats, uf)
        result["peak_rss_mb"] = peak_rss_mb()  # before the roof's replay allocates its own operands
        if roof_samples > 0:
            picks = sorted({warmup + (i * steps) // roof_samples for i in range(roof_samples)})
            replayed = [loader.get(data, (1, k), chunks[k * uf:(k + 1) * uf]) for k in picks]
            result["roof"] = matmul_roof(trainer, replayed, bandwidth)
        return result
    finally:
        loader.close()


def matmul_roof(trainer: Trainer, updates: list[list[Batch]], bandwidth: float) -> dict[str, Any]:
    """The training step against its matmul roof (:mod:`nmt.perf.roof`) on ``updates``: each is timed once through
    ``train_step`` (after one untimed run of it), and run once more to record its matmuls and the traffic of its
    other operations, which the machine's copy ``bandwidth`` (bytes/s, :func:`nmt.perf.roof.copy_bandwidth`) turns into
    the step's memory ceiling."""
    from nmt.perf.roof import Traffic, record_step, roof_report

    device = trainer.rt.device
    seconds, matmuls, traffic = 0.0, [], Traffic()  # matmuls: one list per update, replayed on its own
    for batches in updates:
        trainer.train_step(batches)
        _sync(device)
        started = time.perf_counter()
        trainer.train_step(batches)
        _sync(device)
        seconds += time.perf_counter() - started
        recorded, moved = record_step(functools.partial(trainer.train_step, batches))
        matmuls.append(recorded)
        traffic = traffic.add(moved)
    trainer.settle()
    report = roof_report(matmuls, seconds, device, traffic, bandwidth)
    report["updates"] = len(updates)
    return report


def _timed_repeats(update: Callable[[int], tuple[float, float, int]], device: torch.device, steps: int, warmup: int,
                   repeats: int, uf: int) -> dict[str, Any]:
    """Run ``update(k)`` for the ``warmup`` updates, then time updates ``warmup .. warmup + steps`` ``repeats``
    times; ``update`` returns the source tokens, target tokens and sentences of update ``k``."""
    for k in range(warmup):
        update(k)
    runs: dict[str, list[float]] = {"src_tgt_tokens_per_s": [], "tgt_tokens_per_s": [], "sentences_per_s": [],
                                    "steps_per_s": []}
    for _ in range(repeats):
        src = tgt = sents = 0.0
        _sync(device)
        started = time.perf_counter()
        for k in range(warmup, warmup + steps):
            s, t, n = update(k)
            src, tgt, sents = src + s, tgt + t, sents + n
        _sync(device)
        seconds = time.perf_counter() - started
        runs["src_tgt_tokens_per_s"].append((src + tgt) / seconds)
        runs["tgt_tokens_per_s"].append(tgt / seconds)
        runs["sentences_per_s"].append(sents / seconds)
        runs["steps_per_s"].append(steps / seconds)
    result: dict[str, Any] = {"steps": steps, "warmup": warmup, "repeats": repeats, "update_freq": uf,
                              "sentences": int(sents)}
    result.update({name: summarize(values) for name, values in runs.items()})
    return result


def time_decoding(translate: Callable[[list[list[int]], int], list[list[int]]], sources: list[list[int]],
                  beam: int, repeats: int, device: torch.device) -> dict[str, Any]:
    """Sentences/s and generated tokens/s (EOS included) of ``translate(sources, beam)``, ``repeats`` times."""
    translate(sources[: min(len(sources), 8)], beam)  # warm-up
    sents, tokens = [], []
    for _ in range(repeats):
        _sync(device)
        started = time.perf_counter()
        outputs = translate(sources, beam)
        _sync(device)
        seconds = time.perf_counter() - started
        sents.append(len(sources) / seconds)
        tokens.append(sum(len(o) + 1 for o in outputs) / seconds)
    return {"beam": beam, "sentences": len(sources), "sentences_per_s": summarize(sents),
            "tokens_per_s": summarize(tokens),
            "mean_output_tokens": sum(len(o) + 1 for o in outputs) / max(len(outputs), 1)}


def _test_sources(cfg: Config, n: int) -> list[list[int]]:
    """The first ``n`` non-empty test sources (dev when the pair has no test split)."""
    from nmt.data.binarized import load_split

    pair_dir = Path(cfg.data.data_dir) / cfg.data.pair
    src = cfg.data.pair.split("-")[0]
    split = "test" if (pair_dir / "bin" / f"test.{src}.tokens.npy").is_file() else "dev"
    rows = [r.tolist() for r in load_split(pair_dir, split, src) if len(r)]
    return rows[:n]


def _decoder(trainer: Trainer,
             settings: BenchSettings) -> tuple[Callable[[list[list[int]], int], list[list[int]]], Runtime]:
    """The decoding function under test, and the runtime (device, resolved precision) it decodes with."""
    from nmt.checkpoint.files import load_checkpoint
    from nmt.inference.restore import restore_model
    from nmt.inference.translator import Translator

    device = trainer.rt.device
    if settings.checkpoint:
        model, config, tokenizer = restore_model(load_checkpoint(settings.checkpoint, map_location="cpu"), device,
                                                 path=settings.checkpoint)
        translator = Translator(model, config, tokenizer, device, precision=trainer.cfg.decode.precision)
    else:
        trainer.model.eval()
        translator = Translator(trainer.model, trainer.cfg, trainer.data.tokenizer, device)

    def translate(sources: list[list[int]], beam: int) -> list[list[int]]:
        return [nbest[0].tokens for nbest in translator.translate_ids(sources, beam=beam, nbest=1)]

    return translate, translator.runtime


def run_bench(cfg: Config, settings: BenchSettings) -> dict[str, Any]:
    """Measure training throughput, peak memory and decoding speed for ``cfg``; returns a JSON-ready dict."""
    load_before = load_average()
    runtime = setup(cfg.train.device, cfg.train.precision)
    try:
        if runtime.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(runtime.device)
        trainer = make_trainer(cfg, runtime)
        n_params = sum(p.numel() for p in trainer.model.parameters())
        train = time_training(trainer, settings.steps, settings.warmup, settings.repeats,
                              settings.roof_samples)
        memory: dict[str, float] = {"peak_rss_mb": train.pop("peak_rss_mb")}
        if runtime.device.type == "cuda":
            memory["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated(runtime.device) / 2**20
        decode: dict[str, Any] = {}
        if settings.decode_sentences > 0:
            sources = _test_sources(cfg, settings.decode_sentences)
            translate, decoding = _decoder(trainer, settings)
            decode[f"beam{settings.beam}"] = time_decoding(translate, sources, settings.beam, settings.repeats,
                                                           runtime.device)
            decode["greedy"] = time_decoding(translate, sources, 1, settings.repeats, runtime.device)
            decode["checkpoint"] = settings.checkpoint
            decode["precision"] = decoding.precision
            decode["precision_reason"] = decoding.precision_reason
        memory["peak_rss_mb_after_decoding"] = peak_rss_mb()
    finally:
        teardown(runtime)
    return {
        "system": cfg.system, "pair": cfg.data.pair, "device": str(runtime.device), "precision": runtime.precision,
        "precision_reason": runtime.precision_reason, "machine": machine_info(), "compile": cfg.train.compile,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "cpu_count": os.cpu_count(),
        "parameters": n_params,
        "model": {"enc_layers": cfg.model.enc_layers, "dec_layers": cfg.model.dec_layers,
                  "d_model": cfg.model.d_model, "d_ff": cfg.model.d_ff, "n_heads": cfg.model.n_heads,
                  "attention": cfg.model.attention, "norm": cfg.model.norm, "fixnorm": cfg.model.fixnorm},
        "max_tokens": cfg.train.max_tokens, "train": train, "memory": memory, "decode": decode,
        "load_before": load_before, "load_after": load_average(),
    }


def _fmt(summary: dict[str, Any], digits: int = 0) -> str:
    return f"{summary['median']:,.{digits}f} (±{100 * summary['spread'] / 2:.0f}%)"


def format_report(result: dict[str, Any]) -> str:
    """A short human-readable table of :func:`run_bench`'s result."""
    t, m = result["train"], result["memory"]
    lines = [
        f"nmt bench: {result['system']} on {result['pair']}, {result['parameters'] / 1e6:.2f}M parameters, "
        f"{result['device']} ({result['threads']} threads), precision {result['precision']} "
        f"({result['precision_reason']})" + (", compiled" if result["compile"] else ""),
        f"machine: {describe_machine(result['machine'])}",
        f"load average before {result['load_before']} after {result['load_after']} "
        f"(cpu count {result['cpu_count']})",
        f"training ({t['steps']} steps x {t['repeats']} repeats after {t['warmup']} warm-up, median (±half range)):",
        f"  src+tgt tokens/s  {_fmt(t['src_tgt_tokens_per_s'])}",
        f"  tgt tokens/s      {_fmt(t['tgt_tokens_per_s'])}",
        f"  sentences/s       {_fmt(t['sentences_per_s'], 1)}",
        f"  updates/s         {_fmt(t['steps_per_s'], 2)}",
        *roof_lines(t.get("roof")),
        f"memory: peak RSS {m['peak_rss_mb']:.0f} MiB after training, {m['peak_rss_mb_after_decoding']:.0f} MiB "
        "after decoding" + (f"; CUDA max allocated {m['cuda_max_allocated_mb']:.0f} MiB"
                            if "cuda_max_allocated_mb" in m else ""),
    ]
    for name, d in result["decode"].items():
        if name in ("checkpoint", "precision", "precision_reason"):
            continue
        lines.append(f"decoding {name}, {result['decode']['precision']} ({d['sentences']} test sentences, "
                     f"{d['mean_output_tokens']:.1f} output tokens each): {_fmt(d['sentences_per_s'], 1)} "
                     f"sentences/s, {_fmt(d['tokens_per_s'])} tokens/s")
    if result["decode"].get("checkpoint"):
        lines.append(f"decoding weights: {result['decode']['checkpoint']}")
    return "\n".join(lines)


def roof_lines(roof: dict[str, Any] | None) -> list[str]:
    """The matmul-roof line of the report (none when it was not measured)."""
    if not roof:
        return []
    dtypes = ", ".join(f"{k} {100 * v:.0f}%" for k, v in roof["matmul_flop_share_by_dtype"].items())
    return [f"  matmul roof       {roof['roof_gflops']:.1f} GFLOP/s (the {roof['matmuls']} matmuls of "
            f"{roof['updates']} updates, {roof['matmul_gflop']:.1f} GFLOP, {dtypes}, replayed alone); the step runs "
            f"them at {roof['step_gflops']:.1f} GFLOP/s = {100 * roof['fraction_of_roof']:.0f}% of the roof"
            ] + memory_ceiling_lines(roof)


def memory_ceiling_lines(roof: dict[str, Any]) -> list[str]:
    """The memory-ceiling line of the report (:mod:`nmt.perf.roof`; none when the traffic was not recorded)."""
    if "memory_ceiling" not in roof:
        return []
    per_update = roof["updates"] or 1
    milliseconds = 1000 * roof["other_memory_seconds"] / per_update
    return [f"  memory ceiling    the other {roof['other_ops'] / per_update:,.0f} operations of an update move "
            f"{roof['other_gbytes'] / per_update:.2f} GB; at this machine's copy bandwidth "
            f"({roof['bandwidth_gbytes_per_s']:.1f} GB/s) that is {milliseconds:.0f} ms, so with these passes the "
            f"step reaches about {100 * roof['memory_ceiling']:.0f}% of the roof at best"]


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2)
