"""The batched decoding loop that validation and ``nmt translate`` share (:func:`decode_sources`): sources grouped
into length-sorted batches under a token budget (:func:`decode_batches`), each batch a :class:`DecodeJob` (plain
data: it pickles to a decoding process, and so do its hypotheses) run by :func:`run_job` or by a runner the caller
gives, the batches run one after the other or by a mapper the caller gives (``nmt translate --workers``)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from nmt.config import DecodeConfig
from nmt.data.batching import pad_sources
from nmt.machine.runtime import Runtime
from nmt.search import Hypothesis, Sampling, Seq2Seq, decode


def decode_batches(lengths: Sequence[int], max_tokens: int, max_sentences: int | None = None) -> list[list[int]]:
    """Group indices into batches of similar length whose padded size ``n * longest`` stays within ``max_tokens``
    and whose size ``n`` stays within ``max_sentences`` (None: no limit).

    Longest sentences come first (an out-of-memory error then shows up at once); a sentence longer than the budget
    gets a batch of its own.
    """
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order.tolist():
        longest_if_added = max(longest, lengths[index])
        full = max_sentences is not None and len(current) >= max_sentences
        if current and (full or longest_if_added * (len(current) + 1) > max_tokens):
            batches.append(current)
            current, longest_if_added = [], lengths[index]
        current.append(index)
        longest = longest_if_added
    if current:
        batches.append(current)
    return batches


@dataclass(frozen=True)
class DecodeJob:
    """One batch to decode.

    Attributes:
        rows: piece ids of each source sentence, without EOS (none empty).
        keys: each row's sampling key (its input index plus the first index; see :mod:`nmt.search.sampling`).
        settings: beam, length penalty, n-best and search rules.
        max_len_cap: the longest output the model's positions allow (None: no cap).
        sampling: draw samples instead of searching (None: search).
    """

    rows: list[list[int]]
    keys: list[int]
    settings: DecodeConfig
    max_len_cap: int | None
    sampling: Sampling | None


def run_job(model: Seq2Seq[Any], runtime: Runtime, job: DecodeJob) -> list[list[Hypothesis]]:
    """Decode ``job`` with ``model`` under ``runtime``'s autocast (set per thread, as is ``no_grad``)."""
    src = pad_sources(job.rows).to(runtime.device)
    keys = torch.tensor(job.keys, dtype=torch.int64)
    with torch.no_grad(), runtime.autocast():
        return decode(model, src, job.settings, job.max_len_cap, job.sampling, keys)


Runner = Callable[[DecodeJob], list[list[Hypothesis]]]
BatchResults = Iterable[tuple[list[int], list[list[Hypothesis]]]]
Mapper = Callable[[Callable[[list[int]], list[list[Hypothesis]]], list[list[int]]], BatchResults]


def in_order(fn: Callable[[list[int]], list[list[Hypothesis]]], batches: list[list[int]]) -> Iterator[
        tuple[list[int], list[list[Hypothesis]]]]:
    """Run the batches one after the other in this thread."""
    for batch in batches:
        yield batch, fn(batch)


def decode_sources(model: Seq2Seq[Any], sources: Sequence[Sequence[int]], settings: DecodeConfig, runtime: Runtime,
                   max_len_cap: int | None, batch_size: int | None = None, progress: bool = False,
                   sampling: Sampling | None = None, first_index: int = 0, runner: Runner | None = None,
                   mapper: Mapper = in_order) -> list[list[Hypothesis]]:
    """The one batched decoding loop of validation and ``nmt translate``: piece-id sources (without EOS) in
    length-sorted batches of ``settings.max_tokens`` padded source tokens and at most ``batch_size`` sentences,
    each a :class:`DecodeJob` decoded by ``runner`` (default :func:`run_job` in this process, under ``runtime``'s
    autocast; :mod:`nmt.inference` passes its decoding processes), with ``sampling``: sampled, each sentence keyed
    by ``first_index`` + its position, so its samples do not depend on the batching. ``mapper`` runs the batches
    (default: one after the other; :mod:`nmt.inference` passes its worker threads); results in input order.

    Empty sources are not decoded: they get ``settings.nbest`` empty hypotheses with score 0.
    """
    results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0, [0.0])] * settings.nbest for _ in sources]
    todo = [i for i, src in enumerate(sources) if len(src)]
    decode_job = runner if runner is not None else functools.partial(run_job, model, runtime)

    def run(batch: list[int]) -> list[list[Hypothesis]]:
        indices = [todo[j] for j in batch]
        rows = [[int(piece) for piece in sources[i]] for i in indices]
        return decode_job(DecodeJob(rows, [i + first_index for i in indices], settings, max_len_cap, sampling))

    batches = decode_batches([len(sources[i]) + 1 for i in todo], settings.max_tokens, batch_size)
    with tqdm(total=len(todo), unit="sent", disable=not progress, file=sys.stderr) as bar:
        for batch, hyps in mapper(run, batches):
            for j, nbest_list in zip(batch, hyps, strict=True):
                results[todo[j]] = nbest_list
            bar.update(len(batch))
    return results
