"""The matmul roof of a training step: how fast its matrix multiplications run alone, with the same shapes.

A training step is "at X% of the matmul roof" when its matrix multiplications, replayed back to back on random
tensors of the same shapes and dtypes (so nothing else runs: no norms, softmax, dropout, casts, optimizer or
Python; each update's own matmuls after a warm-up replay of them, so oneDNN's per-shape kernels are built), take
X% of the step's wall time. Equivalently, the step's matmul FLOP/s divided by the replay's FLOP/s.
The shapes are recorded from the real steps (forward and backward) by a ``TorchDispatchMode``, so the roof is the
one of this model at this batch shape and precision: under bf16 autocast it is the bf16 roof.

Recorded: ``mm``, ``addmm``, ``bmm``, ``baddbmm`` (what ``nn.Linear`` and ``torch.matmul`` become), oneDNN's
linear on a packed weight (bf16 decoding, :mod:`nmt.kernels.packed`), and the fused attention kernels as the batched
matmuls they compute (2 forward, 4 backward).

The same recording counts the memory traffic of every other operation (:class:`Traffic`: the bytes of its tensor
arguments and results; views and allocations move nothing). Against the machine's copy bandwidth
(:func:`copy_bandwidth`) that gives the step's **memory ceiling**: the fraction of the roof it could reach if all
those operations ran as memory-bound passes at full bandwidth and nothing else (Python, dispatch, waits) took time.
A ceiling below a target says the target needs fewer passes (fused kernels), not faster ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nmt.machine.fp32_gemm import onednn_linear

aten = torch.ops.aten


@dataclass(frozen=True)
class Matmul:
    """One batched matmul ``(batch, m, k) @ (batch, k, n)`` in ``dtype`` (batch 1 for a plain mm); ``onednn``: it ran
    through oneDNN's linear op (the fp32 route of :mod:`nmt.machine.fp32_gemm`, bf16 decoding's packs), and is replayed
    so."""

    batch: int
    m: int
    k: int
    n: int
    dtype: torch.dtype
    onednn: bool = False

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k * self.n


def _mm(a: torch.Tensor, b: torch.Tensor) -> Matmul:
    return Matmul(1, a.shape[0], a.shape[1], b.shape[1], a.dtype)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> Matmul:
    return Matmul(a.shape[0], a.shape[1], a.shape[2], b.shape[2], a.dtype)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backward: bool) -> list[Matmul]:
    """The batched matmuls of attention over (B, H, T, D) tensors: scores and output; backward: the four
    gradients (dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q)."""
    heads, tq, tk, d, dv = q.shape[0] * q.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]
    forward = [Matmul(heads, tq, d, tk, q.dtype), Matmul(heads, tq, tk, dv, q.dtype)]
    if not backward:
        return forward
    return [Matmul(heads, tk, tq, dv, q.dtype), Matmul(heads, tq, dv, tk, q.dtype),
            Matmul(heads, tq, tk, d, q.dtype), Matmul(heads, tk, tq, d, q.dtype)]


_RULES: dict[Any, Callable[..., list[Matmul]]] = {
    aten.mm.default: lambda a, b, *_: [_mm(a, b)],
    aten.addmm.default: lambda _bias, a, b, *_: [_mm(a, b)],
    aten.bmm.default: lambda a, b, *_: [_bmm(a, b)],
    aten.baddbmm.default: lambda _bias, a, b, *_: [_bmm(a, b)],
}
if hasattr(torch.ops.mkldnn, "_linear_pointwise"):  # (x (M, K), packed weight (N, K), bias, ...)
    _RULES[torch.ops.mkldnn._linear_pointwise.default] = lambda x, w, *_: [Matmul(1, x.shape[0], x.shape[1],
                                                                                  w.shape[0], x.dtype, True)]
for _name in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"):
    if hasattr(aten, _name):
        _RULES[getattr(aten, _name).default] = lambda q, k, v, *_: _attention(q, k, v, backward=False)
    if hasattr(aten, _name + "_backward"):  # (grad_out, q, k, v, ...)
        _RULES[getattr(aten, _name + "_backward").default] = lambda _g, q, k, v, *_: _attention(q, k, v, True)


@dataclass
class Traffic:
    """The operations other than matmuls that ran, and the bytes of their tensor arguments and results: an upper
    bound on what they read and write (an in-place operand counts once read and once written, as it is; ``copy_``'s
    destination counts as read too)."""

    ops: int = 0
    bytes: int = 0

    def add(self, other: Traffic) -> Traffic:
        return Traffic(self.ops + other.ops, self.bytes + other.bytes)


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _moves_memory(func: Any) -> bool:
    """False for views (their results alias their inputs; ``_unsafe_view`` is one without saying so) and allocations
    without a fill (``empty``, ``new_empty``, ``empty_strided``, ``empty_like``): they touch no element."""
    name = func.__name__.split(".")[0]
    return not (func.is_view or name == "_unsafe_view" or name.removeprefix("new_").startswith("empty"))


class MatmulRecorder(TorchDispatchMode):
    """Records every matmul that runs inside it (forward and backward) as :class:`Matmul` shapes, and every other
    operation's traffic (:class:`Traffic`)."""

    def __init__(self) -> None:
        super().__init__()
        self.matmuls: list[Matmul] = []
        self.traffic = Traffic()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        rule = _RULES.get(func)
        if rule is not None:
            self.matmuls.extend(rule(*args))
        result = func(*args, **kwargs)
        if rule is None and _moves_memory(func):
            moved = _tensor_bytes(list(args)) + _tensor_bytes(list(kwargs.values())) + _tensor_bytes(result)
            self.traffic = self.traffic.add(Traffic(1, moved))
        return result


