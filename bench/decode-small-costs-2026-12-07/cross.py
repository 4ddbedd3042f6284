import time, torch, torch.nn.functional as F
torch.set_num_threads(1)
torch.manual_seed(0)
for S in (20, 40, 80, 120):
    q = torch.randn(21, 4, 4, 64); k = torch.randn(21, 4, S, 64); v = torch.randn(21, 4, S, 64)
    mask = torch.ones(21, 1, 1, S, dtype=torch.bool); mask[::3, ..., S - 5:] = False
    sc = 0.125
    def sdpa(): return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sc)
    def mm():
        lg = torch.matmul(q, k.transpose(-1, -2)) * sc
        lg = torch.where(mask, lg, float("-inf"))
        return torch.matmul(lg.softmax(-1), v)
    print(S, "maxdiff", (sdpa() - mm()).abs().max().item())
    res = {}
    for rnd in range(7):
        for name, f in (("sdpa", sdpa), ("mm", mm)):
            t = time.perf_counter()
            for _ in range(200): f()
            res.setdefault(name, []).append((time.perf_counter() - t) / 200 * 1e6)
    print(" ".join(f"{n} {sorted(x)[3]:.0f}us" for n, x in res.items()))
