"""Checkpoint files: the atomic, safely loaded format (:mod:`~nmt.checkpoint.files`) and checkpoint averaging
(:mod:`~nmt.checkpoint.average`)."""
