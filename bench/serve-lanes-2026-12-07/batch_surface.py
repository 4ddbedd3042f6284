"""What a lane's batches cost by size and mix of lengths: one thread decoding the gl-en test set (fp32, the
checkpoint's beam) in batches of 8-64 sentences, length-sorted, random, and cut by length from random pools (the
sentences of a pool of 64, 128 or 256 random ones, sorted and cut into batches of 16 or 32: what a scheduler that
groups waiting sentences by length can form); beam-search steps counted.

    OMP_NUM_THREADS=1 python batch_surface.py CHECKPOINT SOURCE
"""
import random
import sys

from lane_batches import counting_translator, timed  # this folder's script: the same translator and step counter

translator, sources, steps = counting_translator(sys.argv[1], sys.argv[2])
n = len(sources)
order = sorted(range(n), key=lambda i: len(sources[i]))
shuffled = list(range(n))
random.Random(0).shuffle(shuffled)


def pooled(pool: int, size: int) -> list[list[int]]:
    batches = []
    for start in range(0, n, pool):
        part = sorted(shuffled[start:start + pool], key=lambda i: len(sources[i]))
        batches += [part[i:i + size] for i in range(0, len(part), size)]
    return batches


layouts = {f"sorted {b}": [order[i:i + b] for i in range(0, n, b)] for b in (8, 16, 32, 64)}
layouts.update({f"random {b}": [shuffled[i:i + b] for i in range(0, n, b)] for b in (16, 32, 64)})
layouts.update({f"pool {p} cut {b}": pooled(p, b) for p, b in ((64, 32), (64, 16), (128, 32), (256, 32))})
translator.translate_ids(sources[:32])
for name, batches in layouts.items():
    seconds = timed(translator, sources, batches, steps)
    print(f"{name:18s} {n / seconds:6.1f} sent/s {steps[0]:5d} steps {1000 * seconds / steps[0]:6.2f} ms/step",
          flush=True)
