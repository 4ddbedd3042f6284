"""Whether MKL's packed fp32 GEMM (weights packed once, torch.ops.mkl._mkl_linear) speeds up decoding on one thread:
every Linear of decoding through it, against the default MKL path, in turn, two rounds (random batches of 32, 64
sentences one at a time, and the command line's token-budget batches; 256 test sentences). Exploratory.

    OMP_NUM_THREADS=1 python mkl_packed.py CHECKPOINT SOURCE [PACK_ROWS]
"""
import random, sys, time, torch
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
from nmt.inference.translator import Translator
import nmt.kernels.linear as kl
import torch.nn.functional as F
torch.set_num_threads(1)
tr = Translator.from_checkpoint(sys.argv[1], precision="fp32")
src = tr.encode(open(sys.argv[2], encoding="utf-8").read().splitlines()[:256], pretokenized=True)
PACKM = int(sys.argv[3]) if len(sys.argv) > 3 else 64
packs = {}
orig = kl.linear
def packed_linear(x, weight, bias, owner=None, part=None):
    if torch.is_grad_enabled() or x.dtype != torch.float32:
        return orig(x, weight, bias, owner, part)
    key = (weight.data_ptr(), tuple(weight.shape))
    p = packs.get(key)
    if p is None:
        w = weight.detach().contiguous()
        p = packs[key] = (torch.ops.mkl._mkl_reorder_linear_weight(w, PACKM), w)
    flat = x.reshape(-1, x.size(-1))
    out = torch.ops.mkl._mkl_linear(flat, p[0], p[1], bias, PACKM)
    return out.view(*x.shape[:-1], weight.size(0))
order = sorted(range(len(src)), key=lambda i: len(src[i])); rnd = list(range(len(src))); random.Random(0).shuffle(rnd)
def run(name):
    out = {}
    for lay, idx, size in (("random32", rnd, 32), ("sorted1", order[:64], 1), ("cli", order, 10**6)):
        t = time.perf_counter(); hyps = []
        for j in range(0, len(idx), size): hyps += tr.translate_ids([src[i] for i in idx[j:j + size]])
        out[lay] = (len(idx) / (time.perf_counter() - t), [h[0].tokens for h in hyps])
    print(name, {k: round(v[0], 1) for k, v in out.items()}, flush=True)
    return out
tr.translate_ids(src[:8])
for r in range(2):
    kl.linear = orig; a = run("mkl     ")
    kl.linear = packed_linear; b = run("mklpack ")
    print("same outputs:", all(a[k][1] == b[k][1] for k in a))
