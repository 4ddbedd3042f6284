"""Raw text in, raw text out: a checkpoint's model, tokenizer and decoding settings behind one :class:`Translator`.

Pipeline for each line: whitespace normalisation → Moses tokenization (sacremoses, the source language of
``data.pair``; entities escaped as in the training corpora) → SentencePiece → beam search → SentencePiece decode →
Moses detokenization (target language). ``pretokenized=True`` skips both Moses steps, for already tokenized text
such as the papers' corpora, and then the output is tokenized too (what tokenized BLEU expects).

Lines are decoded in batches of similar length under a token budget (``max_tokens`` = padded source tokens per
batch, EOS included, as in fairseq; the beam multiplies the decoder's rows on top of that), and results are put back
in input order. :meth:`Translator.translate_stream` does the same for an input of any size, one buffer of lines at a
time. Empty lines give empty translations without touching the model. A line longer than the model's
positions is truncated with a warning on stderr.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import torch
from tqdm import tqdm

from nmt.checkpoint.files import load_checkpoint
from nmt.config import Config, DecodeConfig
from nmt.data.bpe import SentencePieceTokenizer
from nmt.data.text import normalize_line
from nmt.data.tokenize import moses_detokenize, moses_tokenize
from nmt.errors import NmtError
from nmt.inference.ensemble import Ensemble, check_same_pieces
from nmt.inference.jobs import for_precision
from nmt.inference.precision import choose_decode_precision
from nmt.inference.processes import DecodeProcesses, ProcessSlot
from nmt.inference.request import DecodeRequest, call_settings
from nmt.inference.restore import restorable, restore_model
from nmt.inference.scoring import PairScore, score_ids
from nmt.inference.threads import check_workers, map_ordered
from nmt.machine.runtime import Runtime, bound_onednn_cache, resolve_device
from nmt.search import Hypothesis, Sampling, Seq2Seq
from nmt.search.batches import decode_sources

POSITION_MARGIN = 2  # source pieces kept: max_positions minus EOS minus one spare position


class Translator:
    """A model ready to translate text.

    Args:
        model: a :class:`~nmt.search.Seq2Seq` in eval mode on ``device``.
        config: the config the model was trained with (decoding defaults come from ``config.decode``).
        tokenizer: the checkpoint's SentencePiece model.
        device: where ``model`` lives.
        precision: arithmetic of decoding: ``fp32``, ``bf16`` or ``fp16`` autocast, or ``auto``; None takes
            ``config.decode.precision``.
        entries: the :func:`nmt.inference.restore.restorable` entries of the checkpoint(s) ``model`` was restored from
            (:meth:`from_checkpoint` passes them): with them, ``workers`` > 1 on a CPU decodes in processes
            (:mod:`nmt.inference.processes`), which :meth:`close` stops; without, in threads.
    """

    def __init__(self, model: Seq2Seq[Any], config: Config, tokenizer: SentencePieceTokenizer,
                 device: torch.device, precision: str | None = None,
                 entries: Sequence[dict[str, Any]] | None = None) -> None:
        self.model = model
        self.config = config
        self.tokenizer = tokenizer
        self.device = device
        # the runtime's autocast() is the decoding arithmetic
        probed = model.members[0] if isinstance(model, Ensemble) else model  # members are alike enough to probe one
        chosen = choose_decode_precision(precision or config.decode.precision, device,
                                         "decode precision" if precision else "decode.precision",
                                         cast(torch.nn.Module, probed), tokenizer.vocab_size)
        self.model = for_precision(model, chosen.name)  # int8: a quantized copy (nmt/inference/int8.py), no autocast
        self.runtime = Runtime(device, chosen.name, precision_reason=chosen.reason)
        bound_onednn_cache(device, self.runtime.precision)
        self.processes = None if entries is None or device.type != "cpu" else ProcessSlot(entries, chosen.name)
        self.src_lang, self.tgt_lang = config.data.pair.split("-")
        self.positions = int(getattr(model, "max_positions", config.model.max_positions))
        self.max_source_pieces = self.positions - POSITION_MARGIN

    @property
    def precision(self) -> str:
        """The resolved decoding precision: fp32, bf16, fp16 or int8."""
        return self.runtime.precision

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str = "auto", precision: str | None = None) -> Translator:
        """Load a checkpoint written by training or ``nmt average``; ``device`` is ``auto``, ``cpu`` or ``cuda``."""
        dev = resolve_device(device)
        payload = load_checkpoint(path, map_location="cpu")
        model, config, tokenizer = restore_model(payload, dev, path=path)
        return cls(model, config, tokenizer, dev, precision, [restorable(payload, model.state_dict())])

    @classmethod
    def from_checkpoints(cls, paths: Sequence[str | Path], device: str = "auto",
                         precision: str | None = None) -> Translator:
        """One checkpoint, or an ensemble of several (:mod:`nmt.inference.ensemble`) that must share their SentencePiece
        model; decoding defaults come from the first."""
        if len(paths) == 1:
            return cls.from_checkpoint(paths[0], device, precision)
        dev = resolve_device(device)
        payloads = [load_checkpoint(path, map_location="cpu") for path in paths]
        restored = [restore_model(payload, dev, path=path) for payload, path in zip(payloads, paths, strict=True)]
        check_same_pieces([tokenizer.model_bytes() for _, _, tokenizer in restored], [str(p) for p in paths])
        _, config, tokenizer = restored[0]
        entries = [restorable(payload, model.state_dict()) for payload, (model, _, _) in zip(payloads, restored,
                                                                                              strict=True)]
        return cls(cast(Seq2Seq[Any], Ensemble([model for model, _, _ in restored])), config, tokenizer, dev,
                   precision, entries)

    def worker_processes(self, workers: int, isolated: bool = False) -> DecodeProcesses | None:
        """The decoding processes of ``workers`` batches at a time (one thread each; ``isolated`` one worker: one
        process with this one's threads), kept between calls; None where decoding stays in this process (one
        worker not ``isolated``, a GPU, no checkpoint entries to rebuild the model from: threads then)."""
        if self.processes is None or (check_workers(workers) == 1 and not isolated):
            return None
        return self.processes.get(workers, torch.get_num_threads() if workers == 1 else 1)

    def close(self) -> None:
        """Stop the decoding processes, if any (a later call with ``workers`` > 1 starts new ones)."""
        if self.processes is not None:
            self.processes.close()

    def __enter__(self) -> Translator:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def encode(self, lines: Sequence[str], pretokenized: bool = False, first_line: int = 1,
               side: str = "input") -> list[list[int]]:
        """Piece ids of each line (``[]`` for an empty line), truncated to the model's positions with a warning
        that names the ``side`` (``input`` or ``target``: Moses rules of the source or target language) and its line
        (``lines[0]`` being line ``first_line``)."""
        lines = [normalize_line(line) for line in lines]
        if not pretokenized:
            lines = moses_tokenize(lines, self.tgt_lang if side == "target" else self.src_lang)
        encoded = self.tokenizer.encode_batch(lines)
        for offset, ids in enumerate(encoded):
            if len(ids) > self.max_source_pieces:
                print(f"warning: {side} line {first_line + offset} has {len(ids)} subwords; truncated to "
                      f"{self.max_source_pieces} (model max_positions {self.positions})",
                      file=sys.stderr)
                encoded[offset] = ids[: self.max_source_pieces]
        return encoded

    def score(self, sources: Sequence[str], targets: Sequence[str], pretokenized: bool = False,
              max_tokens: int | None = None, batch_size: int | None = None, first_line: int = 1) -> list[PairScore]:
        """Force-decode text pairs (:mod:`nmt.inference.scoring`): the log-probability of each target given its
        source."""
        if len(sources) != len(targets):
            raise NmtError(f"{len(sources)} source lines but {len(targets)} target lines")
        if batch_size is not None and batch_size < 1:
            raise NmtError(f"--batch-size {batch_size} must be at least 1")
        src = self.encode(sources, pretokenized, first_line)
        tgt = self.encode(targets, pretokenized, first_line, side="target")
        return score_ids(cast(torch.nn.Module, self.model), src, tgt, self.runtime,
                         max_tokens or self.config.train.max_tokens, batch_size)

    def decode(self, ids: Sequence[Sequence[int]], pretokenized: bool = False) -> list[str]:
        """Text of each piece-id sequence, Moses-detokenized unless ``pretokenized``."""
        texts = [self.tokenizer.decode(list(seq)) for seq in ids]
        return texts if pretokenized else moses_detokenize(texts, self.tgt_lang)

    def translate_ids(self, sources: Sequence[Sequence[int]], beam: int | None = None, lenpen: float | None = None,
                      nbest: int | None = None, max_tokens: int | None = None, progress: bool = False,
                      batch_size: int | None = None, sampling: Sampling | None = None,
                      first_index: int = 0, workers: int = 1, *, settings: DecodeConfig | None = None,
                      request: DecodeRequest | None = None) -> list[list[Hypothesis]]:
        """Decode piece-id sources (without EOS) in length-sorted token-budget batches of at most ``batch_size``
        sentences (None: no limit); results in input order. With ``sampling``, ``nbest`` samples each instead of a
        search (``first_index``: the input index of ``sources[0]``, which with the seed fixes the samples).
        ``workers`` batches are decoded at a time, each on one intra-op thread: in processes where this translator
        can rebuild its model in them (:meth:`worker_processes`), else in threads (:mod:`nmt.inference.threads`).
        ``settings`` and ``request`` (:mod:`nmt.inference.request`), when given, replace the keyword arguments.
        Empty sources are not decoded: they get ``nbest`` empty hypotheses with score 0.
        """
        settings = settings or call_settings(self.config.decode, beam, lenpen, nbest, max_tokens)
        request = request or DecodeRequest(False, batch_size, workers, sampling, progress)
        return self._translate_ids(sources, settings, request, first_index)

    def _translate_ids(self, sources: Sequence[Sequence[int]], settings: DecodeConfig, request: DecodeRequest,
                       first_index: int) -> list[list[Hypothesis]]:
        if request.sampling is None and settings.nbest > settings.beam:
            raise NmtError(f"--nbest {settings.nbest} must be between 1 and --beam {settings.beam}")
        cap = self.positions - 1  # the step that forces EOS reads position max_len
        processes = self.worker_processes(request.workers, request.isolated)
        return decode_sources(self.model, sources, settings, self.runtime, cap, request.batch_size,
                              request.progress, request.sampling, first_index,
                              None if processes is None else processes.decode,
                              functools.partial(map_ordered, workers=request.workers))

    def translate(self, lines: Sequence[str], beam: int | None = None, lenpen: float | None = None,
                  nbest: int | None = None, max_tokens: int | None = None, pretokenized: bool = False,
                  progress: bool = False, first_line: int = 1, batch_size: int | None = None,
                  sampling: Sampling | None = None, workers: int = 1, *, settings: DecodeConfig | None = None,
                  request: DecodeRequest | None = None) -> list[list[tuple[str, float]]]:
        """Translate raw text lines (empty ones allowed): for each, its n-best list of ``(text, score)``, best first;
        score is the length-penalised log-probability (0 for an empty line, whose translations are ``""``).

        ``beam``, ``lenpen``, ``nbest``, ``max_tokens`` override the checkpoint's ``decode`` section; the other
        keywords are those of :class:`DecodeRequest` (``pretokenized``: no Moses tokenization nor detokenization);
        ``settings`` and ``request``, when given, replace them all (what the command line passes).
        ``first_line`` is the input line number of ``lines[0]``, for warnings and, with ``sampling``, the key of
        its samples.
        """
        settings = settings or call_settings(self.config.decode, beam, lenpen, nbest, max_tokens)
        request = request or DecodeRequest(pretokenized, batch_size, workers, sampling, progress)
        return self._translate(lines, settings, request, first_line)

    def _translate(self, lines: Sequence[str], settings: DecodeConfig, request: DecodeRequest,
                   first_line: int) -> list[list[tuple[str, float]]]:
        sources = self.encode(lines, request.pretokenized, first_line)
        hyps = self._translate_ids(sources, settings, request, first_line - 1)
        flat = [h for nbest_list in hyps for h in nbest_list]
        texts = iter(self.decode([h.tokens for h in flat], request.pretokenized))
        return [[(next(texts), h.score) for h in nbest_list] for nbest_list in hyps]

    def translate_stream(self, lines: Iterable[str], buffer_size: int, beam: int | None = None,
                         lenpen: float | None = None, nbest: int | None = None, max_tokens: int | None = None,
                         pretokenized: bool = False, progress: bool = False, batch_size: int | None = None,
                         sampling: Sampling | None = None, workers: int = 1, *,
                         settings: DecodeConfig | None = None,
                         request: DecodeRequest | None = None) -> Iterator[list[tuple[str, float]]]:
        """Translate an iterable of lines of any length in bounded memory: read ``buffer_size`` lines, translate
        them (see :meth:`translate`), yield their n-best lists in input order, then read the next buffer.

        At most ``buffer_size`` lines are held at once, and no line past the current buffer is read before the
        buffer's results are yielded (so interactive use with ``buffer_size=1`` answers each line at once).
        """
        if buffer_size < 1:
            raise NmtError(f"--buffer-size {buffer_size} must be at least 1")
        settings = settings or call_settings(self.config.decode, beam, lenpen, nbest, max_tokens)
        request = request or DecodeRequest(pretokenized, batch_size, workers, sampling, progress)
        per_buffer = dataclasses.replace(request, progress=False)  # one bar for the stream, not one per buffer
        source = iter(lines)
        first_line = 1
        buffer = list(itertools.islice(source, buffer_size))  # a bad first line fails before a progress bar shows
        with tqdm(unit="sent", disable=not request.progress, file=sys.stderr) as bar:
            while buffer:
                yield from self._translate(buffer, settings, per_buffer, first_line)
                first_line += len(buffer)
                bar.update(len(buffer))
                buffer = list(itertools.islice(source, buffer_size))
