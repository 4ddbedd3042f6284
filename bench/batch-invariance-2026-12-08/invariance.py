"""Length-sorted batches of 64 (the CLI) against shuffled batches of 32 (a service's mixes): equal translations?
A third argument: time the sorted batches only (speed-pairs.out)."""
import random, sys, time
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
import torch
torch.set_num_threads(1)
from nmt.inference.translator import Translator
W = "/tmp/nmt-peers/work-gl-en/"
prec = sys.argv[1]
tr = Translator.from_checkpoint(W + "ours-decode-model/checkpoint_best.pt", device="cpu", precision=prec)
src = tr.encode(open(W + "ours-decode.src").read().splitlines()[: int(sys.argv[2])], pretokenized=True)
tr.translate_ids(src[:8], beam=4, lenpen=0.6, batch_size=8)
t = time.perf_counter()
cli = tr.translate_ids(src, beam=4, lenpen=0.6, max_tokens=10**9, batch_size=64)
seconds = time.perf_counter() - t
if len(sys.argv) > 3: print(f"{prec}: sorted-64 {sum(len(h[0].tokens) for h in cli) / seconds:.0f} pieces/s"); sys.exit()
order = list(range(len(src))); random.Random(0).shuffle(order)
mixed = [None] * len(src)
for first in range(0, len(order), 32):
    part = order[first:first + 32]
    for i, h in zip(part, tr.translate_ids([src[i] for i in part], beam=4, lenpen=0.6, batch_size=32)):
        mixed[i] = h
tokens = sum(a[0].tokens == b[0].tokens for a, b in zip(cli, mixed))
scores = sum(a[0].tokens == b[0].tokens and a[0].score == b[0].score for a, b in zip(cli, mixed))
pieces = sum(len(h[0].tokens) for h in cli)
print(f"{prec}: sorted-64 {pieces / seconds:.0f} pieces/s; shuffled-32 equal tokens {tokens}/{len(src)}, tokens+score {scores}")
