"""``nmt score`` / :meth:`Translator.score` on a model trained on the synthetic task: the dev set's mean is the
trainer's dev nll, true pairs outscore shuffled ones, batching does not change a score, and the CLI's formats and
errors."""

from __future__ import annotations

import io
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from nmt import cli
from nmt.config import config_from_dict
from nmt.data.text import read_lines
from nmt.inference.translator import Translator
from nmt.training.loop import train
from tests.synthetic import prepare_synthetic, tiny_config


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("score")
    data = prepare_synthetic(root, {"train": 1000, "dev": 30, "test": 20})
    tree = tiny_config(data, root / "run", max_steps=150, eval_every=150)
    train(config_from_dict(tree))
    metrics = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    raw = data / "xx-yy" / "raw"
    return {"checkpoint": root / "run" / "checkpoint_last.pt", "dev_nll": metrics[-1]["dev_nll"],
            "src": raw / "dev.xx", "tgt": raw / "dev.yy", "root": root}


@pytest.fixture(scope="module")
def translator(run: dict[str, Any]) -> Translator:
    return Translator.from_checkpoint(run["checkpoint"], device="cpu")


def test_dev_mean_is_the_trainers_dev_nll(run: dict[str, Any], translator: Translator) -> None:
    scores = translator.score(read_lines(run["src"]), read_lines(run["tgt"]), pretokenized=True)
    assert len(scores) == 30 and all(s.score <= 0 and s.tokens >= 2 for s in scores)
    mean_nll = -sum(s.score for s in scores) / sum(s.tokens for s in scores)
    assert mean_nll == pytest.approx(run["dev_nll"], rel=1e-5)
    assert scores[0].mean == pytest.approx(scores[0].score / scores[0].tokens)


def test_true_pairs_score_above_shuffled_ones(run: dict[str, Any], translator: Translator) -> None:
    sources, targets = read_lines(run["src"]), read_lines(run["tgt"])
    shuffled = targets[1:] + targets[:1]
    true = translator.score(sources, targets, pretokenized=True)
    wrong = translator.score(sources, shuffled, pretokenized=True)
    assert sum(t.mean > w.mean for t, w in zip(true, wrong, strict=True)) >= 28
    assert sum(t.mean for t in true) > sum(w.mean for w in wrong) + 15  # by ~0.9 nats a token


def test_batching_does_not_change_a_score(run: dict[str, Any], translator: Translator) -> None:
    sources, targets = read_lines(run["src"]), read_lines(run["tgt"])
    together = translator.score(sources, targets, pretokenized=True)
    alone = [translator.score([s], [t], pretokenized=True)[0] for s, t in zip(sources[:6], targets[:6], strict=True)]
    assert [a.score for a in alone] == pytest.approx([t.score for t in together[:6]], abs=1e-4)
    small = translator.score(sources, targets, pretokenized=True, batch_size=4)
    assert [s.score for s in small] == pytest.approx([t.score for t in together], abs=1e-4)


def cli_run(argv: list[str], monkeypatch: pytest.MonkeyPatch, stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    return cli.main(argv), out.getvalue(), err.getvalue()


def test_cli_text_json_stdin_and_file(run: dict[str, Any], translator: Translator, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    expected = translator.score(read_lines(run["src"]), read_lines(run["tgt"]), pretokenized=True)
    args = ["score", "--checkpoint", str(run["checkpoint"]), "--src", str(run["src"]), "--pretokenized",
            "--device", "cpu"]
    code, out, _ = cli_run([*args, "--tgt", str(run["tgt"]), "--buffer-size", "7", "--batch-size", "3"], monkeypatch)
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == 30 and [int(r[2]) for r in rows] == [s.tokens for s in expected]
    assert [float(r[0]) for r in rows] == pytest.approx([s.score for s in expected], abs=2e-4)
    code, out, _ = cli_run([*args, "--tgt", "-", "--json"], monkeypatch, run["tgt"].read_bytes())
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["line"] for r in records] == list(range(1, 31))
    assert records[4]["score"] == pytest.approx(expected[4].score, abs=1e-4)
    assert records[4]["mean"] == pytest.approx(expected[4].mean, abs=1e-4) and math.isfinite(records[4]["mean"])
    target = tmp_path / "scores.txt"
    code, _, err = cli_run([*args, "--tgt", str(run["tgt"]), "--output", str(target)], monkeypatch)
    assert code == 0 and len(target.read_text(encoding="utf-8").splitlines()) == 30 and "scored 30 pairs" in err


@pytest.mark.parametrize("case", ["fewer_targets", "missing_file", "both_stdin", "bad_buffer"])
def test_cli_errors_are_one_line(case: str, run: dict[str, Any], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    short = tmp_path / "short.yy"
    short.write_text("".join(line + "\n" for line in read_lines(run["tgt"])[:29]), encoding="utf-8")
    src, tgt, extra = str(run["src"]), str(run["tgt"]), []
    if case == "fewer_targets":
        tgt = str(short)
    elif case == "missing_file":
        src = str(tmp_path / "none.xx")
    elif case == "both_stdin":
        src = tgt = "-"
    else:
        extra = ["--buffer-size", "0"]
    code, _, err = cli_run(["score", "--checkpoint", str(run["checkpoint"]), "--src", src, "--tgt", tgt,
                            "--pretokenized", "--device", "cpu", *extra], monkeypatch)
    message = {"fewer_targets": f"{short} has 29 lines but {run['src']} has more", "missing_file": "file not found",
               "both_stdin": "only one input can come from stdin", "bad_buffer": "--buffer-size 0"}[case]
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_random_target_is_less_probable_than_its_translation(run: dict[str, Any], translator: Translator) -> None:
    rng = random.Random(3)
    words = " ".join(read_lines(run["tgt"])).split()
    sources, targets = read_lines(run["src"])[:10], read_lines(run["tgt"])[:10]
    noise = [" ".join(rng.choice(words) for _ in t.split()) for t in targets]
    good = translator.score(sources, targets, pretokenized=True)
    bad = translator.score(sources, noise, pretokenized=True)
    assert all(g.score > b.score for g, b, t, n in zip(good, bad, targets, noise, strict=True) if t != n)
