"""Continuous batching prototype (prototype.patch: `git apply` it first) against `nmt translate`'s batches,
in-process: CLIENTS closed-loop clients of one sentence each (a sentence joins the search as another ends),
arriving in random or length-sorted order, optionally in source-length buckets (one search per bucket).

    python stream_vs_cli.py CHECKPOINT SOURCE THREADS CLIENTS [random|sorted] [BOUND,BOUND...]
"""
import bisect
import random
import sys
import time

import torch

from nmt.inference.translator import Translator
from nmt.search.stream import StreamSearch

ckpt, source, threads, clients = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
arrival = sys.argv[5] if len(sys.argv) > 5 else "random"
bounds = [int(x) for x in sys.argv[6].split(",")] if len(sys.argv) > 6 and sys.argv[6] else []
torch.set_num_threads(threads)
tr = Translator.from_checkpoint(ckpt, precision="fp32")
src = tr.encode(open(source, encoding="utf-8").read().splitlines()[:384], pretokenized=True)
order = list(range(len(src)))
if arrival == "random":
    random.Random(0).shuffle(order)
else:
    order.sort(key=lambda i: len(src[i]))


def cli():
    t = time.perf_counter()
    out = tr.translate_ids(src)
    return len(src) / (time.perf_counter() - t), out


def stream():
    t = time.perf_counter()
    searches = [StreamSearch(tr.model, tr.config.decode, tr.positions - 1) for _ in range(len(bounds) + 1)]
    res, queue = {}, iter(order)

    def add(i):
        searches[bisect.bisect_left(bounds, len(src[i]))].add(i, src[i])

    for _ in range(clients):
        add(next(queue))
    with torch.no_grad():
        while any(s.busy for s in searches):
            for s in searches:
                if s.busy:
                    for key, hyps in s.step():
                        res[key] = hyps
                        nxt = next(queue, None)
                        if nxt is not None:
                            add(nxt)
    return len(src) / (time.perf_counter() - t), res


for _ in range(2):
    a, out = cli()
    b, res = stream()
    same = sum(out[i][0].tokens == res[i][0].tokens for i in range(len(src)))
    print(f"{arrival} arrivals, buckets {bounds}: cli {a:.1f} sent/s, stream ({clients} clients) {b:.1f}, "
          f"ratio {b / a:.2f}, same tokens {same}/{len(src)}", flush=True)
