"""nmt: neural machine translation with pluggable normalization; the reference implementation of QKNorm.

Public API for scripting experiments::

    import nmt
    cfg = nmt.load_config("gl-en", overrides=["model.d_model=256"])  # a packaged config by name, or a YAML path
    spec = nmt.ModelSpec.resolve(cfg.model, vocab_size=8000, data_length=79)  # QKNorm L: config key, else data
    model = nmt.build_model(cfg.model, spec)
    translator = nmt.Translator.from_checkpoint("runs/gl-en/checkpoint_best.pt")
    translator.translate(["Ola mundo ."], pretokenized=True)
"""

from __future__ import annotations

from typing import Any

from nmt.config import Config, config_from_dict, load_config

__all__ = ["Config", "DecodeRequest", "ModelSpec", "Translator", "build_model", "config_from_dict", "load_config",
           "train"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # torch-heavy pieces load lazily so `nmt --help` and config checks stay fast
    if name == "build_model":
        from nmt.model.transformer import build_model

        return build_model
    if name == "ModelSpec":
        from nmt.model.spec import ModelSpec

        return ModelSpec
    if name == "DecodeRequest":
        from nmt.inference.request import DecodeRequest

        return DecodeRequest
    if name == "Translator":
        from nmt.inference.translator import Translator

        return Translator
    if name == "train":
        from nmt.training.loop import train

        return train
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
