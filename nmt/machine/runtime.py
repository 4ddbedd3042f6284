"""Device, precision and process-group set-up, resolved once per run.

``train.device=auto`` picks CUDA when present; ``train.precision=auto`` (and ``decode.precision=auto``) picks bf16
on GPUs that support it (else fp16), and on a CPU bf16 only where it runs bf16 matmuls natively
(:func:`nmt.machine.hardware.bf16_support`), fp32 otherwise. The choice and why are kept in
:attr:`Runtime.precision_reason`
for the first log line; an explicit ``bf16`` on a CPU without native bf16 runs, with one warning. Under
``torchrun`` (``WORLD_SIZE > 1``) a process group is created: nccl on GPU, gloo on CPU.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from nmt.errors import NmtError
from nmt.machine import hardware
from nmt.machine.hardware import ONEDNN_CACHE

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

@dataclass(frozen=True)
class Runtime:
    """Where and how this process computes."""

    device: torch.device
    precision: str  # fp32 | bf16 | fp16
    rank: int = 0
    world_size: int = 1
    precision_reason: str = ""  # why this precision, e.g. "auto: CPU has native bf16 (...)"

    def describe_precision(self) -> str:
        """``bf16 (auto: CPU has native bf16 ...)``: the precision and why, for the first log line."""
        return f"{self.precision} ({self.precision_reason})" if self.precision_reason else self.precision

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.precision not in DTYPES or self.precision == "fp32":  # int8 decoding: quantized layers, no autocast
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[self.precision])


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``mps`` (Apple GPUs, where torch has it)."""
    if name == "mps":
        if not torch.backends.mps.is_available():
            raise NmtError("device 'mps' requested but this torch build or machine has no MPS (Apple GPU) support "
                           "(use --device cpu or auto)")
        return torch.device("mps")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise NmtError("device 'cuda' requested but CUDA is not available (use --device cpu or auto)")
        # several processes may share a GPU (torchrun --nproc_per_node above the GPU count), if the backend allows it
        return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    return torch.device("cpu")


@dataclass(frozen=True)
class Precision:
    """A resolved precision and why it was chosen."""

    name: str  # fp32 | bf16 | fp16
    reason: str


def choose_precision(name: str, device: torch.device, setting: str = "train.precision") -> Precision:
    """Resolve ``auto`` and check ``name`` for ``device``; ``setting`` names the option in errors and messages.

    ``auto`` is bf16 on GPUs that support it (else fp16); on a CPU, bf16 where it runs bf16 matmuls natively and
    fp32 otherwise. An explicit bf16 on a CPU without native bf16 is kept, with one warning on stderr.
    """
    if name not in ("auto", *DTYPES):
        raise NmtError(f"{setting} {name!r} is not one of auto, {', '.join(DTYPES)}")
    if device.type == "cuda":
        if name != "auto":
            return Precision(name, f"set by {setting}")
        if torch.cuda.is_bf16_supported():
            return Precision("bf16", "auto: the GPU supports bf16")
        return Precision("fp16", "auto: the GPU has no bf16; fp16 with loss scaling")
    if name == "fp16":
        raise NmtError(f"{setting} 'fp16' needs CUDA; use bf16 or fp32 on CPU")
    if name == "fp32":
        return Precision(name, f"set by {setting}")
    if device.type != "cpu":  # another accelerator (e.g. Apple's mps): the CPU's bf16 says nothing about it
        if name == "auto":
            return Precision("fp32", f"auto: fp32 on {device.type}")
        return Precision(name, f"set by {setting}")
    support = hardware.bf16_support()
    if name == "auto":
        return Precision("bf16" if support.native else "fp32", f"auto: {support.reason}")
    if not support.native:
        warn_emulated_bf16(setting, support.reason)
    return Precision(name, f"set by {setting}; {support.reason}")


@functools.cache
def warn_emulated_bf16(setting: str, reason: str) -> None:
    """Warn once per process and option that bf16 was asked for where it is emulated."""
    print(f"warning: {setting} is bf16, but {reason}; running anyway (fp32 or auto is faster here)", file=sys.stderr)


def resolve_precision(name: str, device: torch.device, setting: str = "train.precision") -> str:
    """The precision :func:`choose_precision` resolves ``name`` to: fp32, bf16 or fp16."""
    return choose_precision(name, device, setting).name


def setup(device: str, precision: str) -> Runtime:
    """Create the runtime; joins the torchrun process group when launched with several processes."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    # under torchrun the group is joined even by a single process, so `--nproc_per_node=1` runs nccl's set-up too
    launched = world > 1 or "TORCHELASTIC_RUN_ID" in os.environ
    if launched and not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        join_group("nccl" if dev.type == "cuda" else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    chosen = choose_precision(precision, dev)
    bound_onednn_cache(dev, chosen.name)
    allow_tf32(dev)
    return Runtime(dev, chosen.name, rank, world, chosen.reason)


def join_group(backend: str) -> None:
    """Join torchrun's process group through its store, under a prefix of the restart attempt.

    torchrun's elastic agent keeps one store for the whole job, and the workers' keys in it outlive a restart: a
    restarted rank could read the address a dead rank published in the previous attempt and fail to connect (gloo's
    ``connectFullMesh``: connection refused) before the new rank overwrites it. Keys under
    ``nmt/attempt_{TORCHELASTIC_RESTART_COUNT}/`` are the current attempt's only.
    """
    store, rank, world = next(dist.rendezvous("env://"))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(backend=backend, store=dist.PrefixStore(f"nmt/attempt_{attempt}/", store), rank=rank,
                            world_size=world)


def allow_tf32(device: torch.device) -> None:
    """On CUDA, fp32 matmuls and convolutions run on TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation),
    as fairseq and most trainers do: ~8x the fp32 rate on Ampere and later, at no measurable cost in BLEU."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def bound_onednn_cache(device: torch.device, precision: str) -> None:
    """Default oneDNN's primitive cache to :data:`ONEDNN_CACHE` for CPU bf16 work (before its first primitive)."""
    if device.type == "cpu" and precision != "fp32":
        os.environ.setdefault(*ONEDNN_CACHE)


def teardown(runtime: Runtime) -> None:
    if dist.is_initialized():
        dist.barrier()  # rank 0 may still be writing its last checkpoint; leave together
        dist.destroy_process_group()


def all_sum(runtime: Runtime, values: list[float]) -> list[float]:
    """Sum floats over ranks (identity on one process)."""
    if not runtime.distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=runtime.device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def broadcast_floats(runtime: Runtime, values: list[float]) -> list[float]:
    """Rank 0's values on every rank, so decisions (stop, best BLEU) are shared and no rank hangs."""
    if not runtime.distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=runtime.device)
    dist.broadcast(tensor, src=0)
    return tensor.tolist()

