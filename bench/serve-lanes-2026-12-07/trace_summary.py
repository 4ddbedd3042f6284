"""Summary of ``batcher-trace.txt`` (one round at 64 clients with ``batcher-trace.patch`` applied, ``trace-run.md``):
how busy the two decoding lanes were, and what a lane decodes per busy second.

    python trace_summary.py
"""
from pathlib import Path

lines = (Path(__file__).parent / "batcher-trace.txt").read_text().splitlines()
decodes = [line.split() for line in lines if " decode " in line]
starts = [float(d[0]) for d in decodes]
ends = [float(d[0]) + float(d[3][:-2]) / 1000 for d in decodes]
busy, wall = sum(float(d[3][:-2]) for d in decodes) / 1000, max(ends) - min(starts)
sentences = sum(int(d[2]) for d in decodes)
print(f"{len(decodes)} batches, {sentences} sentences, {wall:.1f} s: lanes busy {busy / (2 * wall):.0%} of the time, "
      f"{sentences / busy:.1f} sentences per busy lane-second")
