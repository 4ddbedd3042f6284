"""Device, precision and process-group set-up, resolved once per run.

``train.device=auto`` picks CUDA when present; ``train.precision=auto`` picks bf16 on GPUs that support it and
fp32 on CPU. Under ``torchrun`` (``WORLD_SIZE > 1``) a process group is created: nccl on GPU, gloo on CPU.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from nmt.errors import NmtError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# bf16 matmuls on CPU go through oneDNN, which caches one primitive (with its packed weights and scratchpad) per
# input shape, 1024 by default. Token-budget batches have many shapes, so a 60-minute bf16 training process grew
# to ~5 GB RSS. Peak RSS after one bench epoch (95 updates, 2 threads): 3.48 GB with 1024, 2.32 GB with 64, 1.90 GB
# with 0, at 83 / 87 / 95 s (single runs, ~5% noise). Read by oneDNN when it creates its first primitive; a value
# the user set is kept.
ONEDNN_CACHE = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")


@dataclass(frozen=True)
class Runtime:
    """Where and how this process computes."""

    device: torch.device
    precision: str  # fp32 | bf16 | fp16
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[self.precision])


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise NmtError("device 'cuda' requested but CUDA is not available (use --device cpu or auto)")
        # several processes may share a GPU (torchrun --nproc_per_node above the GPU count), if the backend allows it
        return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    return torch.device("cpu")


def resolve_precision(name: str, device: torch.device, setting: str = "train.precision") -> str:
    """``auto`` is bf16 on GPUs that support it (else fp16) and fp32 on CPU; ``setting`` names the option in errors."""
    if name not in ("auto", *DTYPES):
        raise NmtError(f"{setting} {name!r} is not one of auto, {', '.join(DTYPES)}")
    if name == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
    if name == "fp16" and device.type != "cuda":
        raise NmtError(f"{setting} 'fp16' needs CUDA; use bf16 or fp32 on CPU")
    return name


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
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    resolved = resolve_precision(precision, dev)
    bound_onednn_cache(dev, resolved)
    allow_tf32(dev)
    return Runtime(dev, resolved, rank, world)


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

