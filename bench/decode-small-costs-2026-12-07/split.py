"""Where a one-thread lane's time goes: sorted batches of 21 test sentences, fp32, beam 4: model.step,
state.select, encoder start, and the search's own work (the rest)."""
import sys, time, torch
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
from nmt.inference.translator import Translator
import nmt.model.transformer as tm
torch.set_num_threads(1)
tr = Translator.from_checkpoint(sys.argv[1], precision=sys.argv[3] if len(sys.argv) > 3 else "fp32")
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()[:420]
src = tr.encode(lines, pretokenized=True)
order = sorted(range(len(src)), key=lambda i: len(src[i]))
chunks = [[src[i] for i in order[j:j + 21]] for j in range(0, len(order), 21)]
acc = {"step": 0.0, "select": 0.0, "start": 0.0}; n = [0]
ostep, ostart = tm.Transformer.step, tm.Transformer.start
def step(self, prev, state):
    t = time.perf_counter(); out = ostep(self, prev, state); acc["step"] += time.perf_counter() - t; n[0] += 1
    st = out[1]
    if not hasattr(type(st), "_wrapped"):
        osel = type(st).select
        def sel(s, index, osel=osel):
            t = time.perf_counter(); r = osel(s, index); acc["select"] += time.perf_counter() - t; return r
        type(st).select = sel; type(st)._wrapped = True
    return out
def start(self, s):
    t = time.perf_counter(); out = ostart(self, s); acc["start"] += time.perf_counter() - t; return out
tm.Transformer.step, tm.Transformer.start = step, start
tr.translate_ids(chunks[0])
for r in range(3):
    for k in acc: acc[k] = 0.0
    n[0] = 0
    t = time.perf_counter()
    for c in chunks:
        tr.translate_ids(c)
    wall = time.perf_counter() - t
    rest = wall - sum(acc.values())
    print(f"wall {wall:.2f}s steps {n[0]} ms/step {1000*wall/n[0]:.2f}: " + " ".join(
        f"{k} {1000*v/n[0]:.2f}" for k, v in acc.items()) + f" search-rest {1000*rest/n[0]:.2f}", flush=True)
