"""Using a trained model: the :class:`~nmt.inference.translator.Translator`, decoding jobs run in this process, in
threads or in worker processes (:mod:`~nmt.inference.jobs`, :mod:`~nmt.inference.threads`,
:mod:`~nmt.inference.processes`), ensembles, forced-decoding scores and int8 decoding (:mod:`~nmt.inference.int8`)."""
