"""The trainer's CUDA-only branches, reached on the CPU: nccl set-up through a gloo stand-in, TF32, CUDA RNG restore,
pinned-memory batches, and the always-built attention mask off the CPU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from nmt.data.batching import Batch, ParallelData, make_batches
from nmt.machine import runtime
from nmt.model.transformer import padding_mask
from nmt.training import rng
from nmt.training.loader import BatchLoader
from tests.fake_device import on_device


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """torch.cuda reports one GPU; calls that would touch it are recorded instead."""
    calls: dict[str, Any] = {"set_device": [], "set_rng_state": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls["set_device"].append(device))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, index: calls["set_rng_state"].append((state, index)))
    return calls


@pytest.fixture
def tf32_flags() -> Any:
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_nccl_setup_through_a_gloo_stand_in(fake_cuda: dict[str, Any], tf32_flags: None, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes on one GPU (LOCAL_RANK 1 of WORLD_SIZE 2): the second maps to cuda:0, asks for nccl."""
    requested: list[str] = []
    real_init = dist.init_process_group

    def init(backend: str, **kwargs: Any) -> None:
        requested.append(backend)
        real_init("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)

    monkeypatch.setattr(dist, "init_process_group", init)
    monkeypatch.setattr(dist, "rendezvous", lambda url: iter([(dist.HashStore(), 1, 2)]))  # torchrun's store
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    rt = runtime.setup("auto", "auto")
    try:
        assert requested == ["nccl"] and dist.is_initialized()
        assert rt.device == torch.device("cuda", 0) and fake_cuda["set_device"] == [rt.device]
        assert rt.precision == "bf16" and rt.world_size == 2 and rt.rank == 0
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        runtime.teardown(rt)
    assert not dist.is_initialized()


def test_torchrun_single_process_joins_the_group(monkeypatch: pytest.MonkeyPatch, tf32_flags: None) -> None:
    """``torchrun --nproc_per_node=1`` initialises the process group (nccl on a GPU) even for one process."""
    for key, value in {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(29500 + os.getpid() % 1000), "TORCHELASTIC_RUN_ID": "test"}.items():
        monkeypatch.setenv(key, value)
    rt = runtime.setup("cpu", "fp32")
    try:
        assert dist.is_initialized() and dist.get_backend() == "gloo" and not rt.distributed
        assert not torch.backends.cuda.matmul.allow_tf32  # TF32 is a CUDA setting only
    finally:
        runtime.teardown(rt)
    assert not dist.is_initialized()


def test_cuda_rng_states_restored_on_the_host(fake_cuda: dict[str, Any]) -> None:
    """States saved on 2 GPUs, loaded onto the device, resumed on 1 GPU: one host byte tensor goes to cuda:0."""
    state = rng.capture()
    saved = [torch.full((16,), 7, dtype=torch.uint8), torch.full((16,), 9, dtype=torch.uint8)]
    rng.restore(on_device({**state, "cuda": saved}))
    ((restored, index),) = fake_cuda["set_rng_state"]
    assert index == 0 and type(restored) is torch.Tensor and torch.equal(restored, saved[0])


def test_batches_for_cuda_are_pinned_and_copied_asynchronously(fake_cuda: dict[str, Any],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pinned: list[Batch] = []
    copies: list[bool] = []
    monkeypatch.setattr(Batch, "pin_memory", lambda self: pinned.append(self) or self)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, device, non_blocking=False: copies.append(non_blocking)
                        or self)
    rows = [np.arange(4, 4 + n) for n in (3, 5, 2, 6)]
    data = ParallelData(rows, rows)
    batches = make_batches(*data.lengths(), max_tokens=12, seed=1, epoch=1)
    loader = BatchLoader(torch.device("cuda", 0))
    try:
        got = loader.get(data, (1, 0), batches[:1], (1, 1), batches[1:2])
        got += loader.get(data, (1, 1), batches[1:2])
    finally:
        loader.close()
    assert len(pinned) == 2 and len(got) == 2 and copies == [True] * 6  # src, tgt_in, tgt_out of each batch
    assert loader.hits == 1
    assert fake_cuda["set_device"] == [torch.device("cuda", 0)]  # the collating thread pins for this process's GPU


def test_attention_mask_always_built_off_the_cpu() -> None:
    """On the CPU a batch without PAD gets no mask (fast kernels); elsewhere checking would stall the host."""
    full = torch.full((2, 3), 5)
    assert padding_mask(full) is None
    mask = padding_mask(full.to("meta"))
    assert mask is not None and mask.shape == (2, 1, 1, 3) and mask.device.type == "meta"


def test_tf32_only_on_cuda(tf32_flags: None) -> None:
    runtime.allow_tf32(torch.device("cpu"))
    assert not torch.backends.cuda.matmul.allow_tf32
    runtime.allow_tf32(torch.device("cuda", 0))
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
