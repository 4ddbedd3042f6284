"""One decoding request: how a call decodes besides the search settings.

A call to :class:`~nmt.inference.translator.Translator` is two values: a :class:`~nmt.config.DecodeConfig` (beam,
length penalty, n-best, limits, rules: the checkpoint's ``decode`` section with the call's overrides, built once by
:func:`call_settings`) and a :class:`DecodeRequest` (how the
input is read and the batches are run). Both are checked when built and travel unchanged from the command line or
the Python API down to the search (:func:`nmt.search.batches.decode_sources`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nmt.config import DecodeConfig
from nmt.errors import NmtError
from nmt.search import Sampling


@dataclass(frozen=True)
class DecodeRequest:
    """How one call decodes besides the search settings.

    Attributes:
        pretokenized: the input is Moses-tokenized already (no Moses tokenization nor detokenization).
        batch_size: at most this many sentences per batch (None: only ``max_tokens`` limits a batch).
        workers: batches decoded at a time, one intra-op thread each (processes on a CPU where the model can be
            rebuilt in them, else threads).
        sampling: draw ``nbest`` samples per sentence (:mod:`nmt.search.sampling`) instead of searching.
        progress: a tqdm bar on stderr.
        isolated: with one worker too, decode in a decoding process holding every intra-op thread, not in the
            calling process (``nmt serve``: its event loop's process then runs no torch); where the model cannot be
            rebuilt in a process (a GPU, no checkpoint entries) it decodes in the calling process as usual.
    """

    pretokenized: bool = False
    batch_size: int | None = None
    workers: int = 1
    sampling: Sampling | None = None
    progress: bool = False
    isolated: bool = False

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise NmtError(f"--workers {self.workers} must be at least 1")
        if self.batch_size is not None and self.batch_size < 1:
            raise NmtError(f"--batch-size {self.batch_size} must be at least 1")


def call_settings(base: DecodeConfig, beam: int | None = None, lenpen: float | None = None, nbest: int | None = None,
                  max_tokens: int | None = None, search: str | None = None,
                  length_norm: str | None = None) -> DecodeConfig:
    """The search settings of a call: ``base`` (a checkpoint's ``decode`` section) with the given overrides (None
    keeps ``base``'s), checked once here."""
    overrides: dict[str, Any] = {"beam": beam, "lenpen": lenpen, "nbest": nbest, "max_tokens": max_tokens,
                                 "search": search, "length_norm": length_norm}
    settings = dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})
    if settings.beam < 1:
        raise NmtError(f"--beam {settings.beam} must be at least 1")
    if settings.nbest < 1:
        raise NmtError(f"--nbest {settings.nbest} must be at least 1")
    if settings.length_norm != "gnmt" and settings.search != "fairseq":
        raise NmtError(f"--length-norm {settings.length_norm} needs --search fairseq")
    return settings
