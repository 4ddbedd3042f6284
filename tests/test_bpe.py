"""SentencePiece training/round trips and the binarized token-id cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nmt.data import binarized
from nmt.data.bpe import SentencePieceTokenizer, train_sentencepiece
from nmt.errors import NmtError
from nmt.vocab import BOS, EOS, PAD, UNK
from tests.data_fixtures import sentences

TEXT = sentences("xx", 150, seed=1) + sentences("yy", 150, seed=2) + ["&apos; s &quot; quoted &quot; , 1986 ."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("spm")
    assert train_sentencepiece(TEXT, out, 80) == 80
    return out


def test_round_trip_and_special_ids(model_dir: Path) -> None:
    tok = SentencePieceTokenizer(model_dir / "spm.model")
    assert tok.vocab_size == 80
    for line in TEXT:
        ids = tok.encode(line)
        assert ids and min(ids) >= 4
        assert tok.decode(ids) == line
    assert tok.decode([BOS, *tok.encode("la lo"), EOS, PAD]) == "la lo"
    assert tok.encode_batch(TEXT) == [tok.encode(t) for t in TEXT]
    assert UNK in tok.encode("la \u4e2d")  # a character never seen in training
    assert [p for p, _ in tok.piece_scores()[:4]] == ["<pad>", "<unk>", "<s>", "</s>"]


def test_bytes_model_equals_file_model(model_dir: Path) -> None:
    from_file = SentencePieceTokenizer(model_dir / "spm.model")
    from_bytes = SentencePieceTokenizer((model_dir / "spm.model").read_bytes())
    assert from_bytes.model_bytes() == from_file.model_bytes() == (model_dir / "spm.model").read_bytes()
    assert from_bytes.encode(TEXT[0]) == from_file.encode(TEXT[0])
    vocab = (model_dir / "spm.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 80 and vocab[0] == "<pad>\t0"


def test_training_is_deterministic(model_dir: Path, tmp_path: Path) -> None:
    train_sentencepiece(TEXT, tmp_path, 80)
    assert (tmp_path / "spm.model").read_bytes() == (model_dir / "spm.model").read_bytes()


def test_subsampling_is_seeded(tmp_path: Path) -> None:
    train_sentencepiece(TEXT, tmp_path / "a", 60, max_sentences=100)
    train_sentencepiece(TEXT, tmp_path / "b", 60, max_sentences=100)
    assert (tmp_path / "a" / "spm.model").read_bytes() == (tmp_path / "b" / "spm.model").read_bytes()


def test_too_large_vocab_falls_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    size = train_sentencepiece(["la lo le .", "ba bo be ."], tmp_path, 8000)
    assert 4 < size < 8000 and SentencePieceTokenizer(tmp_path / "spm.model").vocab_size == size
    assert "too large" in capsys.readouterr().err


def test_too_small_vocab_suggests_bpe_size(tmp_path: Path) -> None:
    with pytest.raises(NmtError, match="--bpe-size 8 is too small"):
        train_sentencepiece(TEXT, tmp_path, 8)
    assert not (tmp_path / "spm.model").exists()


def test_missing_model_is_an_nmt_error(tmp_path: Path) -> None:
    with pytest.raises(NmtError, match="nmt prepare"):
        SentencePieceTokenizer(tmp_path / "spm.model")
    with pytest.raises(NmtError, match="cannot load"):
        SentencePieceTokenizer(b"not a model")


def test_binarized_round_trip(tmp_path: Path) -> None:
    seqs = [[5, 6, 7], [], [8], [9, 10]]
    binarized.write_split(tmp_path, "train", "xx", seqs)
    tokens, offsets = binarized.load_arrays(tmp_path, "train", "xx")
    assert tokens.dtype == np.int32 and offsets.dtype == np.int64 and offsets.tolist() == [0, 3, 3, 4, 6]
    assert [a.tolist() for a in binarized.load_split(tmp_path, "train", "xx")] == seqs
    binarized.write_split(tmp_path, "dev", "xx", [])
    assert binarized.load_split(tmp_path, "dev", "xx") == []
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == [
        "dev.xx.offsets.npy", "dev.xx.tokens.npy", "train.xx.offsets.npy", "train.xx.tokens.npy"]


def test_binarized_errors(tmp_path: Path) -> None:
    with pytest.raises(NmtError, match="nmt prepare"):
        binarized.load_split(tmp_path, "train", "xx")
    binarized.write_split(tmp_path, "train", "xx", [[5, 6]])
    np.save(binarized.split_paths(tmp_path, "train", "xx")[1], np.array([0, 5], dtype=np.int64))
    with pytest.raises(NmtError, match="do not fit together"):
        binarized.load_split(tmp_path, "train", "xx")
