import resource, sys, time, torch
from nmt.config import load_config
from nmt.machine.runtime import setup, teardown
from nmt.machine import allocator
from nmt.perf.bench import make_trainer
from nmt.training.loader import BatchLoader
cfg = load_config("bench", ["train.progress=false", "train.tensorboard=false", "data.data_dir=/work/data"])
rt = setup(cfg.train.device, cfg.train.precision)
trainer = make_trainer(cfg, rt)
batches = trainer.epoch_batches(1); data = trainer.epoch_data(1); loader = BatchLoader(rt.device)
def step(k):
    return trainer.train_step(loader.get(data, (0, k), [batches[k]], (0, k + 1), [batches[k + 1]]))
for k in range(4): step(k)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 6
r0 = resource.getrusage(resource.RUSAGE_SELF); t = time.perf_counter()
for k in range(4, 4 + n): step(k)
r1 = resource.getrusage(resource.RUSAGE_SELF); dt = time.perf_counter() - t
print(f"allocator {allocator.active()}: {(r1.ru_minflt - r0.ru_minflt) / n:,.0f} minor faults/step, "
      f"{dt / n * 1000:.0f} ms/step, sys {(r1.ru_stime - r0.ru_stime) / n * 1000:.0f} ms/step, user {(r1.ru_utime - r0.ru_utime) / n * 1000:.0f} ms/step, maxrss {r1.ru_maxrss/1024:.0f} MiB")
loader.close(); teardown(rt)
