import time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
for M in (4, 84, 256):
    x = torch.randn(M, 3900) * 5
    buf = torch.full((M, 3904), -1e9); buf[:, :3900] = x
    v = buf[:, :3900]
    ref = torch.log_softmax(x, -1)
    p = torch.log_softmax(buf, -1)[:, :3900]
    s = torch.log_softmax(v, -1)
    print(M, "padded equal", torch.equal(p, ref), (p - ref).abs().max().item(), "strided-view equal", torch.equal(s, ref), s.stride())
    res = {}
    for rnd in range(7):
        for name, f in (("plain", lambda: torch.log_softmax(x, -1)), ("padded", lambda: torch.log_softmax(buf, -1)), ("view", lambda: torch.log_softmax(v, -1))):
            t = time.perf_counter()
            for _ in range(200): f()
            res.setdefault(name, []).append((time.perf_counter() - t) / 200 * 1e6)
    print(" ".join(f"{n} {sorted(v_)[3]:.0f}us" for n, v_ in res.items()))
