"""What this machine computes on: CPU model and ISA flags, native bf16 support, and a record for benchmark reports.

bf16 autocast pays off on a CPU only where bf16 matmuls run natively (AVX-512 BF16 or AMX on x86, the BF16
extension on Arm). Elsewhere PyTorch still runs them, but emulated: on an AVX2-only AMD EPYC a bf16 matmul ran at
0.9 GFLOP/s against 51 GFLOP/s in fp32, and a bf16 training step took a minute. oneDNN's own check
(``torch.ops.mkldnn._is_mkldnn_bf16_supported``) answers "no" on such a CPU, but "yes" on AVX-512 CPUs without
BF16 instructions (Skylake to Ice Lake), where oneDNN emulates bf16 several times slower than fp32; ``/proc/cpuinfo``
flags are not what oneDNN uses either (``ONEDNN_MAX_CPU_ISA`` caps it). So :func:`bf16_support` times bf16 and
fp32 matmuls on one thread (about 60 ms on a Sapphire Rapids core, 90 ms with oneDNN capped to AVX2; once per
process) and calls bf16 native only where oneDNN supports it and the timing confirms that it is faster than fp32.
Measured here (one thread, bf16 time / fp32 time): 0.17 native (AMX), 4.6 with oneDNN capped to AVX-512 without
BF16 (``ONEDNN_MAX_CPU_ISA=AVX512_CORE``), 72 capped to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``, where oneDNN's check
also says no, as on the AVX2-only AMD EPYC).
"""

from __future__ import annotations

import functools
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

import torch

from nmt.machine import allocator, fp32_gemm
from nmt.machine.cpu import ISA_FLAGS, cpu_flags, cpu_model

# flags of CPUs with bf16 arithmetic in hardware
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")

# bf16 matmuls on CPU go through oneDNN, which caches one primitive (with its packed weights and scratchpad) per
# input shape, 1024 by default. Token-budget batches have many shapes, so a 60-minute bf16 training process grew
# to ~5 GB RSS. Peak RSS after one bench epoch (95 updates, 2 threads): 3.48 GB with 1024, 2.32 GB with 64, 1.90 GB
# with 0, at 83 / 87 / 95 s (single runs, ~5% noise). Read by oneDNN when it creates its first primitive (so it is
# set before the probe's bf16 matmul too); a value the user set is kept.
ONEDNN_CACHE = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")

# the probe's matmuls, (M, K) @ (K, N): a small one (~17 MFLOP: ~8 ms in emulated bf16 on AVX2, ~0.05 ms natively)
# tells emulation apart; where bf16 is not clearly slower there, a larger one (~270 MFLOP, ~0.4 ms in native bf16)
# decides, since on the small one fixed costs blur a native CPU's advantage (bf16/fp32 time 0.4-0.8 there)
PROBE_SHAPES = ((128, 256, 256), (512, 512, 512))
CLEARLY_SLOWER = 2.0
PROBE_REPEATS = 10
PROBE_BUDGET_S = 0.04  # stop repeating a dtype once its timed calls took this long


@dataclass(frozen=True)
class Bf16Support:
    """Whether this CPU runs bf16 matmuls natively, and the evidence.

    Attributes:
        native: bf16 autocast is worth using here.
        onednn: oneDNN's own bf16 check; None where this PyTorch has none.
        flags: the CPU's native-bf16 ISA flags (from /proc/cpuinfo; empty where unknown).
        slowdown: time of a bf16 matmul over that of the same fp32 matmul (below 1: bf16 is faster).
    """

    native: bool
    onednn: bool | None
    flags: tuple[str, ...]
    slowdown: float

    @property
    def reason(self) -> str:
        """One phrase saying why bf16 is (not) native, with the measured speed ratio."""
        if self.native:
            return (f"CPU has native bf16 ({', '.join(self.flags) or 'oneDNN bf16'}): bf16 matmul "
                    f"{1 / self.slowdown:.1f}x faster than fp32")
        why = "oneDNN has no bf16 kernels for it" if self.onednn is False else "emulated"
        return f"no native bf16 on this CPU ({why}): bf16 matmul {format_ratio(self.slowdown)} slower than fp32"


