"""The Transformer as the papers define it, built from :mod:`nmt.modules`: the model (:mod:`~nmt.model.transformer`),
what it is built from (:mod:`~nmt.model.spec`), and incremental decoding on a plain model (the decoder state, its
slot placement and one decoder step: :mod:`~nmt.model.decoder_state`, :mod:`~nmt.model.placement`,
:mod:`~nmt.model.incremental`). Nothing here imports the speed wing (:mod:`nmt.kernels`)."""
