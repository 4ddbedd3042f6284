"""``nmt serve --workers 2`` at 64 clients, two code trees in turn (the order alternating by round), one level per
service start, as scripts/bench_serve drives it (one sentence per request, persistent connections).

    .venv/bin/python tree_ab.py BEFORE_TREE SHARED_TREE ROUNDS CHECKPOINT INPUT >tree_ab.out

BEFORE_TREE: a checkout of f2111a0; SHARED_TREE: the same with shared-weights.patch applied (each tree's own
scripts/bench_serve starts its own service and decoding processes)."""

import argparse
import importlib.machinery
import importlib.util
import signal
import sys
from pathlib import Path

roots = {"before": sys.argv[1], "shared": sys.argv[2]}
rounds, checkpoint, source = int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5])
modules = {}
for name, root in roots.items():
    loader = importlib.machinery.SourceFileLoader(f"bench_serve_{name}", f"{root}/scripts/bench_serve")
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    modules[name] = importlib.util.module_from_spec(spec)
    loader.exec_module(modules[name])
args = argparse.Namespace(checkpoint=checkpoint, workers=2, precision="fp32", beam=None)
lines = source.read_text(encoding="utf-8").splitlines()
print(f"before: {roots['before']} (commit f2111a0), shared: {roots['shared']}", flush=True)
for number in range(rounds):
    for name in (["before", "shared"] if number % 2 == 0 else ["shared", "before"]):
        bench = modules[name]
        process, port = bench.start_service(args)
        warm = bench.Client(port)
        warm.post("/translate", {"text": lines[:8], "pretokenized": True})
        warm.close()
        level = bench.load_level(port, lines, 64, True)
        process.send_signal(signal.SIGTERM)
        process.wait()
        print(f"round {number + 1} {name:7s} 64 clients: {level['sentences_per_s']:.1f} sentences/s, "
              f"p50 {level['latency_p50_ms']:.0f} ms, p99 {level['latency_p99_ms']:.0f} ms", flush=True)
