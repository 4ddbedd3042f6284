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


def counting_translator(checkpoint: str, source: str) -> tuple[Translator, list[list[int]], list[int]]:
    """One fp32 thread's translator, the pieces of ``source``'s lines, and a counter of beam-search steps
    (``steps[0]``, counted from here on: batch_surface.py uses it too)."""
    torch.set_num_threads(1)
    translator = Translator.from_checkpoint(checkpoint, precision="fp32")
    sources = translator.encode(open(source, encoding="utf-8").read().splitlines(), pretokenized=True)
    steps = [0]
    original = Transformer.step

    def counted(self, prev, state):
        steps[0] += 1
        return original(self, prev, state)

    Transformer.step = counted
    return translator, sources, steps


def timed(translator: Translator, sources: list[list[int]], batches: list[list[int]], steps: list[int]) -> float:
    """Seconds to decode ``batches`` (indices into ``sources``) one after another; ``steps[0]`` counts their steps."""
    steps[0] = 0
    started = time.perf_counter()
    for batch in batches:
        translator.translate_ids([sources[i] for i in batch])
    return time.perf_counter() - started


def main() -> None:
    translator, sources, steps = counting_translator(sys.argv[1], sys.argv[2])
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    shuffled = list(range(len(sources)))
    random.Random(0).shuffle(shuffled)
    layouts = {"command line (token budget)": [list(range(len(sources)))],
               "sorted batches of 32": [order[i:i + 32] for i in range(0, len(order), 32)],
               "random batches of 32": [shuffled[i:i + 32] for i in range(0, len(shuffled), 32)]}
    translator.translate_ids(sources[:32])
    for round_index in range(2):
        for name, batches in layouts.items():
            seconds = timed(translator, sources, batches, steps)
            print(f"round {round_index + 1} {name:28s} {len(sources) / seconds:6.1f} sentences/s  {steps[0]:5d} steps  "
                  f"{1000 * seconds / steps[0]:6.2f} ms/step", flush=True)


if __name__ == "__main__":
    main()
