"""Cost of one decoder step (model.step) by live rows, for `nmt translate`'s length-sorted batches and for random
batches of 64 (what a service with 64 one-sentence clients gathers), on 1 and 2 threads; fp32, the checkpoint's beam.

    python step_cost.py CHECKPOINT SOURCE
"""
import random, sys, time, torch, collections
from nmt.inference.translator import Translator
from nmt.model.transformer import Transformer
ckpt = sys.argv[1]
tr = Translator.from_checkpoint(ckpt, precision="fp32")
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()[:384]
src = tr.encode(lines, pretokenized=True)
stats = collections.defaultdict(lambda: [0, 0.0])
orig = Transformer.step
def step(self, prev, state):
    t = time.perf_counter(); r = orig(self, prev, state)
    n = prev.numel(); b = min(1024, 1 << (max(n, 1) - 1).bit_length())
    stats[b][0] += 1; stats[b][1] += time.perf_counter() - t
    return r
Transformer.step = step
res = {}
def run(name, chunks):
    stats.clear(); t = time.perf_counter(); n = 0
    for c in chunks:
        tr.translate_ids([src[i] for i in c]); n += len(c)
    dt = time.perf_counter() - t
    steps = sum(v[0] for v in stats.values()); st = sum(v[1] for v in stats.values())
    print(f"{name:24s} {n/dt:6.1f} sent/s  steps {steps}  model.step {st:.1f}s of {dt:.1f}s", flush=True)
    res[name] = {b: 1000*stats[b][1]/stats[b][0] for b in stats}
idx = list(range(len(src))); rnd = idx[:]; random.Random(0).shuffle(rnd)
for th in (1, 2):
    torch.set_num_threads(th)
    run(f"cli {th}t", [idx])
    run(f"random64 {th}t", [rnd[i:i+64] for i in range(0, len(rnd), 64)])
print("rows  " + "  ".join(f"{k:>14s}" for k in res))
for b in sorted({b for r in res.values() for b in r}):
    print(f"{b:5d} " + "  ".join(f"{res[k].get(b, float('nan')):14.2f}" for k in res))
