"""Top-level ATen calls per beam-search step of the tiny-width model (overhead.py's), and their summed self time."""
import sys, time, torch
sys.argv = [sys.argv[0], "16", "32", "64"]
exec(open("overhead.py").read().split("for r in range(4):")[0])
from torch.profiler import profile, ProfilerActivity
beam_search(model, src, beam=4, max_len_a=0.0, max_len_b=40)
steps[0] = 0
with profile(activities=[ProfilerActivity.CPU]) as p:
    t = time.perf_counter(); beam_search(model, src, beam=4, max_len_a=0.0, max_len_b=40); wall = time.perf_counter() - t
events = [e for e in p.events() if e.cpu_parent is None]
n = steps[0]
top = sum(e.cpu_time_total for e in events) / 1000
print(f"{n} steps; profiled wall {1000 * wall / n:.2f} ms/step; top-level ATen calls {len(events) / n:.0f} per step, "
      f"{top / n:.2f} ms/step inside them")
counts = {}
for e in events:
    c = counts.setdefault(e.name, [0, 0.0]); c[0] += 1; c[1] += e.cpu_time_total
for name, (k, us) in sorted(counts.items(), key=lambda kv: -kv[1][1])[:30]:
    print(f"{name:50s} {k / n:6.1f} calls/step {us / n:8.1f} us/step")
