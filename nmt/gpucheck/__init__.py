"""``scripts/gpu_check``: everything the trainer must prove on a GPU, in one command of at most 8 minutes.

Phases run one after another, each in its own process under a wall-clock limit, and the report
(``gpu_check.md`` and ``gpu_check.json``) is rewritten after each one, so a run cut short still leaves the results so
far. The phases (:data:`nmt.gpucheck.runner.PHASES`):

- ``env``: GPU, driver, torch, CUDA, the GPU's peak bf16/TF32 rates.
- ``tests``: the test suite's ``gpu``-marked tests.
- ``resume``: training killed with SIGKILL twice and resumed on CUDA, compared with an uninterrupted run.
- ``torchrun``: ``torchrun --nproc_per_node=1`` with nccl, and 2 processes on one GPU if nccl allows it.
- ``throughput``: the papers' 6+6-layer d512 model at 4096-token batches, bf16 and fp32 (TF32): tokens/s, model
  FLOP utilisation, peak memory, and the largest batch that fits.
- ``glen``: the papers' gl-en configuration trained for what the budget leaves, the test set decoded with beam 4.

``--dry-run`` runs every phase on the CPU with a tiny model and reduced budgets (a test of the suite).
"""
