"""The share rule with more lanes, simulated (``scheduler_sim.py``'s model and clients): taking all waiting sentences
against a share of ``1/lanes`` (``nmt serve``'s rule) or ``1/2`` of them, with at least 16 waiting and, for ``mK``,
a share of at least K sentences (else all); 8-128 clients on 2, 4 and 8 lanes. Exploratory: the simulated
dynamics are sensitive (differences of a few percent swap between neighbouring settings).

    python scheduler_sim_lanes.py
"""
import contextlib
import io
import math
import runpy
from pathlib import Path

with contextlib.redirect_stdout(io.StringIO()):
    model = runpy.run_path(str(Path(__file__).parent / "scheduler_sim.py"))
simulate, take_all, SRC = model["simulate"], model["take_all"], model["SRC"]


def share(per_lane: bool, min_share: int, min_pool: int = 16, hold: float = 2.0):
    def choose(waiting, now, free, lanes):
        ordered = sorted(waiting, key=lambda x: SRC[x[1]])
        size = min(64, math.ceil(len(ordered) / (lanes if per_lane else 2)))
        if free == lanes or len(ordered) < min_pool or size < min_share:
            return take_all(waiting, now, free, lanes)
        n = [SRC[x[1]] for x in ordered]
        oldest = min(range(len(ordered)), key=lambda j: ordered[j][0])
        starts = range(len(ordered) - size + 1)
        if now - ordered[oldest][0] > hold:
            starts = range(max(0, oldest - size + 1), min(oldest, len(ordered) - size) + 1)
        start = min(starts, key=lambda s: math.log(n[s + size - 1] + 1) - math.log(n[s] + 1))
        return ordered[start:start + size]
    return choose


for lanes in (2, 4, 8):
    for clients in (8, 32, 64, 128):
        row = [f"all {simulate(take_all, clients, lanes)[0]:.1f}"]
        for per_lane, min_share in ((True, 1), (True, 8), (True, 12), (False, 8), (False, 12)):
            rate = simulate(share(per_lane, min_share), clients, lanes)[0]
            row.append(f"{'1/N' if per_lane else '1/2'}/m{min_share} {rate:.1f}")
        print(f"lanes {lanes} clients {clients}: " + ", ".join(row), flush=True)
