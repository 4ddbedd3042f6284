"""A/B of int8 decoding, per-tensor activation scales (HEAD, /work/ab-old) against per-row (working tree): each run a
fresh process on the given code; prints the decoding time of the whole test set, output pieces, and the hypotheses'
digest; also translates a 64-line subset in a second batching (one sentence per call) and counts equal lines."""
import hashlib, json, sys, time
code, ckpt, src_path, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, code)
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
import torch
torch.set_num_threads(threads)
import nmt
assert nmt.__file__.startswith(code), nmt.__file__
from nmt.inference.translator import Translator
tr = Translator.from_checkpoint(ckpt, precision="int8")
lines = open(src_path, encoding="utf-8").read().splitlines()
tr.translate(lines[:16], pretokenized=True)  # warm
t = time.perf_counter()
out = [n[0][0] for n in tr.translate(lines, pretokenized=True)]
wall = time.perf_counter() - t
ids = tr.encode(lines, pretokenized=True)
order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
chunks = [[ids[i] for i in order[j:j + 21]] for j in range(0, len(order), 21)]
t = time.perf_counter()
for c in chunks:
    tr.translate_ids(c)
chunk21 = len(ids) / (time.perf_counter() - t)
alone = [tr.translate([l], pretokenized=True)[0][0][0] for l in lines[:64]]
same = sum(a == b for a, b in zip(alone, out[:64]))
pieces = sum(len(tr.encode([o], pretokenized=True)[0]) for o in out)
print(json.dumps({"code": code, "threads": threads, "seconds": round(wall, 3), "sentences_per_s": round(len(lines) / wall, 2),
                  "pieces_per_s": round(pieces / wall, 1), "alone_equal_64": same, "sorted21_sentences_per_s": round(chunk21, 2),
                  "digest": hashlib.sha1("\n".join(out).encode()).hexdigest()[:12]}), flush=True)
