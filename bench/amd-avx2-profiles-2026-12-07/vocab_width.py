import statistics, time, torch, torch.nn.functional as F
torch.set_num_threads(1)
def t(f, r=3):
    f(); best = 1e9
    for _ in range(r):
        s = time.perf_counter(); f(); best = min(best, time.perf_counter() - s)
    return best
x = torch.randn(3990, 256)
W = {n: torch.randn(n, 256) for n in (3900, 3904)}
b = {n: torch.randn(n) for n in (3900, 3904)}
ratios = []
for rnd in range(7):
    a = t(lambda: F.linear(x, W[3900], b[3900])); c = t(lambda: F.linear(x, W[3904], b[3904]))
    ratios.append(a / c)
    print(f"round {rnd}: 3900 {a*1e3:.1f} ms, 3904 {c*1e3:.1f} ms")
print("3900/3904 time ratio median", round(statistics.median(ratios), 2), "range", round(min(ratios), 2), round(max(ratios), 2))
