"""One one-thread process runs a decoder step's 19 products (the CPU preset's: d_model 256, d_ff 1024, 3 layers,
3,904 output rows) at ROWS rows for SECONDS: ``own`` on its own copy of the weights, ``shared`` on the copy that
products_shared.sh wrote to /dev/shm, mapped (two such processes share its pages).

    python products_shared.py own|shared ROWS SECONDS
"""

import os
import sys
import time

import torch

torch.set_num_threads(1)
mode, rows, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
shapes = [(768, 256), (256, 256), (256, 256), (256, 256), (1024, 256), (256, 1024)] * 3 + [(3904, 256)]
total = sum(n * k for n, k in shapes)
flat = torch.from_file("/dev/shm/nmt-shared-weights", shared=True, size=total, dtype=torch.float32)
if mode != "shared":
    flat = flat.clone()
weights, at = [], 0
for n, k in shapes:
    weights.append(flat[at:at + n * k].view(n, k))
    at += n * k
inputs = [torch.randn(rows, k) for _, k in shapes]


def step() -> None:
    for x, w in zip(inputs, weights):
        torch.nn.functional.linear(x, w)


for _ in range(20):
    step()
count, started = 0, time.perf_counter()
while time.perf_counter() - started < seconds:
    step()
    count += 1
print(f"{mode} pid {os.getpid()} rows {rows}: {(time.perf_counter() - started) / count * 1000:.3f} ms per step "
      f"({total * 4 / 2**20:.1f} MiB of weights)", flush=True)