def format_ratio(ratio: float) -> str:
    """``48x`` or ``2.3x``: two significant digits are plenty for a timing."""
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def onednn_bf16() -> bool | None:
    """oneDNN's bf16 check (False: no bf16 kernels for this CPU); None where this PyTorch does not have it."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if check is None or not torch.backends.mkldnn.is_available():
        return None
    try:
        return bool(check())
    except RuntimeError:
        return None


def time_matmul(dtype: torch.dtype, shape: tuple[int, int, int]) -> float:
    """Seconds of one ``shape`` = (M, K, N) matmul in ``dtype`` on the CPU (the fastest of a few, after a warm-up)."""
    m, k, n = shape
    seeded = torch.Generator().manual_seed(0)  # never the global generator: runs must stay bitwise reproducible
    a, b = torch.randn(m, k, generator=seeded).to(dtype), torch.randn(k, n, generator=seeded).to(dtype)
    torch.mm(a, b)  # first call: library initialisation, kernel generation
    best, spent = float("inf"), 0.0
    for _ in range(PROBE_REPEATS):
        started = time.perf_counter()
        torch.mm(a, b)
        seconds = time.perf_counter() - started
        best, spent = min(best, seconds), spent + seconds
        if spent > PROBE_BUDGET_S:
            break
    return max(best, 1e-9)


@functools.cache
def bf16_support() -> Bf16Support:
    """Probe this CPU once per process: oneDNN's check, the ISA flags, and a bf16-vs-fp32 matmul timing."""
    os.environ.setdefault(*ONEDNN_CACHE)  # before oneDNN's first primitive (the probe's bf16 matmul)
    flags = tuple(flag for flag in NATIVE_BF16_FLAGS if flag in cpu_flags())
    onednn = onednn_bf16()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per-core speed: on a busy machine a second thread's wake-up costs milliseconds
    try:
        with torch.autocast("cpu", enabled=False):
            for shape in PROBE_SHAPES:
                slowdown = time_matmul(torch.bfloat16, shape) / time_matmul(torch.float32, shape)
                if slowdown >= CLEARLY_SLOWER:
                    break
    finally:
        torch.set_num_threads(threads)
    return Bf16Support(native=onednn is not False and slowdown < 1.0, onednn=onednn, flags=flags, slowdown=slowdown)


def machine_info() -> dict[str, Any]:
    """What a benchmark figure ran on: CPU model, ISA flags that matter, threads, torch, the GPU if any."""
    bf16 = bf16_support()
    return {
        "cpu": cpu_model(),
        "isa": [flag for flag in ISA_FLAGS if flag in cpu_flags()],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_native": bf16.native,
        "bf16_over_fp32_matmul_time": round(bf16.slowdown, 3),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "torch": str(torch.__version__),
        "allocator": allocator.active(),
        "fp32_gemm": fp32_gemm.choice().describe(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "platform": platform.platform(),
    }


MACHINE_LINE = "machine: "  # how a run's train.log names its machine (nmt.training.loop writes it, reports read it)


def describe_machine(info: dict[str, Any]) -> str:
    """One line of :func:`machine_info`'s record, e.g. ``Intel(R) Xeon(R) Processor (avx2, avx512f, ...), ...``."""
    isa = ", ".join(info["isa"]) or info["torch_cpu_capability"]
    bf16 = "native bf16" if info["bf16_native"] else "no native bf16"
    text = (f"{info['cpu']} ({isa}; {bf16}), {info['threads']} threads of {info['cpu_count']} CPUs, "
            f"torch {info['torch']}" + (f", malloc {info['allocator']}" if info.get("allocator") else "")
            + (f", {info['fp32_gemm']}" if info.get("fp32_gemm") else ""))
    return text + (f", GPU {info['cuda']}" if info.get("cuda") else "")
