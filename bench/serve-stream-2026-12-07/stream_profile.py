"""Where the continuous-batching prototype's time goes (prototype.patch applied): wall time of the model's start
(encoder), step and state methods, summed over a stream of CLIENTS closed-loop one-sentence clients in random order,
then over `nmt translate`'s batches of the same sentences; and the median size of the stream's stores.

    python stream_profile.py CHECKPOINT SOURCE THREADS CLIENTS
"""
import collections
import random
import statistics
import sys
import time

import torch

import nmt.search.stream as stream_module
from nmt.inference.translator import Translator
from nmt.model.decoder_state import DecoderState
from nmt.model.transformer import Transformer
from nmt.search.stream import StreamSearch

ckpt, source, threads, clients = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
tr = Translator.from_checkpoint(ckpt, precision="fp32")
src = tr.encode(open(source, encoding="utf-8").read().splitlines()[:384], pretokenized=True)
order = list(range(len(src)))
random.Random(0).shuffle(order)
spent = collections.Counter()


def timed(owner, name):
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        result = inner(*args, **kwargs)
        spent[name] += time.perf_counter() - started
        return result

    setattr(owner, name, wrapper)


for owner, name in ((Transformer, "start"), (Transformer, "step"), (DecoderState, "admit"), (DecoderState, "select"),
                    (DecoderState, "advanced"), (DecoderState, "visible"), (stream_module, "search_step")):
    timed(owner, name)
sizes = []
search, queue = StreamSearch(tr.model, tr.config.decode, tr.positions - 1), iter(order)
started = time.perf_counter()
for _ in range(clients):
    index = next(queue)
    search.add(index, src[index])
with torch.no_grad():
    while search.busy:
        for _ in search.step():
            index = next(queue, None)
            if index is not None:
                search.add(index, src[index])
        if search.state is not None:
            sizes.append((search.state.self_kv.size(-2), search.state.memory_kv.size(4), search.live))
print(f"stream total {time.perf_counter() - started:.1f}s", {k: round(v, 2) for k, v in spent.items()})
print("median store positions", statistics.median(s[0] for s in sizes), "source positions",
      statistics.median(s[1] for s in sizes), "live sentences", statistics.median(s[2] for s in sizes))
spent.clear()
started = time.perf_counter()
tr.translate_ids(src)
print(f"cli total {time.perf_counter() - started:.1f}s", {k: round(v, 2) for k, v in spent.items()})