def record(fn: Callable[[], Any]) -> list[Matmul]:
    """The matmuls that ``fn()`` runs."""
    return record_step(fn)[0]


def record_step(fn: Callable[[], Any]) -> tuple[list[Matmul], Traffic]:
    """The matmuls that ``fn()`` runs and the traffic of its other operations."""
    with MatmulRecorder() as recorder:
        fn()
    return recorder.matmuls, recorder.traffic


def copy_bandwidth(device: torch.device, megabytes: int = 64, repeats: int = 5) -> float:
    """Bytes per second read and written by copying a ``megabytes`` buffer (larger than the caches) into another:
    the fastest of ``repeats`` copies, with the threads a training step uses."""
    source = torch.ones(megabytes * 2**20 // 4, device=device)
    target = torch.empty_like(source)
    target.copy_(source)  # pages mapped
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        target.copy_(source)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * source.numel() * source.element_size() / best


def replay_seconds(matmuls: list[Matmul], device: torch.device, repeats: int = 3) -> float:
    """Fastest of ``repeats`` back-to-back replays of ``matmuls`` on random tensors of the same shapes."""
    operands: dict[Matmul, tuple[torch.Tensor, torch.Tensor]] = {}
    for mm in matmuls:
        if mm not in operands:  # oneDNN's linear takes the weight as (n, k)
            b_shape = (mm.batch, mm.n, mm.k) if mm.onednn else (mm.batch, mm.k, mm.n)
            operands[mm] = (torch.randn(mm.batch, mm.m, mm.k, device=device).to(mm.dtype),
                            torch.randn(*b_shape, device=device).to(mm.dtype))
    calls = [(*operands[mm], mm.onednn) for mm in matmuls]

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def once() -> float:
        sync()
        started = time.perf_counter()
        for a, b, onednn in calls:
            if onednn:
                onednn_linear(a[0], b[0], None)
            elif a.shape[0] == 1:
                torch.mm(a[0], b[0])
            else:
                torch.bmm(a, b)
        sync()
        return time.perf_counter() - started

    once()  # warm-up: kernel selection, oneDNN primitive creation
    return min(once() for _ in range(repeats))


def roof_report(updates: list[list[Matmul]], step_seconds: float, device: torch.device,
                traffic: Traffic | None = None, bandwidth: float | None = None) -> dict[str, Any]:
    """The steps' matmul FLOPs, the replay's rate (the roof) and the steps' rate against it; with the ``traffic``
    of the same updates' other operations and the machine's copy ``bandwidth`` (bytes/s), their memory ceiling
    (module doc): ``replay / (replay + traffic.bytes / bandwidth)``.

    ``updates`` holds each timed update's matmuls; each update is replayed on its own (:func:`replay_seconds`: a
    warm-up, then the fastest of three), so the roof is the speed of its shapes with their oneDNN primitives built.
    Replaying several updates' shapes back to back measured primitive creation instead: bf16 matmuls get a new
    primitive for every new shape (~3.5 ms for a (4000, 256) x (256, 1024) product that then runs in 0.7 ms) and
    oneDNN's cache holds 64, so the bf16 roof of the bench model read 800 GFLOP/s where its matmuls run at ~1,770.
    """
    matmuls = [mm for update in updates for mm in update]
    flops = sum(mm.flops for mm in matmuls)
    replay = sum(replay_seconds(update, device) for update in updates if update)
    dtypes: dict[str, int] = {}
    for mm in matmuls:
        name = str(mm.dtype).removeprefix("torch.")
        dtypes[name] = dtypes.get(name, 0) + mm.flops
    report: dict[str, Any] = {
        "matmuls": len(matmuls), "matmul_gflop": flops / 1e9,
        "matmul_flop_share_by_dtype": {k: v / flops for k, v in dtypes.items()} if flops else {},
        "replay_seconds": replay, "step_seconds": step_seconds,
        "roof_gflops": flops / replay / 1e9 if replay else 0.0,
        "step_gflops": flops / step_seconds / 1e9 if step_seconds else 0.0,
        "fraction_of_roof": replay / step_seconds if step_seconds else 0.0,
    }
    if traffic is not None and bandwidth:
        memory_seconds = traffic.bytes / bandwidth
        report.update({
            "other_ops": traffic.ops, "other_gbytes": traffic.bytes / 1e9, "bandwidth_gbytes_per_s": bandwidth / 1e9,
            "other_memory_seconds": memory_seconds,
            "memory_ceiling": replay / (replay + memory_seconds) if replay + memory_seconds else 0.0,
        })
    return report
