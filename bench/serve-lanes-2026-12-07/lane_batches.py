"""What a service lane pays for its batches: one thread decoding the gl-en test set (fp32, the checkpoint's beam) as
the command line does (length-sorted token-budget batches), in length-sorted batches of 32 sentences, and in random
batches of 32 (what a process of `nmt serve --workers 2` gets from its ~32 one-sentence clients); steps counted.

    OMP_NUM_THREADS=1 python lane_batches.py CHECKPOINT SOURCE
"""
import random
import sys
import time

import torch

from nmt.machine.allocator import reexec_with_allocator

reexec_with_allocator()
from nmt.inference.translator import Translator  # noqa: E402
from nmt.model.transformer import Transformer  # noqa: E402

torch.set_num_threads(1)
translator = Translator.from_checkpoint(sys.argv[1], precision="fp32")
sources = translator.encode(open(sys.argv[2], encoding="utf-8").read().splitlines(), pretokenized=True)
steps = [0]
original = Transformer.step


def counted(self, prev, state):
    steps[0] += 1
    return original(self, prev, state)


Transformer.step = counted
order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
shuffled = list(range(len(sources)))
random.Random(0).shuffle(shuffled)
layouts = {"command line (token budget)": [list(range(len(sources)))],
           "sorted batches of 32": [order[i:i + 32] for i in range(0, len(order), 32)],
           "random batches of 32": [shuffled[i:i + 32] for i in range(0, len(shuffled), 32)]}
translator.translate_ids(sources[:32])
for round_index in range(2):
    for name, batches in layouts.items():
        steps[0] = 0
        started = time.perf_counter()
        for batch in batches:
            translator.translate_ids([sources[i] for i in batch])
        seconds = time.perf_counter() - started
        print(f"round {round_index + 1} {name:28s} {len(sources) / seconds:6.1f} sentences/s  {steps[0]:5d} steps  "
              f"{1000 * seconds / steps[0]:6.2f} ms/step", flush=True)
