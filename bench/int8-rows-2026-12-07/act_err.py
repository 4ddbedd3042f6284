"""Relative error of int8 products against the float products of the same int8 weights, on the real inputs of
every quantized layer while decoding 64 test sentences: one scale per tensor (torch's dynamic quantization, the
code before this change), per row symmetric (this change, except after the ReLU), per row on [0, 1] (this change
for the post-ReLU `ffn.down` layers, whose inputs are never negative) and per row asymmetric (min/max per row, not adopted: more operations per product).
Runs on the code before the change (its modules are torch's dynamic Linear layers):

    python act_err.py CODE_AT_a17a2b2 CHECKPOINT test.gl > act_err.out
"""
import sys
sys.path.insert(0, sys.argv.pop(1))
import torch
from collections import defaultdict
from nmt.inference.translator import Translator
from nmt.inference.int8 import is_quantized
torch.set_num_threads(2)
tr = Translator.from_checkpoint(sys.argv[1], precision="int8")
src = tr.encode(open(sys.argv[2], encoding="utf-8").read().splitlines()[:64], pretokenized=True)
op = torch.ops.quantized.linear_dynamic
errs = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0])
def hook(name):
    def f(mod, inp, out):
        x = inp[0].reshape(-1, inp[0].size(-1)).float()
        if x.size(0) < 2: return
        w = mod.weight().dequantize(); b = mod.bias()
        ref = torch.nn.functional.linear(x, w, b)
        p = mod._packed_params._packed_params
        dyn = op(x, p, True)
        r = x.abs().amax(1, keepdim=True).clamp_min(1e-12)
        s = torch.cat([x / r, torch.tensor([[1.0, -64.0 / 63.0] + [0.0] * (x.size(1) - 2)])])
        sym = op(s, p, True)[:-1] * r + (b if b is not None else 0) - (b if b is not None else 0) * r  # bias was scaled
        lo = x.amin(1, keepdim=True); hi = x.amax(1, keepdim=True); span = (hi - lo).clamp_min(1e-12)
        a = torch.cat([(x - lo) / span, torch.tensor([[1.0] + [0.0] * (x.size(1) - 1)])])
        bb = b if b is not None else 0
        asym = (op(a, p, True)[:-1] - bb) * span + lo * w.sum(1) + bb
        u = torch.cat([x / x.amax(1, keepdim=True).clamp_min(1e-12), torch.tensor([[1.0] + [0.0] * (x.size(1) - 1)])])
        uns = (op(u, p, True)[:-1] - bb) * x.amax(1, keepdim=True).clamp_min(1e-12) + bb
        n = ref.norm()
        e = errs[name]; e[0] += ((dyn - ref).norm() / n).item(); e[1] += ((sym - ref).norm() / n).item()
        e[2] += ((uns - ref).norm() / n).item() if bool((x >= 0).all()) else float("nan")
        e[3] += ((asym - ref).norm() / n).item(); e[4] += 1
    return f
for name, m in tr.model.named_modules():
    if is_quantized(m):
        m.register_forward_hook(hook(name))
tr.translate_ids(src)
print("layer  calls  per-tensor  per-row-signed  per-row-[0,1] (inputs >= 0 only)  per-row-asym (mean relative error)")
for k, (a, b, c, d, n) in errs.items():
    print(f"{k:40s} {n:5d} {a/n:.4f} {b/n:.4f} {c/n:.4f} {d/n:.4f}")
