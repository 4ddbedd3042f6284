"""Measurement: ``nmt bench`` (training throughput, memory, decoding speed; :mod:`nmt.perf.bench`) and the matmul
roof and memory ceiling of a training step (:mod:`nmt.perf.roof`).

Nothing in the toolkit's core imports this package (tests/test_structure.py): it drives the trainer's public step
(:meth:`nmt.training.loop.Trainer.train_step`, :meth:`~nmt.training.loop.Trainer.settle`) and the translator from
outside. The probes that choose a precision at run time (:func:`nmt.machine.hardware.bf16_support`,
:func:`nmt.inference.precision.decode_speeds`) are decisions of the core, not measurements, and stay there.
"""
