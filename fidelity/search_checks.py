"""Beam search against the official decoder, on a briefly trained model converted from the official one.

The official QKNorm ``Transformer`` (gl-en paper options: language embedding, target logit mask, QKNorm; small
width) is trained for a few hundred updates with its own loss on a synthetic task (reverse the source and map each
word to another), then converted into ours (:func:`fidelity.convert.convert_model`). Held-out sources are decoded
with beam 4 and alpha 0.6 by the official ``model.beam_decode`` and by our :func:`nmt.search.beam_search` under the
``official`` rules (cached K/V, batched). The official decoder is called on batches of equal source length: its
length limit depends on the batch (a sentence shorter than the batch's longest may produce one more token), ours
is that of a sentence decoded alone. Compared:

- ``1-best``: sentences whose best hypothesis differs (tokens);
- ``n-best``: sentences whose 4 returned hypotheses differ (tokens, in order);
- ``scores``: the largest relative difference of the 1-best scores;
- ``fairseq rules``: sentences whose 1-best differs under ``decode.search=fairseq`` (informational: the
  tolerance is the number of sentences), with the BLEU of both against the references in the note;
- ``official, mixed-length batches``: sentences whose official 1-best changes when the official decoder gets its
  own length-sorted 4096-token batches (informational: the batch-dependent limit ours does not reproduce).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fidelity import Row
from fidelity.convert import convert_model, to_our_ids
from fidelity.official import SRC_LANG_IDX, TGT_LANG_IDX, Official, build_official, load, official_args
from nmt import kernels
from nmt.config import Config, load_config
from nmt.metrics import tokenized_bleu
from nmt.model.spec import ModelSpec
from nmt.model.transformer import Transformer, build_model
from nmt.search import Hypothesis, beam_search

REPO_ROOT = Path(__file__).resolve().parents[1]
OFFICIAL_PAD, OFFICIAL_BOS, OFFICIAL_EOS, OFFICIAL_UNK = 0, 1, 2, 3
FIRST_WORD = 4


@dataclass(frozen=True)
class Setting:
    """Size of the comparison: a tiny model, a synthetic task and how long to train on it."""

    sentences: int = 200
    d_model: int = 48
    d_ff: int = 96
    layers: int = 2
    heads: int = 4
    words: int = 40  # word types besides the four specials
    min_len: int = 3
    max_len: int = 12
    steps: int = 300
    batch: int = 48
    lr: float = 3e-3
    reverse: bool = True  # target order: reversed source (harder), or the source's own order
    eos_bias: float = 0.0  # added to the official output bias of EOS after training (EOS-prone hypotheses)
    seed: int = 0


def our_config(setting: Setting) -> Config:
    """The gl-en paper config (its options: language embedding, logit mask, QKNorm) at a tiny size."""
    s = setting
    overrides = [f"model.d_model={s.d_model}", f"model.d_ff={s.d_ff}", f"model.enc_layers={s.layers}",
                 f"model.dec_layers={s.layers}", f"model.n_heads={s.heads}", "model.qknorm_length=79.0",
                 "model.dropout=0.1", "model.attn_dropout=0.1", "model.act_dropout=0.1", "model.word_dropout=0.0",
                 "model.max_positions=128"]
    return load_config(REPO_ROOT / "configs" / "gl-en.yaml", overrides)


def synthetic_pairs(setting: Setting, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """(source, target) official ids without EOS: the target is the source (reversed if ``setting.reverse``), each
    word mapped by a fixed permutation that leaves the last 4 word types unused on the target side (so the logit
    mask masks something)."""
    words = list(range(FIRST_WORD, FIRST_WORD + setting.words))
    mapping = dict(zip(words, random.Random(12345).sample(words[:-4], len(words) - 4) + words[:4], strict=True))
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        src = [rng.choice(words[:-4]) for _ in range(rng.randint(setting.min_len, setting.max_len))]
        pairs.append((src, [mapping[w] for w in (reversed(src) if setting.reverse else src)]))
    return pairs


def _pad(rows: list[list[int]]) -> Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), OFFICIAL_PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def target_mask(pairs: list[tuple[list[int], list[int]]], vocab: int) -> Tensor:
    """The official logit mask (preprocessing.py): the training targets' types, UNK and EOS; uint8, official ids."""
    mask = torch.zeros(vocab, dtype=torch.uint8)
    for _, tgt in pairs:
        mask[tgt] = 1
    mask[[OFFICIAL_UNK, OFFICIAL_EOS]] = 1
    return mask


