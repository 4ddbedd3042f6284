"""Training in parts: the run's state (:mod:`~nmt.training.state`), its checkpoints
(:mod:`~nmt.training.resume`), one update and its deferred figures (:mod:`~nmt.training.updates`), evaluation
and the best score (:mod:`~nmt.training.validation`), the stop rules (:mod:`~nmt.training.stopping`), and the loop
that runs them (:mod:`~nmt.training.loop`, re-exported by :mod:`nmt.training.loop`)."""
