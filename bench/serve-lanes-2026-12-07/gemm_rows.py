"""One thread: microseconds per product of M rows by an N x K weight, hot in a loop (the same weight each call), with
MKL (addmm), MKL packed and oneDNN packed.

    OMP_NUM_THREADS=1 python gemm_rows.py > gemm_rows.out
"""
import time, torch
torch.set_num_threads(1)
def bench(f, n=200):
    for _ in range(10): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e6
print("M     N     K    addmm_us  mklpacked_us  onednnpacked_us")
for N, K in ((768, 256), (1024, 256), (256, 1024), (3904, 256)):
    w = torch.randn(N, K); b = torch.randn(N)
    mw = torch.ops.mkl._mkl_reorder_linear_weight(w, 64)
    ow = torch.ops.mkldnn._reorder_linear_weight(w, None)
    for M in (4, 16, 64, 128, 256):
        x = torch.randn(M, K)
        a = bench(lambda: torch.addmm(b, x, w.t()))
        mw = torch.ops.mkl._mkl_reorder_linear_weight(w, M)
        m = bench(lambda: torch.ops.mkl._mkl_linear(x, mw, w, b, M))
        o = bench(lambda: torch.ops.mkldnn._linear_pointwise(x, ow, b, "none", [], ""))
        print(f"{M:4d} {N:5d} {K:5d} {a:9.1f} {m:12.1f} {o:14.1f}", flush=True)
