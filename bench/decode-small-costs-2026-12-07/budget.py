"""Whole gl-en test set (1,112 pretokenized lines), beam 4, fp32, in one process: each decode.max_tokens in turn,
rotated each round; prints sentences/s per budget and round, and whether translations equal the 8000 budget's."""
import sys, time, torch
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
from nmt.inference.translator import Translator
threads = int(sys.argv[3]); torch.set_num_threads(threads)
tr = Translator.from_checkpoint(sys.argv[1], precision="fp32")
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()
budgets = [int(b) for b in sys.argv[4].split(",")]
rounds = int(sys.argv[5])
tr.translate(lines[:64], pretokenized=True)
ref = None; outs = {}
for r in range(rounds):
    order = budgets[r % len(budgets):] + budgets[:r % len(budgets)]
    for b in order:
        t = time.perf_counter(); out = tr.translate(lines, pretokenized=True, max_tokens=b); dt = time.perf_counter() - t
        outs[b] = [o[0][0] for o in out]
        print(f"threads {threads} round {r + 1} max_tokens {b:5d} {len(lines) / dt:6.1f} sentences/s", flush=True)
base = outs[8000] if 8000 in outs else None
if base:
    for b in budgets:
        print(f"max_tokens {b}: {sum(x == y for x, y in zip(outs[b], base))} of {len(base)} translations equal the 8000 budget's")
