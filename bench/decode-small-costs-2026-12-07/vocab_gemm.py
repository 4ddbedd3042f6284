import time, torch, sys
torch.set_num_threads(1)
M = int(sys.argv[1]) if len(sys.argv) > 1 else 84
x = torch.randn(M, 256)
res = {}
for rnd in range(7):
    for n in (3900, 3904, 3968, 4096):
        w = torch.randn(n, 256); b = torch.randn(n)
        for _ in range(5): torch.nn.functional.linear(x, w, b)
        t = time.perf_counter()
        for _ in range(200): torch.nn.functional.linear(x, w, b)
        res.setdefault(n, []).append((time.perf_counter() - t) / 200 * 1e6)
for n, v in res.items():
    v.sort(); print(f"M={M} N={n}: median {v[3]:.0f} us, per column {v[3]/n*1000:.1f} ns, range {v[0]:.0f}-{v[-1]:.0f}")
