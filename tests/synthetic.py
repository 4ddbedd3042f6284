"""A learnable synthetic translation task and tiny configs for trainer and end-to-end tests.

Source sentences are 3–7 words from a 16-word vocabulary; the target translates every word through a fixed
dictionary (a monotone word-for-word task that a tiny model learns in a few hundred steps).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

SRC_WORDS = ["ka", "lo", "mi", "pe", "su", "ti", "ra", "no", "be", "gu", "fa", "di", "wo", "ze", "hu", "ja"]
TGT_WORDS = ["cat", "dog", "sun", "moon", "tree", "red", "blue", "big", "small", "run", "eat", "sea", "sky",
             "hill", "fish", "bird"]
DICTIONARY = dict(zip(SRC_WORDS, TGT_WORDS, strict=True))


def translate(sentence: str) -> str:
    return " ".join(DICTIONARY[w] for w in sentence.split())


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(SRC_WORDS) for _ in range(rng.randint(3, 7))) for _ in range(n)]


def write_corpus(directory: Path, sizes: dict[str, int] | None = None, src: str = "xx", tgt: str = "yy") -> Path:
    """Write ``{train,dev,test}.{src,tgt}`` files of the synthetic task into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    sizes = sizes or {"train": 2000, "dev": 40, "test": 40}
    for seed, (split, n) in enumerate(sizes.items()):
        lines = sentences(n, seed)
        (directory / f"{split}.{src}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (directory / f"{split}.{tgt}").write_text("\n".join(translate(s) for s in lines) + "\n", encoding="utf-8")
    return directory


def tiny_config(data_dir: Path, save_dir: Path, **train: Any) -> dict[str, Any]:
    """A config tree for a 2+2-layer d_model-32 model on the prepared ``xx-yy`` pair."""
    train_section: dict[str, Any] = {
        "save_dir": str(save_dir), "device": "cpu", "precision": "fp32", "max_tokens": 400, "schedule": "inverse_sqrt",
        "lr": 5e-3, "warmup_steps": 50, "adam_betas": [0.9, 0.98], "max_steps": 200, "eval_every": 100,
        "log_every": 50, "progress": False, "tensorboard": False, "seed": 7,
    }
    train_section.update(train)
    return {
        "system": "qknorm",
        "data": {"pair": "xx-yy", "data_dir": str(data_dir), "bpe_size": 48},
        "model": {"enc_layers": 2, "dec_layers": 2, "d_model": 32, "d_ff": 64, "n_heads": 4, "dropout": 0.1,
                  "word_dropout": 0.0, "max_positions": 128},
        "train": train_section,
        "decode": {"beam": 2, "max_len_b": 10},
    }


def prepare_synthetic(root: Path, sizes: dict[str, int] | None = None) -> Path:
    """Write the synthetic corpus under ``root/corpus`` and prepare it as ``xx-yy``; returns the data dir."""
    from nmt.data.prepare import prepare

    prepare("xx-yy", root / "data", from_dir=write_corpus(root / "corpus", sizes), bpe_size=48, progress=False)
    return root / "data"
