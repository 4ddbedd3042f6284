"""Per-shape matmul time of one fp32 training update of configs/bench.yaml: MKL (as replayed by nmt.perf.roof)
against oneDNN's linear, and the tied output width padded to a multiple of 16."""
import sys
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
import collections, statistics, time, torch
from nmt.config import load_config
from nmt.machine.runtime import setup, teardown
from nmt.perf.bench import make_trainer
from nmt.perf.roof import record_step
from nmt.training.loader import BatchLoader
from nmt.machine.fp32_gemm import onednn_linear

cfg = load_config("bench", ["train.progress=false", "train.tensorboard=false", "data.data_dir=/work/data",
                            "train.precision=fp32"])
rt = setup(cfg.train.device, cfg.train.precision)
print("precision", rt.precision, "threads", torch.get_num_threads())
trainer = make_trainer(cfg, rt)
batches = trainer.epoch_batches(1); data = trainer.epoch_data(1); loader = BatchLoader(rt.device)
def step(k):
    return trainer.train_step(loader.get(data, (0, k), [batches[k]], (0, k + 1), [batches[k + 1]]))
for k in range(3): step(k)
allmm = []
for k in range(3, 7):
    mms, _ = record_step(lambda: step(k)); allmm += mms
groups = collections.Counter((m.batch, m.m, m.k, m.n) for m in allmm)
def best(fn, r=3):
    b = 1e9
    for _ in range(r):
        t = time.perf_counter(); fn(); b = min(b, time.perf_counter() - t)
    return b
rows = []
with torch.no_grad():
    for (bt, m, k, n), c in groups.items():
        a = torch.randn(bt, m, k); b = torch.randn(bt, k, n); w = b.transpose(1, 2).contiguous()
        if bt == 1:
            fns = {"mkl": lambda: torch.mm(a[0], b[0]), "dnn": lambda: onednn_linear(a[0], w[0], None)}
            n16 = -(-n // 16) * 16
            if n16 != n:
                bp = torch.randn(k, n16); fns["mkl_pad"] = lambda: torch.mm(a[0], bp)
        else:
            fns = {"mkl": lambda: torch.bmm(a, b)}
        for f in fns.values(): f()
        t = {name: statistics.median(best(f) for _ in range(3)) for name, f in fns.items()}
        rows.append(((bt, m, k, n), c, t, 2 * bt * m * k * n))
total = sum(c * r["mkl"] for _, c, r, _ in rows)
print(f"total MKL replay {total/4*1000:.0f} ms/update over {len(groups)} shapes")
rows.sort(key=lambda r: -r[1] * r[2]["mkl"])
bmm = sum(c * r["mkl"] for s_, c, r, _ in rows if s_[0] > 1)
dnn = sum(c * (r.get("dnn", r["mkl"])) for _, c, r, _ in rows)
bestall = sum(c * min(r.values()) for _, c, r, _ in rows)
padded = [(c * r["mkl"], c * r["mkl_pad"]) for _, c, r, _ in rows if "mkl_pad" in r]
print(f"output forward (n=3900): MKL {sum(a for a, _ in padded)/4*1000:.0f} ms, n padded to 3904 "
      f"{sum(b for _, b in padded)/4*1000:.0f} ms per update")
print(f"bmm {bmm/4*1000:.0f} ms; all-oneDNN mm {dnn/4*1000:.0f} ms; best per shape {bestall/4*1000:.0f} ms")
for shape, c, t, fl in rows:
    if shape[0] > 1: print("bmm", shape, c, f"share {c*t['mkl']/total*100:.1f}%", f"{fl/t['mkl']/1e9:.0f}GF/s")
for shape, c, t, fl in rows:
    if shape[0] > 1: continue
    print(shape, c, f"share {c*t['mkl']/total*100:.1f}%", " ".join(f"{k} {fl/v/1e9:.0f}GF/s" for k, v in t.items()))
loader.close(); teardown(rt)
