"""One timed decoding workload in this process (PYTHONPATH picks the code): prints seconds and a hash of the output.
    work.py CHECKPOINT SOURCE MODE [precision]   MODE: sorted21 (420 sentences, batches of 21) | b64 (1112, batches of 64)"""
import hashlib, sys, time, torch
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
from nmt.inference.translator import Translator
torch.set_num_threads(1)
tr = Translator.from_checkpoint(sys.argv[1], precision=sys.argv[4] if len(sys.argv) > 4 else "fp32")
mode = sys.argv[3]
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()
n, size = (420, 21) if mode == "sorted21" else (1112, 64)
src = tr.encode(lines[:n], pretokenized=True)
order = sorted(range(len(src)), key=lambda i: len(src[i]))
chunks = [[src[i] for i in order[j:j + size]] for j in range(0, len(order), size)]
tr.translate_ids(chunks[len(chunks) // 2])
import resource; f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; t = time.perf_counter()
out = [tr.translate_ids(c) for c in chunks]
dt = time.perf_counter() - t
h = hashlib.sha1(repr(out).encode()).hexdigest()[:10]
print(f"{dt:.3f} {h} minflt {resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}")
