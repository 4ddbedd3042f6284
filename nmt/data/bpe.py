"""The joint SentencePiece BPE model: training (deterministic) and :class:`SentencePieceTokenizer`.

Training uses the ids of :mod:`nmt.vocab` (``pad_id=0 unk_id=1 bos_id=2 eos_id=3``), ``model_type=bpe``,
``character_coverage=1.0`` and the ``identity`` normalization rule: the text is already cleaned by
:mod:`nmt.data.text`, and skipping NFKC makes ``decode(encode(x)) == x`` exact for every training sentence, which
tokenized BLEU against the original references relies on.
"""

from __future__ import annotations

import io
import os
import random
import re
import sys
from pathlib import Path

import sentencepiece as spm

from nmt.atomic import atomic_write_bytes
from nmt.data.bpe_dropout import BpeDropout
from nmt.errors import NmtError
from nmt.vocab import BOS, EOS, PAD, UNK

MAX_SENTENCES = 1_000_000  # sentences (both sides pooled) sampled for training; TED's largest pairs have ~430k
SEED = 1
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


class SentencePieceTokenizer:
    """Encode text to piece ids and back with a trained SentencePiece model.

    Args:
        model: path to ``spm.model``, or the model's serialized bytes (as stored in checkpoints).
    """

    def __init__(self, model: str | Path | bytes) -> None:
        self._sp = spm.SentencePieceProcessor()
        try:
            if isinstance(model, bytes):
                self._sp.LoadFromSerializedProto(model)
            else:
                if not Path(model).is_file():
                    raise NmtError(f"SentencePiece model not found: {model} (run `nmt prepare` first)")
                self._sp.Load(str(model))
        except (RuntimeError, OSError) as exc:
            raise NmtError(f"cannot load SentencePiece model {'<bytes>' if isinstance(model, bytes) else model}: "
                           f"{exc}") from None
        ids = (self._sp.pad_id(), self._sp.unk_id(), self._sp.bos_id(), self._sp.eos_id())
        if ids != (PAD, UNK, BOS, EOS):
            raise NmtError(f"SentencePiece model has special ids {ids}, expected {(PAD, UNK, BOS, EOS)}")
        self._dropout: BpeDropout | None = None  # built on the first sampled encoding

    @property
    def vocab_size(self) -> int:
        """Number of pieces, specials included (the model's embedding size)."""
        return int(self._sp.GetPieceSize())

    def model_bytes(self) -> bytes:
        """The serialized model, loadable with ``SentencePieceTokenizer(bytes)``."""
        return bytes(self._sp.serialized_model_proto())

    def piece_scores(self) -> list[tuple[str, float]]:
        """Every piece with its score, in id order (the content of ``spm.vocab``)."""
        return [(self._sp.IdToPiece(i), float(self._sp.GetScore(i))) for i in range(self.vocab_size)]

    def encode(self, text: str) -> list[int]:
        """Piece ids of one sentence, without BOS/EOS."""
        return list(self._sp.Encode(text, out_type=int))

    def encode_batch(self, texts: list[str], threads: int = 2) -> list[list[int]]:
        """Piece ids of many sentences (same result as :meth:`encode` on each)."""
        if not texts:
            return []
        return [list(ids) for ids in self._sp.Encode(texts, out_type=int, num_threads=threads)]

    def encode_sampled(self, texts: list[str], alpha: float, seed: int) -> list[list[int]]:
        """Piece ids of many sentences, each segmentation drawn at random: BPE-dropout (each merge skipped with
        probability ``alpha``; Provilkov et al. 2020, arXiv 1910.13267), SentencePiece's subword sampling for a BPE
        model, drawn by :class:`~nmt.data.bpe_dropout.BpeDropout` from a generator seeded with ``seed``, so the
        draws are a pure function of ``(texts, alpha, seed)`` in every process; ``alpha`` 0 gives :meth:`encode`'s
        pieces."""
        if self._dropout is None:
            self._dropout = BpeDropout(self._sp)
        return self._dropout.encode(texts, alpha, seed)

    def decode(self, ids: list[int]) -> str:
        """Text of a piece-id sequence; PAD, BOS and EOS are skipped, UNK becomes `` ⁇ ``."""
        return str(self._sp.Decode([int(i) for i in ids]))


def _train_once(sentences: list[str], vocab_size: int, threads: int) -> bytes:
    model = io.BytesIO()  # no model_prefix: it would be recorded in the model and make it path-dependent
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size, model_type="bpe",
        pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS, character_coverage=1.0,
        normalization_rule_name="identity",
        input_sentence_size=0, shuffle_input_sentence=False,  # bounded and shuffled by train_sentencepiece
        num_threads=threads, minloglevel=2,
    )
    return model.getvalue()


def train_sentencepiece(sentences: list[str], out_dir: str | Path, vocab_size: int, *,
                        max_sentences: int = MAX_SENTENCES, seed: int = SEED) -> int:
    """Train the joint BPE model and write ``out_dir/spm.model`` and ``out_dir/spm.vocab`` atomically.

    More than ``max_sentences`` inputs are subsampled with a seeded ``random.Random`` (rather than SentencePiece's
    own shuffle), so the model is a pure function of the inputs and options (the same bytes on every run). If
    ``vocab_size`` is more than the corpus can give, training is retried once at the largest size SentencePiece
    reports as possible.

    Returns:
        The vocabulary size of the written model.

    Raises:
        NmtError: ``vocab_size`` is smaller than the corpus's characters plus the 4 special pieces, or no input.
    """
    out_dir = Path(out_dir)
    if not sentences:
        raise NmtError("no training sentences for SentencePiece")
    if len(sentences) > max_sentences:
        sentences = random.Random(seed).sample(sentences, max_sentences)
    threads = max(1, min(2, os.cpu_count() or 1))
    size = vocab_size
    for attempt in range(2):
        try:
            model = _train_once(sentences, size, threads)
            break
        except RuntimeError as exc:
            high, low = _TOO_HIGH.search(str(exc)), _TOO_LOW.search(str(exc))
            if low:
                raise NmtError(f"--bpe-size {vocab_size} is too small: this corpus needs at least {low.group(2)} "
                               "pieces (its characters plus 4 specials); use a larger --bpe-size") from None
            if not high or attempt:
                raise NmtError(f"SentencePiece training with vocab size {size} failed ({exc}); "
                               "try a smaller --bpe-size") from None
            size = int(high.group(2))
            print(f"warning: --bpe-size {vocab_size} is too large for this corpus; using {size}", file=sys.stderr)
    tokenizer = SentencePieceTokenizer(model)
    vocab = "".join(f"{piece}\t{score:g}\n" for piece, score in tokenizer.piece_scores())
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out_dir / "spm.vocab", vocab.encode("utf-8"))
    atomic_write_bytes(out_dir / "spm.model", model)
    return tokenizer.vocab_size
