"""Transformer building blocks: norms, attention scoring, embeddings, feed-forward and residual layers.

Each pluggable choice is a small dict next to its classes (``NORMS``, ``ATTENTIONS``) whose keys equal the
matching ``Literal`` in :mod:`nmt.config`; :func:`nmt.model.transformer.build_model` is the only place that picks from
them.
"""

from nmt.modules.attention import ATTENTIONS, MultiHeadAttention, QKNorm, QKRMSNorm, ScaledDot
from nmt.modules.embeddings import TiedEmbedding, sinusoidal_positions, word_dropout
from nmt.modules.feedforward import FeedForward
from nmt.modules.layers import DecoderLayer, EncoderLayer, Residual
from nmt.modules.norms import NORMS, LayerNorm, RMSNorm, ScaleNorm

__all__ = [
    "ATTENTIONS",
    "NORMS",
    "DecoderLayer",
    "EncoderLayer",
    "FeedForward",
    "LayerNorm",
    "MultiHeadAttention",
    "QKNorm",
    "QKRMSNorm",
    "RMSNorm",
    "Residual",
    "ScaleNorm",
    "ScaledDot",
    "TiedEmbedding",
    "sinusoidal_positions",
    "word_dropout",
]