def train_official(model: torch.nn.Module, pairs: list[tuple[list[int], list[int]]], mask: Tensor,
                   setting: Setting) -> float:
    """A few hundred Adam updates on the official model's own loss (controller.py: Adam, clip 1.0, step)."""
    gen = random.Random(setting.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=setting.lr)
    model.train()
    loss = float("nan")
    for _ in range(setting.steps):
        batch = gen.sample(pairs, setting.batch)
        src = _pad([s + [OFFICIAL_EOS] for s, _ in batch])
        tgt = _pad([[OFFICIAL_BOS] + t for _, t in batch])
        targets = _pad([t + [OFFICIAL_EOS] for _, t in batch])
        optimizer.zero_grad()
        ret = model(src, tgt, targets, SRC_LANG_IDX, TGT_LANG_IDX, mask)
        ret["opt_loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss = float(ret["opt_loss"].detach())
    model.eval()
    return loss


def official_batches(sources: list[list[int]], equal_length: bool, budget: int = 4096) -> list[list[int]]:
    """Sentence indices per batch: equal source lengths, or the official ``get_translate_batches`` (sorted by
    length, cut when ``n * 2 * longest`` would exceed ``budget``)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    batches: list[list[int]] = []
    for i in order:
        n = len(sources[i]) + 1
        last = batches[-1] if batches else []
        fits = bool(last) and (n == len(sources[last[0]]) + 1 if equal_length else (len(last) + 1) * 2 * n <= budget)
        if fits:
            last.append(i)
        else:
            batches.append([i])
    return batches


@torch.no_grad()
def official_decode(model: torch.nn.Module, sources: list[list[int]], mask: Tensor, equal_length: bool = True
                    ) -> list[list[tuple[list[int], float]]]:
    """The official ``beam_decode`` (on batches of equal source length unless told otherwise); per sentence its
    beam entries sorted as ``controller.get_trans`` does (tokens up to EOS, our ids), each with its score."""
    out: list[list[tuple[list[int], float]]] = [[] for _ in sources]
    for indices in official_batches(sources, equal_length):
        src = _pad([sources[i] + [OFFICIAL_EOS] for i in indices])
        results = model.beam_decode(src, SRC_LANG_IDX, TGT_LANG_IDX, mask)  # type: ignore[operator]
        for i, result in zip(indices, results, strict=True):
            scores = result["scores"].reshape(-1).numpy()
            symbols = result["symbols"].tolist()
            for row in np.argsort(scores)[::-1]:
                ids = symbols[row]
                ids = ids[: ids.index(OFFICIAL_EOS)] if OFFICIAL_EOS in ids else ids
                out[i].append((to_our_ids(torch.tensor(ids, dtype=torch.long)).tolist(), float(scores[row])))
    return out


@torch.no_grad()
def our_decode(model: Transformer, sources: list[list[int]], config: Config, search: str) -> list[list[Hypothesis]]:
    """Our beam search, all sentences in one padded batch (our ids)."""
    src = to_our_ids(_pad([s + [OFFICIAL_EOS] for s in sources]))
    d = config.decode
    return beam_search(model, src, beam=d.beam, lenpen=d.lenpen, max_len_a=d.max_len_a, max_len_b=d.max_len_b,
                       nbest=d.beam, max_len_cap=model.max_positions - 1, search=search)


def _text(ids: list[int]) -> str:
    return " ".join(map(str, ids))


def build_pair(setting: Setting, official: Official) -> tuple[torch.nn.Module, Transformer, Config, Tensor, float]:
    """The trained official model, its conversion into ours, our config, the official mask and the last loss."""
    config = our_config(setting)
    vocab = FIRST_WORD + setting.words
    train = synthetic_pairs(setting, 2000, seed=setting.seed)
    mask = target_mask(train, vocab)
    args = official_args(official, config, vocab, configuration="gl2en")
    model = build_official(official, args, seed=setting.seed)
    loss = train_official(model, train, mask, setting)
    with torch.no_grad():
        model.get_parameter("out_bias")[OFFICIAL_EOS] += setting.eos_bias
    ours = kernels.accelerate(build_model(config.model, ModelSpec(vocab, 79.0)))  # as restore_model builds it
    convert_model(model, ours, logit_mask=mask)
    return model, ours.eval(), config, mask, loss


def compare(setting: Setting, official: Official, label: str) -> list[Row]:
    """Train (``setting.steps`` updates), convert, decode ``setting.sentences`` held-out sources both ways."""
    torch.manual_seed(setting.seed)
    model, ours, config, mask, loss = build_pair(setting, official)
    held_out = synthetic_pairs(setting, setting.sentences, seed=setting.seed + 1)
    sources = [s for s, _ in held_out]
    references = [_text(to_our_ids(torch.tensor(t)).tolist()) for _, t in held_out]
    theirs = official_decode(model, sources, mask)
    mine = our_decode(ours, sources, config, "official")
    fairseq = our_decode(ours, sources, config, "fairseq")
    n = len(sources)
    best_differ = [i for i in range(n) if mine[i][0].tokens != theirs[i][0][0]]
    nbest_differ = sum([h.tokens for h in mine[i]] != [t for t, _ in theirs[i]] for i in range(n))
    score_err = max(abs(mine[i][0].score - theirs[i][0][1]) / max(abs(theirs[i][0][1]), 1e-9) for i in range(n))
    limit = config.decode.max_len_b - 1  # official 1-best of src_len + 50 tokens: cut off without EOS
    cut = sum(len(theirs[i][0][0]) >= len(sources[i]) + 1 + limit for i in range(n))
    bleu = {name: tokenized_bleu([_text(h[0].tokens) for h in hyps], references)
            for name, hyps in (("ours", mine), ("fairseq", fairseq))}
    official_bleu = tokenized_bleu([_text(t[0][0]) for t in theirs], references)
    fairseq_differ = sum(fairseq[i][0].tokens != theirs[i][0][0] for i in range(n))
    mixed = official_decode(model, sources, mask, equal_length=False)
    mixed_differ = sum(mixed[i][0][0] != theirs[i][0][0] for i in range(n))
    mixed_bleu = tokenized_bleu([_text(t[0][0]) for t in mixed], references)
    case = f"{label}: {n} sentences, beam {config.decode.beam}, alpha {config.decode.lenpen}"
    note = (f"{setting.steps} updates (loss {loss:.2f}), {cut} 1-best cut at the length limit; BLEU official "
            f"{official_bleu:.2f}, ours {bleu['ours']:.2f}")
    return [
        Row("beam search", case, "1-best", float(len(best_differ)), 0.0,
            note + (f"; differ: {best_differ[:8]}" if best_differ else "")),
        Row("beam search", case, "n-best", float(nbest_differ), 0.0, "all beam entries, in score order"),
        Row("beam search", case, "1-best scores", score_err, 1e-5, "relative"),
        Row("beam search", case, "fairseq rules: 1-best", float(fairseq_differ), float(n),
            f"informational; BLEU fairseq rules {bleu['fairseq']:.2f} vs official {official_bleu:.2f}"),
        Row("beam search", case, "official, mixed-length batches: 1-best", float(mixed_differ), float(n),
            f"informational: the official limit depends on the batch; BLEU {mixed_bleu:.2f} vs {official_bleu:.2f}"),
    ]


EOS_PRONE = Setting(steps=0, sentences=20, eos_bias=3.0)  # untrained, EOS favoured: step 0 and early endings
QUICK = Setting(steps=100, batch=32, lr=5e-3, words=24, max_len=8, reverse=False)


def run(quick: bool = False) -> list[Row]:
    """A briefly trained model (reversal task, 300 updates; ``quick``: :data:`QUICK`, a smaller monotone task, 100
    updates), 200 sentences; an untrained one (every hypothesis runs to the length limit; 50 sentences, ``quick``:
    20); and an untrained one that favours EOS (:data:`EOS_PRONE`)."""
    official = load("qknorm")
    trained = QUICK if quick else Setting()
    untrained = Setting(steps=0, sentences=20 if quick else 50)
    return (compare(trained, official, "trained") + compare(untrained, official, "untrained")
            + compare(EOS_PRONE, official, "EOS-prone"))
