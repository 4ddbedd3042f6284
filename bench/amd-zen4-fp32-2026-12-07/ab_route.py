"""A/B in one process: fp32 training updates of configs/bench.yaml with NMT_FP32_GEMM=mkl against =onednn (and
others named on the command line), the same batches each round, routes in turn."""
import os, sys
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
import statistics, time, torch
from nmt.config import load_config
from nmt.machine.runtime import setup, teardown
from nmt.perf.bench import make_trainer
from nmt.training.loader import BatchLoader

from nmt.machine import fp32_gemm
from nmt.machine.fp32_gemm import Fp32Gemm
ROUTE = {"r": "mkl/mkl/mkl"}
fp32_gemm.choice = lambda: Fp32Gemm(*ROUTE["r"].split("/"), {}, torch.get_num_threads(), "ab")
routes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["mkl", "onednn"]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
steps = 6
cfg = load_config("bench", ["train.progress=false", "train.tensorboard=false", "data.data_dir=/work/data",
                            "train.precision=fp32"])
rt = setup(cfg.train.device, cfg.train.precision)
print("precision", rt.precision, "threads", torch.get_num_threads(), flush=True)
trainer = make_trainer(cfg, rt)
batches = trainer.epoch_batches(1); data = trainer.epoch_data(1); loader = BatchLoader(rt.device)
def step(k):
    return trainer.train_step(loader.get(data, (0, k), [batches[k]], (0, k + 1), [batches[k + 1]]))
for r in routes:
    ROUTE["r"] = r
    for k in range(2): step(k)
times = {r: [] for r in routes}
for rnd in range(rounds):
    for r in (routes if rnd % 2 == 0 else routes[::-1]):
        ROUTE["r"] = r
        t = time.perf_counter()
        for k in range(10, 10 + steps): step(k)
        times[r].append((time.perf_counter() - t) / steps * 1000)
    print(rnd, {r: round(v[-1], 1) for r, v in times.items()}, flush=True)
base = times[routes[0]]
for r in routes:
    ratios = [b / x for b, x in zip(base, times[r])]
    print(f"{r}: median {statistics.median(times[r]):.1f} ms/update (range {min(times[r]):.1f}-{max(times[r]):.1f}); "
          f"speed vs {routes[0]} median {statistics.median(ratios):.3f}x range {min(ratios):.3f}-{max(ratios):.3f} n={len(ratios)}")
loader.close(); teardown(rt)
