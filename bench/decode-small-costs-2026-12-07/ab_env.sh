#!/bin/bash
# ab_env.sh MODE ROUNDS: /work/main with NMT_FP32_GEMM=mkl against =onednn, alternating, one thread on core 0
MODE=$1; R=$2
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then order="mkl onednn"; else order="onednn mkl"; fi
  for v in $order; do
    res=$(cd /work/main && NMT_FP32_GEMM=$v OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python /work/prof50/work.py /work/serve-model/checkpoint_best.pt /work/data/gl-en/raw/test.gl $MODE fp32 2>/dev/null | tail -1)
    echo "round $r $v $MODE $res"
  done
done
