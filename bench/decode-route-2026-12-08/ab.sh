#!/bin/bash
# both cores: ours mkl / onednn, CT2 float32, one batch on both threads and one batch per thread
W=/tmp/nmt-peers/work-gl-en; O=/work/zen4/dec/ab3; mkdir -p $O; cd /work/main
for round in 1 2; do
 for r in mkl auto; do
  NMT_FP32_GEMM=$r .venv/bin/python $W/ours_decode.py $W/ours-decode-model/checkpoint_best.pt fp32 $W/ours-decode.src $O/ours-$r-all-$round.json 1
  NMT_FP32_GEMM=$r .venv/bin/python $W/ours_decode.py $W/ours-decode-model/checkpoint_best.pt fp32 $W/ours-decode.src $O/ours-$r-per-$round.json 2
 done
 /tmp/nmt-peers/venv/bin/python /work/zen4/dec/ct2_decode.py $W/ct2-float32 float32 2 $W/sp/test.gl $O/ct2-all-$round.json 1
 /tmp/nmt-peers/venv/bin/python /work/zen4/dec/ct2_decode.py $W/ct2-float32 float32 2 $W/sp/test.gl $O/ct2-per-$round.json 2
done
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob("/work/zen4/dec/ab3/*.json")):
    d = json.load(open(f)); n = d.get("output_pieces") or sum(len(h.split()) for h in d["hypotheses"])
    print(os.path.basename(f), round(d["seconds"], 2), n, round(n / d["seconds"]))
PY
