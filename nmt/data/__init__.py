"""Data pipeline: download, corpus reading and cleaning, Moses tokenization, SentencePiece, binarized cache.

Modules (import them directly; this package imports nothing heavy on purpose):

- :mod:`nmt.data.catalog` the published files: known sizes and SHA-256, default mirrors, ``$NMT_MIRROR``.
- :mod:`nmt.data.download` HTTP fetch from mirrors with cache, checksums, retries and Range resume; safe tar
  extraction.
- :mod:`nmt.data.settings` a pair's data settings from its config, expected line counts, ``nmt train``'s check.
- :mod:`nmt.data.text` strict UTF-8 line reading and parallel-corpus cleaning.
- :mod:`nmt.data.corpora` the sources (TED talks TSV, IWSLT'15 en-vi, local files) behind one registry.
- :mod:`nmt.data.tokenize` optional Moses tokenization (sacremoses).
- :mod:`nmt.data.bpe` the joint SentencePiece BPE model (:class:`~nmt.data.bpe.SentencePieceTokenizer`).
- :mod:`nmt.data.binarized` the token-id cache ``bin/{split}.{lang}.{tokens,offsets}.npy``.
- :mod:`nmt.data.prepare` ``nmt prepare``: everything above, written atomically, plus ``meta.json``.
- :mod:`nmt.data.batching` token-budget batches for training and decoding.
"""
