#!/bin/bash
# ab.sh MODE ROUNDS [precision]: alternate /work/base (A) and /work/main (B), one thread on core 0
MODE=$1; R=$2; P=${3:-fp32}
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then order="base main"; else order="main base"; fi
  for v in $order; do
    res=$(cd /work/$v && OMP_NUM_THREADS=1 PYTHONPATH=/work/$v taskset -c 0 /work/main/.venv/bin/python /work/prof50/work.py /work/serve-model/checkpoint_best.pt /work/data/gl-en/raw/test.gl $MODE $P 2>/dev/null | tail -1)
    echo "round $r $v $MODE $P $res"
  done
done
