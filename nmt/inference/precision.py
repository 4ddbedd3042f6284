"""The decoding precision: ``decode.precision`` (``nmt translate --precision``) resolved for a device and a model.

fp32, bf16 and fp16 are chosen as for training (:func:`nmt.machine.runtime.choose_precision`); ``int8`` runs on CPU only
(:mod:`nmt.inference.int8`). ``decode.precision: auto`` picks the fastest of fp32, bf16 (only where native,
:mod:`nmt.machine.hardware`) and int8 by :func:`decode_speeds`: a short timing (about a second for the bench model) of
the model itself decoding a few beam-search steps of a probe batch in each arithmetic: encoder, cross-attention keys,
every decoder layer, the output projection and the beams' reordering, so the float work that quantization does not speed
up (norms, attention over the cache, the activations' quantization) is in the comparison. A probe of the matmuls alone
picked int8 on a CPU where bf16 decoded 7% faster end to end. int8 still wins only where it beats the best float
arithmetic by :data:`INT8_MARGIN`, since it costs a little accuracy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from nmt.errors import NmtError
from nmt.inference.int8 import INT8, int8_engine, quantize_for_decoding
from nmt.machine import hardware
from nmt.machine.runtime import Precision, choose_precision
from nmt.search.common import Seq2Seq
from nmt.vocab import BOS, EOS, SPECIALS

# the auto probe decodes PROBE_SENTENCES random sources of PROBE_LENGTH pieces at beam PROBE_BEAM for PROBE_STEPS
# steps, the fastest of PROBE_REPEATS timings after a warm-up
PROBE_SENTENCES, PROBE_LENGTH, PROBE_BEAM, PROBE_STEPS = 32, 24, 4, 6
PROBE_REPEATS = 2
INT8_MARGIN = 0.8  # int8's probe time must be below this fraction of the best float arithmetic's


def _time(run: Callable[[], object]) -> float:
    """The fastest of a few calls of ``run`` in seconds, after a warm-up call."""
    run()
    best = float("inf")
    for _ in range(PROBE_REPEATS):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


@dataclass(frozen=True)
class DecodeSpeeds:
    """Seconds of the probe's decoding steps in each arithmetic that can run fast here (bf16 only if native)."""

    seconds: dict[str, float]

    @property
    def best(self) -> str:
        """fp32 or bf16, whichever is faster; int8 only where it beats that by :data:`INT8_MARGIN`."""
        floats = {name: s for name, s in self.seconds.items() if name != INT8}
        best_float = min(floats, key=floats.__getitem__)
        if INT8 in self.seconds and self.seconds[INT8] < INT8_MARGIN * floats[best_float]:
            return INT8
        return best_float

    @property
    def reason(self) -> str:
        """``decoder-step probe, time relative to fp32: fp32 1.00, bf16 0.62, int8 0.48``."""
        base = self.seconds["fp32"]
        parts = ", ".join(f"{name} {s / base:.2f}" for name, s in self.seconds.items())
        return f"decoder-step probe, time relative to fp32: {parts}"


def _probe_run(model: nn.Module, vocab: int) -> Callable[[], object]:
    """A few beam-search steps of ``model`` (``start``/``step``/``select``) on random sources: start, widen to the
    beam, then steps each followed by a reordering of the beams within their sentences."""
    seeded = torch.Generator().manual_seed(0)  # never the global generator: runs must stay bitwise reproducible
    n, beam = PROBE_SENTENCES, PROBE_BEAM
    src = torch.randint(SPECIALS, vocab, (n, PROBE_LENGTH), generator=seeded)
    src[:, -1] = EOS
    tokens = torch.randint(SPECIALS, vocab, (PROBE_STEPS, n * beam), generator=seeded)
    widen = torch.arange(n).repeat_interleave(beam)
    reorder = (torch.arange(n)[:, None] * beam + torch.arange(beam).flip(0)).view(-1)  # (n, beam) -> (n * beam,)
    decoder = cast("Seq2Seq[Any]", model)

    def run() -> object:
        _, state = decoder.step(torch.full((n,), BOS), decoder.start(src))
        state = state.select(widen)
        for prev in tokens:
            log_probs, state = decoder.step(prev, state)
            state = state.select(reorder)
        return log_probs

    return run


def decode_speeds(model: nn.Module, vocab: int) -> DecodeSpeeds:
    """Time the probe's steps (:func:`_probe_run`) of the float32 ``model`` (CPU, eval mode, ``vocab`` pieces) in
    fp32, bf16 autocast (if native) and as its int8 copy."""
    candidates: dict[str, tuple[nn.Module, bool]] = {"fp32": (model, False)}
    if hardware.bf16_support().native:
        candidates["bf16"] = (model, True)
    candidates[INT8] = (quantize_for_decoding(model), False)
    seconds: dict[str, float] = {}
    with torch.no_grad():
        for name, (decoder, bf16) in candidates.items():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                seconds[name] = _time(_probe_run(decoder, vocab))
    return DecodeSpeeds(seconds)


def choose_decode_precision(name: str, device: torch.device, setting: str = "decode.precision",
                            model: nn.Module | None = None, vocab: int = 0) -> Precision:
    """:func:`nmt.machine.runtime.choose_precision` for decoding, which also knows ``int8`` (CPU only).

    ``auto`` on a CPU is the fastest arithmetic for ``model`` (of ``vocab`` pieces) by :func:`decode_speeds`
    (fp32 without a model); on other devices it is as for training.
    """
    if name == INT8:
        if device.type != "cpu":
            raise NmtError(f"{setting} 'int8' runs on CPU only; use bf16 or fp16 on {device.type}")
        return Precision(INT8, f"set by {setting}; {int8_engine()} engine")
    if name != "auto" or device.type != "cpu":
        return choose_precision(name, device, setting)
    if model is None:
        return Precision("fp32", "auto: no model to probe")
    speeds = decode_speeds(model, vocab)
    chosen = speeds.best
    engine = f", {int8_engine()} engine" if chosen == INT8 else ""
    return Precision(chosen, f"auto: {speeds.reason}{engine}")
