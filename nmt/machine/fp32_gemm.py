"""Which library runs this CPU's fp32 matmuls fastest, MKL or oneDNN: a probe, remembered per machine.

PyTorch's CPU build sends every fp32 matmul to Intel MKL. MKL takes generic code paths on AMD CPUs: on an AMD EPYC
Zen 5 (AVX-512) MKL ran the CPU preset's products at 90-100 GFLOP/s on one thread and oneDNN (PyTorch's other CPU
matmul library, ``torch.ops.mkldnn._linear_pointwise``) the same fp32 products at 190-230, forward and input
gradient alike, the weight gradient at 100-180 (``scripts/probe_gemm``, ``bench/gemm-probe-*.md``); on a Zen 3
(AVX2) the two were level. So the choice is measured, not assumed from the vendor: :func:`choice` times the three
products of a Linear layer's training step (forward ``x W^T``, input gradient ``G W``, weight gradient ``G^T X``)
through both libraries at the process's thread count, and takes oneDNN for a product only where it is clearly
faster (:data:`MARGIN`). Both compute in fp32 (oneDNN's fp32 matmul is exact fp32 FMA arithmetic unless reduced
precision is asked for, which nothing here does): the same values within fp32 rounding, tests/test_fp32_gemm.py.

The result is kept in a small JSON file per machine (:func:`cache_path`; keyed by CPU, ISA flags, torch and thread
count), so every process on a machine takes the same route and a resumed run computes as the interrupted one did.
``NMT_FP32_GEMM=mkl`` or ``=onednn`` sets the route without a probe; ``auto`` (the default) probes.
:mod:`nmt.kernels.linear` follows the choice; the plain modules of :mod:`nmt.modules` always call ``F.linear``.

Decoding has a route of its own (``decode``): a beam-search step multiplies a few hundred rows by each weight, which
oneDNN runs on a weight packed once into its blocked layout (:mod:`nmt.kernels.packed`), with none of the training
route's per-call copies. The probe times a decoder step's products (:data:`DECODE_SHAPES`) both ways and takes the
packed route where it is faster by :data:`DECODE_MARGIN`. On an AMD EPYC Zen 4 the probe rated it 1.37-1.70x (MKL's
3,900-wide output projection is its slowest product there) while the training products stayed near 1.1x, and beam
search decoded 0.99-1.17x the output pieces/s of the MKL route (median 1.05x; ``bench/decode-route-2026-12-08/``).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.atomic import atomic_write_text
from nmt.machine.cpu import ISA_FLAGS, cpu_flags, cpu_model

ENV = "NMT_FP32_GEMM"
ROUTES = ("auto", "mkl", "onednn")
PRODUCTS = ("forward", "grad_input", "grad_weight")
DECODE = "decode"  # decoding's products, with packed weights (module doc)
PROBED = (*PRODUCTS, DECODE)
MARGIN = 1.15  # oneDNN is taken for a product only when MKL's time is at least this multiple of oneDNN's
DECODE_MARGIN = 1.05  # the same for decoding, whose oneDNN route adds no copy (only the rows' padding, as MKL's)
# a decoding step's products: 64 sentences x beam 4 rows through the CPU preset's decoder (d_model 256, d_ff 1,024)
# and a ~4,000-piece output projection; timed as one sum per route
DECODE_ROWS, DECODE_SHAPES = 256, ((256, 768), (256, 256), (256, 1024), (1024, 256), (256, 3900))
# the probe's Linear layer: 1,024 rows, 256 -> 1,024 (the CPU preset's feed-forward; ~0.5 GFLOP a product, a few ms)
PROBE_ROWS, PROBE_IN, PROBE_OUT = 1024, 256, 1024
PROBE_REPEATS = 3  # timings of a product per route and round; the fastest counts
# rounds of both routes in turn; a product's speed-up is the median of the rounds' ratios. One best-of-5 per route
# was at the mercy of a moment's noise, which the cache then keeps: on Intel Sapphire Rapids class (2 threads), quiet
# back-to-back probes rated oneDNN's forward 1.63x then 1.03x, 1.01x, 1.01x of MKL, and one taken beside two busy
# training processes 0.20x; a single 1.63x would have routed the forward to oneDNN for good
PROBE_ROUNDS = 7
CACHE_VERSION = 4  # 2: the weight gradient with the wider operand as oneDNN's weight; 3: median of rounds;
# 4: the decoding route
ONEDNN_CACHE = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")  # as nmt.machine.hardware: before oneDNN's first primitive


@dataclass(frozen=True)
class Fp32Gemm:
    """The library of each fp32 product (``"mkl"`` or ``"onednn"``) and the evidence.

    Attributes:
        forward, grad_input, grad_weight: the route of each product of a Linear layer.
        decode: the route of decoding's products (no autograd; oneDNN with packed weights).
        speedups: MKL time over oneDNN time per product of :data:`PROBED` (above 1: oneDNN is faster); empty when
            not probed.
        threads: the thread count the probe ran at.
        source: ``probe``, ``cache`` (a probe of an earlier process on this machine) or ``NMT_FP32_GEMM``.
    """

    forward: str
    grad_input: str
    grad_weight: str
    decode: str
    speedups: dict[str, float]
    threads: int
    source: str

    def uses_onednn(self) -> bool:
        """Whether some training product goes to oneDNN."""
        return "onednn" in (self.forward, self.grad_input, self.grad_weight)

    def describe(self) -> str:
        """``fp32 GEMM oneDNN (oneDNN/MKL speed 2.2x/2.3x/1.5x: forward/grad input/grad weight)``, ``fp32 GEMM MKL
        (...)`` or ``fp32 GEMM MKL (set by NMT_FP32_GEMM)``."""
        routes = {self.forward, self.grad_input, self.grad_weight}
        name = {"onednn": "oneDNN", "mkl": "MKL"}
        if len(routes) == 1:
            head = name[routes.pop()]
        else:
            head = "/".join(name[r] for r in (self.forward, self.grad_input, self.grad_weight))
        if not self.speedups:
            return f"fp32 GEMM {head} (set by {self.source})"
        ratios = "/".join(f"{self.speedups[p]:.1f}x" for p in PRODUCTS)
        decode = f"{name[self.decode]} {self.speedups[DECODE]:.2f}x"
        return f"fp32 GEMM {head} (oneDNN/MKL speed {ratios}: forward/grad input/grad weight; decoding {decode})"


def onednn_available() -> bool:
    """Whether this PyTorch has oneDNN's linear op."""
    ops = getattr(torch.ops, "mkldnn", None)
    return bool(torch.backends.mkldnn.is_available()) and hasattr(ops, "_linear_pointwise")


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ weight^T + bias`` through oneDNN (``weight`` dense or packed by ``_reorder_linear_weight``)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def onednn_pack(weight: Tensor) -> Tensor:
    """``weight`` (out, in) reordered once into oneDNN's blocked layout, for :func:`onednn_linear` (in its dtype)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, None)


def onednn_grad_weight(g: Tensor, x: Tensor) -> Tensor:
    """``g^T x`` (the weight gradient, (out, in)) through oneDNN, with the wider of ``g`` and ``x`` as oneDNN's
    weight operand and the other copied contiguous as its input.

    oneDNN's linear runs fastest with many output columns: for a layer wider out than in (the tied output
    projection, 256 -> 3,900; the feed-forward's 256 -> 1,024) it computes ``(x^T g)^T`` and returns that transposed
    view. On AMD Zen 5 at 4,608 rows this took the output projection's weight gradient from 143 to 199 GFLOP/s on one
    thread and 193 to 306 on two (MKL: 95 and 179), the feed-forward's from 124 to 165 and 185 to 261; layers
    narrower out than in keep ``g^T`` as the input (the other order was 0.65-0.76x there)."""
    if g.size(1) >= x.size(1):
        return onednn_linear(x.t().contiguous(), g.t(), None).t()
    return onednn_linear(g.t().contiguous(), x.t(), None)


_PRODUCTS: dict[str, dict[str, Callable[..., Tensor]]] = {
    "onednn": {"forward": onednn_linear,
               "grad_input": lambda g, w: onednn_linear(g, w.t(), None),
               "grad_weight": onednn_grad_weight},
    "mkl": {"forward": F.linear, "grad_input": torch.mm, "grad_weight": lambda g, x: torch.mm(g.t(), x)},
}


def product(name: str, route: str) -> Callable[..., Tensor]:
    """The function computing product ``name`` through ``route``:
    forward ``(x, w, b) -> x w^T + b``, grad_input ``(g, w) -> g w``, grad_weight ``(g, x) -> g^T x``."""
    return _PRODUCTS[route][name]


def _best_seconds(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(PROBE_REPEATS):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return max(best, 1e-9)


def _speedup(routes: Mapping[str, Callable[[], object]]) -> float:
    """MKL time over oneDNN time of one product: the median over :data:`PROBE_ROUNDS` rounds that time both routes
    in turn (after one untimed call each: library initialisation, kernel generation)."""
    for fn in routes.values():
        fn()
    return statistics.median(_best_seconds(routes["mkl"]) / _best_seconds(routes["onednn"])
                             for _ in range(PROBE_ROUNDS))


def probe() -> dict[str, float]:
    """MKL time over oneDNN time for each product at the current thread count (:func:`_speedup`; a few hundred
    ms)."""
    os.environ.setdefault(*ONEDNN_CACHE)
    seeded = torch.Generator().manual_seed(0)  # never the global generator: runs stay bitwise reproducible
    x = torch.randn(PROBE_ROWS, PROBE_IN, generator=seeded)
    w = torch.randn(PROBE_OUT, PROBE_IN, generator=seeded)
    b = torch.randn(PROBE_OUT, generator=seeded)
    g = torch.randn(PROBE_ROWS, PROBE_OUT, generator=seeded)
    args = {"forward": (x, w, b), "grad_input": (g, w), "grad_weight": (g, x)}
    speedups = {}
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        for name in PRODUCTS:
            routes = {route: functools.partial(product(name, route), *args[name]) for route in ("mkl", "onednn")}
            speedups[name] = round(_speedup(routes), 3)
        speedups[DECODE] = round(_speedup(_decode_routes(seeded)), 3)
    return speedups


def _decode_routes(seeded: torch.Generator) -> dict[str, Callable[[], object]]:
    """A decoding step's products (:data:`DECODE_SHAPES`) through MKL (``F.linear``) and through oneDNN on weights
    packed once (what :mod:`nmt.kernels.linear` runs when decoding on each route)."""
    x = torch.randn(DECODE_ROWS, max(d_in for d_in, _ in DECODE_SHAPES), generator=seeded)
    layers = [(torch.randn(d_out, d_in, generator=seeded), torch.randn(d_out, generator=seeded))
              for d_in, d_out in DECODE_SHAPES]
    packs = [onednn_pack(w) for w, _ in layers]
    inputs = [x[:, : w.size(1)].contiguous() for w, _ in layers]

    def mkl() -> None:
        for x_in, (w, b) in zip(inputs, layers, strict=True):
            F.linear(x_in, w, b)

    def onednn() -> None:
        for x_in, pack, (_, b) in zip(inputs, packs, layers, strict=True):
            onednn_linear(x_in, pack, b)

    return {"mkl": mkl, "onednn": onednn}


def cache_path() -> Path:
    """``$NMT_CACHE_DIR/fp32-gemm.json``, else ``$XDG_CACHE_HOME/nmt/...``, else ``~/.cache/nmt/...``."""
    root = os.environ.get("NMT_CACHE_DIR")
    if root:
        return Path(root) / "fp32-gemm.json"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "nmt" / "fp32-gemm.json"


def machine_key(threads: int) -> str:
    """What a probe's result depends on: CPU model, ISA flags, torch, oneDNN's ISA cap, threads."""
    isa = ",".join(flag for flag in ISA_FLAGS if flag in cpu_flags())
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    return f"{cpu_model()}|{isa}|torch {torch.__version__}|isa cap {cap}|{threads} threads"


def _read_cache(key: str) -> dict[str, float] | None:
    try:
        entries = json.loads(cache_path().read_text(encoding="utf-8"))
        speedups = entries["entries"][key] if entries.get("version") == CACHE_VERSION else None
        if isinstance(speedups, dict) and set(speedups) == set(PROBED):
            return {name: float(speedups[name]) for name in PROBED}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # no cache, or one this version cannot read: probe again (a cache is never worth an error)
    return None


def _write_cache(key: str, speedups: dict[str, float]) -> None:
    path = cache_path()
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(entries, dict) or entries.get("version") != CACHE_VERSION:
            entries = {}
    except (OSError, ValueError):
        entries = {}
    entries = {"version": CACHE_VERSION, "entries": {**entries.get("entries", {}), key: speedups}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # a read-only home: the next process probes again


def _routes(speedups: dict[str, float]) -> dict[str, str]:
    """The route of each product of :data:`PROBED` (decoding's only when probed: an older caller's speed-ups may
    lack it)."""
    routes = {name: "onednn" if speedups[name] >= MARGIN else "mkl" for name in PRODUCTS}
    if DECODE in speedups:
        routes[DECODE] = "onednn" if speedups[DECODE] >= DECODE_MARGIN else "mkl"
    return routes


def setting(raw: str) -> str:
    """The route that ``NMT_FP32_GEMM=raw`` asks for (``auto`` when empty); an unknown value is an error naming it."""
    from nmt.errors import NmtError

    value = raw.strip().lower() or "auto"
    if value not in ROUTES:
        raise NmtError(f"{ENV}={raw!r}: choose one of {', '.join(ROUTES)}")
    return value


def choice() -> Fp32Gemm:
    """The fp32 route of each product at the current thread count (module doc). Called by every CPU fp32 Linear
    product, so it only looks the setting up: parsing, probing and the cache file happen once per value."""
    return _choice(os.environ.get(ENV, ""), torch.get_num_threads())


@functools.cache
def _choice(raw: str, threads: int) -> Fp32Gemm:
    route = setting(raw)
    if route != "auto" or not onednn_available():
        fixed = route if route != "auto" and onednn_available() else "mkl"
        source = ENV if route != "auto" else "no oneDNN in this PyTorch"
        return Fp32Gemm(fixed, fixed, fixed, fixed, {}, threads, source)
    key = machine_key(threads)
    speedups, source = _read_cache(key), "cache"
    if speedups is None:
        speedups, source = probe(), "probe"
        _write_cache(key, speedups)
    routes = _routes(speedups)
    return Fp32Gemm(routes["forward"], routes["grad_input"], routes["grad_weight"], routes[DECODE], speedups, threads,
                    source)

