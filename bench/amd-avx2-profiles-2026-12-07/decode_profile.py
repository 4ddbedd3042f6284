"""Op profile of our beam-4 decoding (first N test sentences, length-sorted batches of 64), one precision, TCMalloc."""
import sys
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
import time, torch
from torch.profiler import profile, ProfilerActivity
from nmt.inference.translator import Translator
checkpoint, precision, source, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
translator = Translator.from_checkpoint(checkpoint, device="cpu", precision=precision)
lines = open(source, encoding="utf-8").read().splitlines()[:n]
sources = translator.encode(lines, pretokenized=True)
translator.translate_ids(sources[:8], beam=4, lenpen=0.6, batch_size=8)
t = time.perf_counter()
hyps = translator.translate_ids(sources, beam=4, lenpen=0.6, nbest=1, max_tokens=10**9, batch_size=64)
dt = time.perf_counter() - t
pieces = sum(len(h[0].tokens) for h in hyps)
print(f"{precision}: {len(lines)} sentences in {dt:.2f} s, {pieces / dt:,.0f} pieces/s, threads {torch.get_num_threads()}")
with profile(activities=[ProfilerActivity.CPU]) as prof:
    translator.translate_ids(sources, beam=4, lenpen=0.6, nbest=1, max_tokens=10**9, batch_size=64)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=45))
