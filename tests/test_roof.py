"""The matmul roof (nmt/roof.py): every matmul of a forward and backward is recorded with its shape, and the replay
of those shapes gives a rate the step is measured against."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import nmt.roof
from nmt.roof import Matmul, record, replay_seconds, roof_report


def test_linear_forward_and_backward_are_three_matmuls() -> None:
    layer = torch.nn.Linear(8, 16)
    x = torch.randn(5, 8, requires_grad=True)
    matmuls = record(lambda: layer(x).sum().backward())
    assert sorted((m.m, m.k, m.n) for m in matmuls) == sorted([(5, 8, 16), (5, 16, 8), (16, 5, 8)])
    assert sum(m.flops for m in matmuls) == 3 * 2 * 5 * 8 * 16
    assert all(m.batch == 1 and m.dtype == torch.float32 for m in matmuls)


def test_batched_matmul_and_fused_attention_count_their_flops() -> None:
    a, b = torch.randn(3, 4, 6), torch.randn(3, 6, 2)
    assert record(lambda: torch.matmul(a, b)) == [Matmul(3, 4, 6, 2, torch.float32)]
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 4)
    with torch.no_grad():
        matmuls = record(lambda: F.scaled_dot_product_attention(q, k, v))
    assert sum(m.flops for m in matmuls) == 2 * (2 * 6 * 5 * 4 * 7)  # scores and output, whatever the kernel


def test_autocast_records_the_lower_precision() -> None:
    layer = torch.nn.Linear(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        matmuls = record(lambda: layer(torch.randn(4, 8)))
    assert [m.dtype for m in matmuls] == [torch.bfloat16]


def test_report_relates_replay_to_step_time() -> None:
    matmuls = [Matmul(1, 64, 64, 64, torch.float32)] * 4 + [Matmul(2, 8, 16, 8, torch.float32)]
    assert replay_seconds(matmuls, torch.device("cpu")) > 0
    report = roof_report([matmuls[:2], matmuls[2:], []], 10.0, torch.device("cpu"))  # per update; one did none
    assert report["matmuls"] == 5
    assert report["matmul_gflop"] == (4 * 2 * 64**3 + 2 * 2 * 8 * 16 * 8) / 1e9
    assert 0 < report["fraction_of_roof"] < 1  # a 10-second "step" is far slower than its matmuls alone
    assert abs(report["step_gflops"] / report["roof_gflops"] - report["fraction_of_roof"]) < 1e-9
    assert report["matmul_flop_share_by_dtype"] == {"float32": 1.0}


def test_each_update_is_replayed_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replaying every update's shapes back to back would time oneDNN building primitives for the shapes it evicted,
    not the matmuls: the roof sums the updates' own replays."""
    replayed: list[list[Matmul]] = []
    monkeypatch.setattr(nmt.roof, "replay_seconds", lambda mms, device: replayed.append(mms) or 0.5)
    first, second = [Matmul(1, 4, 4, 4, torch.float32)], [Matmul(1, 8, 8, 8, torch.bfloat16)] * 2
    report = roof_report([first, second], 4.0, torch.device("cpu"))
    assert replayed == [first, second]
    assert report["replay_seconds"] == 1.0 and report["fraction_of_roof"] == 0.25
