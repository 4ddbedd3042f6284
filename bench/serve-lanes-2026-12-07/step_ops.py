"""The top-level ops of one decoding step (the 10th, one sentence, beam 4, fp32, one thread) with their times under
the torch profiler (inflated by it): where a step at a few rows goes.

    OMP_NUM_THREADS=1 python step_ops.py CHECKPOINT SOURCE > step_ops.out
"""
import sys, time, torch
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
from nmt.inference.translator import Translator
import nmt.model.transformer as tm
torch.set_num_threads(1)
tr = Translator.from_checkpoint(sys.argv[1], precision="fp32")
src = tr.encode(open(sys.argv[2], encoding="utf-8").read().splitlines()[:8], pretokenized=True)
orig = tm.Transformer.step; n = [0]; prof = {}
from torch.profiler import profile, ProfilerActivity
def step(self, prev, state):
    n[0] += 1
    if n[0] == 10:
        with profile(activities=[ProfilerActivity.CPU], with_stack=False) as p:
            out = orig(self, prev, state)
        prof["p"] = p; return out
    return orig(self, prev, state)
tm.Transformer.step = step
tr.translate_ids([src[3]])
p = prof["p"]
evs = [e for e in p.events() if e.cpu_parent is None]
tot = 0
for e in evs:
    tot += e.cpu_time_total
    print(f"{e.cpu_time_total:8.1f} us  {e.name}  {e.input_shapes if hasattr(e,'input_shapes') else ''}")
print("top-level ops", len(evs), "sum us", tot)
