"""Sampling (nmt.search.sampling, ``nmt translate --sampling``): top-k 1 is greedy, seeded samples repeat whatever
the batching, the draws follow the restricted distribution, and the CLI's options."""

from __future__ import annotations

import dataclasses
import io
import sys
from pathlib import Path

import pytest
import torch

from nmt import cli
from nmt.inference.translator import Translator
from nmt.search.sampling import Sampler, Sampling, uniforms
from tests.test_translate import synthetic_sentences, tiny_checkpoint


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    return Translator.from_checkpoint(tiny_checkpoint(tmp_path_factory.mktemp("sampling")), device="cpu")


def sources(translator: Translator, n: int = 12) -> list[list[int]]:
    return translator.encode(synthetic_sentences(n, seed=8), pretokenized=True)


@pytest.mark.parametrize("search", ["official", "fairseq"])
def test_top_k_one_is_exactly_greedy(translator: Translator, search: str) -> None:
    translator = Translator(translator.model, dataclasses.replace(
        translator.config, decode=dataclasses.replace(translator.config.decode, search=search)), translator.tokenizer,
        translator.device, "fp32")
    srcs = sources(translator)
    greedy = translator.translate_ids(srcs, beam=1)
    for seed in (0, 5):
        drawn = translator.translate_ids(srcs, sampling=Sampling(topk=1, seed=seed))
        assert [h[0].tokens for h in drawn] == [h[0].tokens for h in greedy]
        assert [h[0].score for h in drawn] == pytest.approx([h[0].score for h in greedy], abs=1e-5)
        for d, g in zip(drawn, greedy, strict=True):
            assert d[0].positional_scores == pytest.approx(g[0].positional_scores, abs=1e-5)
    nucleus = translator.translate_ids(srcs, sampling=Sampling(topp=1e-6, seed=1))  # only the most probable token
    assert [h[0].tokens for h in nucleus] == [h[0].tokens for h in greedy]
    cold = translator.translate_ids(srcs, sampling=Sampling(temperature=1e-3, seed=2))
    assert [h[0].tokens for h in cold] == [h[0].tokens for h in greedy]


def test_seeded_samples_repeat_whatever_the_batching(translator: Translator) -> None:
    srcs = sources(translator)
    settings = Sampling(seed=11)
    together = translator.translate_ids(srcs, nbest=3, sampling=settings)
    assert together == translator.translate_ids(srcs, nbest=3, sampling=settings)
    small = translator.translate_ids(srcs, nbest=3, sampling=settings, batch_size=2)
    alone = [translator.translate_ids([s], nbest=3, sampling=settings, first_index=i)[0] for i, s in enumerate(srcs)]
    tokens = [[h.tokens for h in n] for n in together]
    assert [[h.tokens for h in n] for n in small] == tokens
    assert [[h.tokens for h in n] for n in alone] == tokens
    other = translator.translate_ids(srcs, nbest=3, sampling=Sampling(seed=12))
    assert [[h.tokens for h in n] for n in other] != tokens


def test_nbest_samples_are_several_sorted_and_diverse(translator: Translator) -> None:
    srcs = sources(translator)
    drawn = translator.translate_ids(srcs, nbest=5, sampling=Sampling(seed=3))
    assert all(len(n) == 5 for n in drawn)
    assert all([h.score for h in n] == sorted((h.score for h in n), reverse=True) for n in drawn)
    distinct = sum(len({tuple(h.tokens) for h in n}) for n in drawn)
    assert distinct > 2 * len(srcs)  # a random model's samples differ
    greedy = [h[0].tokens for h in translator.translate_ids(srcs, beam=1)]
    assert sum(n[0].tokens != g for n, g in zip(drawn, greedy, strict=True)) > 0


def test_draws_follow_the_restricted_distribution() -> None:
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1], dtype=torch.float64)
    rows = 20000
    scores = probs.log().expand(rows, 4).clone()
    index = torch.arange(rows)
    for settings, expected in ((Sampling(seed=1), probs),
                               (Sampling(topk=2, seed=2), torch.tensor([2 / 3, 1 / 3, 0.0, 0.0])),
                               (Sampling(topp=0.7, seed=3), torch.tensor([2 / 3, 1 / 3, 0.0, 0.0])),
                               (Sampling(temperature=2.0, seed=4), probs.sqrt() / probs.sqrt().sum())):
        drawn_scores, tokens = Sampler(settings, index)(scores, index, 0)
        frequency = torch.bincount(tokens, minlength=4).double() / rows
        assert frequency.tolist() == pytest.approx(expected.tolist(), abs=0.015)
        assert drawn_scores.tolist() == pytest.approx(probs.log()[tokens].tolist())  # the model's, untempered
    forbidden = scores.clone()
    forbidden[:, 0] = -torch.inf
    assert not (Sampler(Sampling(seed=5), index)(forbidden, index, 0)[1] == 0).any()


def test_uniforms_are_a_pure_function_of_seed_key_and_step() -> None:
    keys = torch.arange(50000)
    u = uniforms(7, keys, 3)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert float(u.mean()) == pytest.approx(0.5, abs=0.01) and float(u.std()) == pytest.approx(12 ** -0.5, abs=0.01)
    assert torch.equal(uniforms(7, keys[[5, 2]], 3), u[[5, 2]])
    assert not torch.equal(uniforms(8, keys, 3), u) and not torch.equal(uniforms(7, keys, 4), u)
    assert abs(float(torch.corrcoef(torch.stack([u, uniforms(7, keys, 4)]))[0, 1])) < 0.02


def test_invalid_settings() -> None:
    for bad in (dict(topk=-1), dict(topp=0.0), dict(topp=1.5), dict(temperature=0.0)):
        with pytest.raises(ValueError):
            Sampling(**bad)  # type: ignore[arg-type]


def test_cli_sampling(translator: Translator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = tmp_path / "tiny.pt"
    checkpoint.write_bytes(next(tmp_path.parent.glob("sampling*/tiny.pt")).read_bytes())
    source = tmp_path / "in.txt"
    source.write_text("\n".join(synthetic_sentences(4, seed=2)) + "\n", encoding="utf-8")

    def run(*extra: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8"))
        code = cli.main(["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--pretokenized",
                         "--device", "cpu", "--quiet", *extra])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, _ = run("--sampling", "--seed", "4", "--nbest", "3", "--sampling-topk", "5", "--temperature", "0.9")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 12 and [line.split("\t")[0] for line in lines[:3]] == ["0", "0", "0"]
    assert run("--sampling", "--seed", "4", "--nbest", "3", "--sampling-topk", "5", "--temperature", "0.9")[1] == out
    code, _, err = run("--sampling-topk", "3")
    assert code == 2 and "--sampling-topk needs --sampling" in err
    code, _, err = run("--sampling", "--sampling-topp", "2")
    assert code == 2 and "--sampling-topp 2.0 must be in (0, 1]" in err
