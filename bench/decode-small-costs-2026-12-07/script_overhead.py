"""Per-op cost of small tensor operations from eager Python against the same chain in a TorchScript function: a
chain of 96 small ops (16 a round, 6 rounds) (view/transpose/mul/add/where/softmax/matmul on (84, 4, 1, 64)-sized tensors), one thread."""
import time, torch
torch.set_num_threads(1)

def chain(x: torch.Tensor, w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    for _ in range(6):
        q = x.view(21, 4, 4, 64)
        k = q.transpose(-1, -2)
        s = torch.matmul(q, k) * 0.125
        s = torch.where(mask, s, torch.full_like(s, -1e9))
        p = s.softmax(-1)
        o = torch.matmul(p, q)
        o = o.reshape(84, 256)
        n = torch.linalg.vector_norm(o, dim=[-1], keepdim=True).clamp_min(1e-6)
        x = (o / n + x.view(84, 256)) * 0.5
        x = torch.nn.functional.layer_norm(x, [256])
    return x

scripted = torch.jit.script(chain)
x = torch.randn(84, 256); w = torch.randn(256, 256); mask = torch.rand(21, 4, 4, 4) > 0.2
for f in (chain, scripted):
    for _ in range(50): f(x, w, mask)
res = {"eager": [], "script": []}
for r in range(7):
    for name, f in (("eager", chain), ("script", scripted)):
        t = time.perf_counter()
        for _ in range(500): f(x, w, mask)
        res[name].append((time.perf_counter() - t) / 500 * 1e6)
for name, v in res.items():
    v.sort(); print(f"{name}: median {v[3]:.0f} us per chain of 96 ops ({v[3] / 96:.1f} us/op), range {v[0]:.0f}-{v[-1]:.0f}")
x2 = torch.randn(84, 256)
print("same result:", torch.allclose(chain(x2, w, mask), scripted(x2, w, mask)))
