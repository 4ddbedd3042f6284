"""The per-step fixed cost of beam search: the preset's architecture (3+3 layers, 4 heads, QKNorm, beam 4) at tiny
widths (d_model 16, d_ff 32, vocab 64), where the products cost ~nothing, decoding batches of 21 random sentences
of 10-40 tokens for a fixed 40 steps each (EOS forbidden): the time per step is Python, dispatch and small ops."""
import sys, time, torch
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
from nmt import config, kernels
from nmt.model.spec import ModelSpec
from nmt.model.transformer import build_model
from nmt.search import beam_search
from nmt.vocab import EOS, PAD, SPECIALS
torch.set_num_threads(1)
d, ff, V = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cfg = config.config_from_dict({"system": "qknorm", "model": {"enc_layers": 3, "dec_layers": 3, "d_model": d, "d_ff": ff,
                                "n_heads": 4, "dropout": 0.0, "max_positions": 256}})
torch.manual_seed(0)
model = kernels.accelerate(build_model(cfg.model, ModelSpec(V, 30.0))).eval()
with torch.no_grad():
    model.embed.output_bias[EOS] = -1e4  # never ends early: every sentence runs to its length limit
g = torch.Generator().manual_seed(1)
lengths = torch.randint(10, 40, (21,), generator=g)
src = torch.full((21, 40), PAD)
for i, n in enumerate(lengths.tolist()):
    src[i, :n - 1] = torch.randint(SPECIALS, V, (n - 1,), generator=g); src[i, n - 1] = EOS
steps = [0]
orig = type(model).step
def step(self, prev, state):
    steps[0] += 1
    return orig(self, prev, state)
type(model).step = step
for r in range(4):
    steps[0] = 0
    t = time.perf_counter()
    beam_search(model, src, beam=4, max_len_a=0.0, max_len_b=40)
    dt = time.perf_counter() - t
    print(f"d_model {d} d_ff {ff} vocab {V}: {steps[0]} steps, {1000 * dt / steps[0]:.2f} ms/step", flush=True)
if len(sys.argv) > 4:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as p:
        beam_search(model, src, beam=4, max_len_a=0.0, max_len_b=40)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
