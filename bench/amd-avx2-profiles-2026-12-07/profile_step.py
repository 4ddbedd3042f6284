"""Profile the fp32 training step of configs/bench.yaml on this machine (torch.profiler, self CPU time by op)."""
import sys
from nmt.machine.allocator import reexec_with_allocator
reexec_with_allocator()
import time, torch
from nmt.config import load_config
from nmt.machine.runtime import setup, teardown
from nmt.perf.bench import make_trainer
from nmt.training.loader import BatchLoader

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
extra = sys.argv[2:]
cfg = load_config("bench", ["train.progress=false", "train.tensorboard=false", "data.data_dir=/work/data", *extra])
rt = setup(cfg.train.device, cfg.train.precision)
print("precision", rt.precision, rt.precision_reason, "threads", torch.get_num_threads())
trainer = make_trainer(cfg, rt)
batches = trainer.epoch_batches(1)
data = trainer.epoch_data(1)
loader = BatchLoader(rt.device)
def step(k):
    return trainer.train_step(loader.get(data, (0, k), [batches[k]], (0, k + 1), [batches[k + 1]]))
for k in range(5):
    step(k)
t = time.perf_counter()
for k in range(5, 5 + steps):
    step(k)
print(f"plain: {(time.perf_counter() - t) / steps * 1000:.1f} ms/step")
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for k in range(5, 5 + steps):
        step(k)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=45, max_name_column_width=50))
loader.close(); teardown(rt)
