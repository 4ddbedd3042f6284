import json, sys, time
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
import torch
torch.set_num_threads(1)
from nmt.inference.translator import Translator
W = "/tmp/nmt-peers/work-gl-en/"
precision = sys.argv[1]; prof = len(sys.argv) > 2
tr = Translator.from_checkpoint(W + "ours-decode-model/checkpoint_best.pt", device="cpu", precision=precision)
lines = open(W + "ours-decode.src").read().splitlines()
src = tr.encode(lines, pretokenized=True)
tr.translate_ids(src[:8], beam=4, lenpen=0.6, batch_size=8)
if prof:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as p:
        hyps = tr.translate_ids(src[:192], beam=4, lenpen=0.6, nbest=1, max_tokens=10**9, batch_size=64)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
else:
    t = time.perf_counter()
    hyps = tr.translate_ids(src, beam=4, lenpen=0.6, nbest=1, max_tokens=10**9, batch_size=64)
    s = time.perf_counter() - t
    n = sum(len(h[0].tokens) for h in hyps)
    print(f"ours {precision} {s:.2f}s {n} pieces {n/s:.0f}/s")
