"""The matmul roof (nmt/perf/roof.py): every matmul of a forward and backward is recorded with its shape, and the replay
of those shapes gives a rate the step is measured against."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import nmt.perf.roof
from nmt.perf.roof import Matmul, record, replay_seconds, roof_report


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
    monkeypatch.setattr(nmt.perf.roof, "replay_seconds", lambda mms, device: replayed.append(mms) or 0.5)
    first, second = [Matmul(1, 4, 4, 4, torch.float32)], [Matmul(1, 8, 8, 8, torch.bfloat16)] * 2
    report = roof_report([first, second], 4.0, torch.device("cpu"))
    assert replayed == [first, second]
    assert report["replay_seconds"] == 1.0 and report["fraction_of_roof"] == 0.25


def test_traffic_counts_the_bytes_of_other_operations_only() -> None:
    """An elementwise product reads two tensors and writes one; views, allocations and matmuls move nothing here."""
    a, b = torch.randn(64, 32), torch.randn(64, 32)

    def step() -> None:
        torch.mm(a, b.t())  # a matmul: recorded as one, not as traffic
        a.view(32, 64).t()  # views
        torch.empty(1000)  # an allocation
        a * b  # 3 x 64 x 32 float32
        a.bfloat16()  # read 4 bytes, write 2 per element

    matmuls, traffic = nmt.perf.roof.record_step(step)
    assert [(m.m, m.k, m.n) for m in matmuls] == [(64, 32, 64)]
    assert traffic.ops == 2 and traffic.bytes == 3 * 64 * 32 * 4 + 64 * 32 * 6


def test_memory_ceiling_relates_the_replay_to_the_traffic_at_the_bandwidth() -> None:
    matmuls = [Matmul(1, 64, 64, 64, torch.float32)] * 2
    bandwidth = 1e9
    replay = replay_seconds(matmuls, torch.device("cpu"))
    traffic = nmt.perf.roof.Traffic(ops=10, bytes=int(replay * bandwidth))  # as long as the replay at the bandwidth
    report = roof_report([matmuls], 10.0, torch.device("cpu"), traffic, bandwidth)
    assert report["other_ops"] == 10 and report["bandwidth_gbytes_per_s"] == 1.0
    assert report["other_memory_seconds"] == traffic.bytes / bandwidth
    ceiling = report["replay_seconds"] / (report["replay_seconds"] + report["other_memory_seconds"])
    assert report["memory_ceiling"] == ceiling and 0 < ceiling < 1
    assert "memory_ceiling" not in roof_report([matmuls], 10.0, torch.device("cpu"))


def test_copy_bandwidth_is_a_plausible_rate() -> None:
    assert 1e8 < nmt.perf.roof.copy_bandwidth(torch.device("cpu"), megabytes=8, repeats=2) < 1e13
