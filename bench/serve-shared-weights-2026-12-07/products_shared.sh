#!/bin/bash
# usage (from the repository root): bench/serve-shared-weights-2026-12-07/products_shared.sh ROWS
# writes a decoder step's weights to /dev/shm, then twice: two processes (one per core) with their own copies,
# two mapping the one file, one alone with its own copy
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
$PY -c "import torch; n=sum(a*b for a,b in [(768,256),(256,256),(256,256),(256,256),(1024,256),(256,1024)]*3+[(3904,256)]); t=torch.from_file('/dev/shm/nmt-shared-weights', shared=True, size=n); t.normal_(0, 0.05)"
for r in 1 2; do
for mode in own shared; do
  taskset -c 0 $PY bench/serve-shared-weights-2026-12-07/products_shared.py $mode $1 5 &
  taskset -c 1 $PY bench/serve-shared-weights-2026-12-07/products_shared.py $mode $1 5 &
  wait
done
taskset -c 0 $PY bench/serve-shared-weights-2026-12-07/products_shared.py own $1 5
done
rm -f /dev/shm/nmt-shared-weights
