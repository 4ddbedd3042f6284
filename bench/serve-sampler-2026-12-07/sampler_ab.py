"""What scripts/bench_serve's memory sampler costs the figures it measures (issue 48).

    .venv/bin/python bench/serve-sampler-2026-12-07/sampler_ab.py CHECKPOINT INPUT ROUNDS [--rotate] >OUT

Each round runs, in turn (with --rotate, round r starts with the r-th of the three), one 64-client level of ``nmt
serve --workers 2`` (as scripts/bench_serve drives it: one sentence per request, persistent connections, the
pretokenized INPUT) with no memory sampler, with the sampler as it was up to commit f2111a0 (a walk of every
process in ``/proc`` each 50 ms), and with the present one (``PeakMemory``: the tree walked once a second,
``statm`` of its processes each 50 ms); then ``nmt translate --workers 1`` of INPUT without and with each sampler.
It prints sentences/s and the CPU seconds of the service's front process, its decoding processes and this (client)
process.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
loader = importlib.machinery.SourceFileLoader("bench_serve", str(ROOT / "scripts" / "bench_serve"))
spec = importlib.util.spec_from_loader("bench_serve", loader)
assert spec is not None
bench = importlib.util.module_from_spec(spec)
loader.exec_module(bench)
TICK = os.sysconf("SC_CLK_TCK")


class WalkEverySample(bench.PeakMemory):  # type: ignore[name-defined,misc]
    """The sampler up to f2111a0: every sample walks /proc for the tree and parses each process's status."""

    def _sample(self) -> None:
        while not self.done.is_set():
            total = 0.0
            for pid in bench.process_tree(self.pid):
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) / 1024
                except OSError:
                    continue
            self.peak = max(self.peak, total)
            self.done.wait(self.interval)


SAMPLERS = {"none": None, "walk-every-sample": WalkEverySample, "tree-cached": bench.PeakMemory}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def service_level(args: argparse.Namespace, lines: list[str], sampler: str) -> str:
    options = argparse.Namespace(checkpoint=args.checkpoint, workers=2, precision=None, beam=None)
    process, port = bench.start_service(options)
    try:
        warm = bench.Client(port)
        warm.post("/translate", {"text": lines[:8], "pretokenized": True})
        warm.close()
        lanes = [pid for pid in bench.process_tree(process.pid) if pid != process.pid]
        kind = SAMPLERS[sampler]
        memory = kind(process.pid) if kind else None
        before = cpu_seconds(process.pid), [cpu_seconds(pid) for pid in lanes], os.times()
        level = bench.load_level(port, lines, 64, True)
        after = cpu_seconds(process.pid), [cpu_seconds(pid) for pid in lanes], os.times()
        peak = memory.stop() if memory else 0.0
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    client = sum(after[2][:2]) - sum(before[2][:2])
    lane_cpu = " ".join(f"{a - b:.1f}" for a, b in zip(after[1], before[1]))
    return (f"serve 64 clients  {sampler:18s} {level['sentences_per_s']:5.1f} sentences/s  "
            f"wall {level['seconds']:5.1f} s  cpu s: front {after[0] - before[0]:.1f}, lanes {lane_cpu}, "
            f"client {client:.1f}  peak {peak:,.0f} MiB")


def command_line(args: argparse.Namespace, sampler: str) -> str:
    command = bench.nmt_command("translate", "--checkpoint", str(args.checkpoint), "--workers", "1", "-q",
                                "--pretokenized", "--input", str(args.input), "--output", os.devnull)
    started = time.perf_counter()
    process = subprocess.Popen(command, env=bench.child_env(), stdout=subprocess.DEVNULL)
    kind = SAMPLERS[sampler]
    memory = kind(process.pid) if kind else None
    process.wait()
    seconds = time.perf_counter() - started
    peak = memory.stop() if memory else 0.0
    lines = len(args.input.read_text(encoding="utf-8").splitlines())
    return (f"translate --workers 1 {sampler:18s} {lines / seconds:5.1f} sentences/s end to end  wall {seconds:5.1f} s"
            f"  peak {peak:,.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("input", type=Path)
    parser.add_argument("rounds", type=int)
    parser.add_argument("--rotate", action="store_true", help="round r starts with sampler r - 1 (mod 3), not 'none'")
    args = parser.parse_args()
    lines = args.input.read_text(encoding="utf-8").splitlines()
    print(f"threads {threading.active_count()}, {len(lines)} sentences, machine: "
          f"{bench.describe_machine(bench.machine_info())}", flush=True)
    names = list(SAMPLERS)
    for number in range(args.rounds):
        shift = number % len(names) if args.rotate else 0
        order = names[shift:] + names[:shift]
        for sampler in order:
            print(f"round {number + 1} {service_level(args, lines, sampler)}", flush=True)
        for sampler in order:
            print(f"round {number + 1} {command_line(args, sampler)}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
