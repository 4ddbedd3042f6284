"""The machine a run is on: device, precision and distributed runtime (:mod:`~nmt.machine.runtime`), CPU and bf16
probes (:mod:`~nmt.machine.hardware`, :mod:`~nmt.machine.cpu`), the allocator and the fp32 GEMM route."""
