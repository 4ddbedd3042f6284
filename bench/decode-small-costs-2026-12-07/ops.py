import sys, time, torch
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
from nmt.inference.translator import Translator
torch.set_num_threads(1)
tr = Translator.from_checkpoint(sys.argv[1], precision=sys.argv[3] if len(sys.argv) > 3 else "fp32")
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()[:420]
src = tr.encode(lines, pretokenized=True)
order = sorted(range(len(src)), key=lambda i: len(src[i]))
chunks = [[src[i] for i in order[j:j + 21]] for j in range(0, len(order), 21)]
tr.translate_ids(chunks[0])
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
    t = time.perf_counter()
    for c in chunks:
        tr.translate_ids(c)
    wall = time.perf_counter() - t
print(f"wall {wall:.2f}s")
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
print(p.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=40))
