"""The reproduction report on fake run directories with known hypotheses: numbers, published/expected values,
differences, p-values, training summaries and PNG plots."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nmt.evaluate import tokenized_bleu
from nmt.experiments.published import BASELINE, PUBLISHED, QKNORM_AVERAGE_GAIN, reference_score
from nmt.experiments.report import build_results, collect_run, gain_summary, read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WORDS = "the a cat dog sat ran on under mat tree big small red blue".split()
GAINS = ["encoder.0.self_attn", "encoder.1.self_attn", "decoder.0.self_attn", "decoder.0.cross_attn"]


def references(n: int = 60) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) for _ in range(n)]


def corrupt(lines: list[str], every: int) -> list[str]:
    """Replace the last word of every ``every``-th line (a worse system the more often it happens)."""
    return [" ".join(line.split()[:-1] + ["xyz"]) if i % every == 0 else line for i, line in enumerate(lines)]


# the final progress of a finished run (checkpoint_last.pt's, through training_progress)
PROGRESS = {"step": 300, "train_seconds": 3725.0, "best_bleu": 15.0, "best_step": 300, "epoch": 9}


def fake_run(save_dir: Path, pair: str, system: str, hyps: list[str], refs: list[str], qknorm: bool) -> float:
    """A run directory as training and testing leave it; returns its tokenized test BLEU."""
    save_dir.mkdir(parents=True)
    with open(save_dir / "metrics.jsonl", "w", encoding="utf-8") as handle:
        for i, step in enumerate([100, 200, 300, 300]):  # step 300 twice: a resumed run re-evaluated it
            gains = {name: 12.0 + i + j for j, name in enumerate(GAINS)} if qknorm else {}
            handle.write(json.dumps({"step": step, "bleu": 5.0 * i, "dev_loss": 3.0 - i, "lr": 1e-3,
                                     "gains": gains}) + "\n")
    (save_dir / "train.log").write_text(  # started, then resumed on another machine
        "2026-12-01 02:01:30 training ...\n2026-12-01 02:01:30 machine: CPU A (avx2), 2 threads\n"
        "2026-12-01 03:01:30 machine: CPU B (avx512f), 4 threads\n2026-12-01 03:01:31 machine: CPU B (avx512f), "
        "4 threads\n", encoding="utf-8")
    bleu = tokenized_bleu(hyps, refs)
    (save_dir / "test.hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (save_dir / "test_scores.json").write_text(json.dumps({
        "pair": pair, "system": system, "scale": "cpu", "tokenized_bleu": bleu, "sacrebleu": bleu - 1.0,
        "sacrebleu_signature": "nrefs:1|case:mixed", "test_sentences": len(hyps)}), encoding="utf-8")
    return bleu


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("report")
    refs = references()
    bleu, records = {}, []
    for pair in ("gl-en", "en-vi"):
        for system, every in ((BASELINE, 2), ("qknorm", 7), ("prenorm_layernorm", 0)):
            save_dir = root / "runs" / f"{pair}-{system}"
            if every:
                bleu[(pair, system)] = fake_run(save_dir, pair, system, corrupt(refs, every), refs,
                                                system == "qknorm")
            records.append(collect_run(pair, system, save_dir,
                                       progress_reader=lambda d: PROGRESS if d.name.startswith("gl-en") else None))
    results = build_results(records, {"gl-en": refs, "en-vi": refs}, "test", "cpu", n_samples=200)
    from nmt.experiments.report_markdown import write_report

    files = write_report(results, root / "results" / "test")
    return {"root": root, "results": results, "files": files, "bleu": bleu}


def run_of(results: dict[str, Any], pair: str, system: str) -> dict[str, Any]:
    (run,) = [r for r in results["runs"] if r["pair"] == pair and r["system"] == system]
    return run


def test_json_numbers_published_and_differences(report: dict[str, Any]) -> None:
    results = json.loads((report["root"] / "results" / "test" / "results.json").read_text(encoding="utf-8"))
    assert results["baseline"] == BASELINE and results["pairs"] == ["gl-en", "en-vi"]
    for (pair, system), bleu in report["bleu"].items():
        run = run_of(results, pair, system)
        assert run["status"] == "tested"
        assert run["test"]["tokenized_bleu"] == pytest.approx(bleu)
        assert run["difference"] == pytest.approx(bleu - run["reference"]["value"])
    assert run_of(results, "gl-en", BASELINE)["reference"] == {"value": PUBLISHED[("gl-en", BASELINE)],
                                                               "kind": "published"}
    expected = round(PUBLISHED[("gl-en", BASELINE)] + QKNORM_AVERAGE_GAIN, 2)
    assert run_of(results, "gl-en", "qknorm")["reference"] == {"value": expected, "kind": "expected"}
    assert run_of(results, "en-vi", "qknorm")["reference"] == {"value": 33.24, "kind": "published"}
    missing = run_of(results, "gl-en", "prenorm_layernorm")
    assert missing["status"] == "missing" and missing["test"] is None and missing["reference"]["value"] is None


def test_p_values(report: dict[str, Any]) -> None:
    results = report["results"]
    for pair in ("gl-en", "en-vi"):
        assert run_of(results, pair, BASELINE)["significance"] is None
        test = run_of(results, pair, "qknorm")["significance"]
        assert 0.0 <= test["p_value"] <= 1.0
        assert test["system_bleu"] == pytest.approx(report["bleu"][(pair, "qknorm")])
        assert test["baseline_bleu"] == pytest.approx(report["bleu"][(pair, BASELINE)])
        assert test["p_value"] < 0.05  # every other line corrupted vs every seventh: clearly different
        assert run_of(results, pair, "prenorm_layernorm")["significance"] is None


def test_training_and_gains(report: dict[str, Any]) -> None:
    results = report["results"]
    done = run_of(results, "gl-en", "qknorm")["training"]
    assert done == {"steps": 300, "train_seconds": 3725.0, "epoch": 9, "best_dev_bleu": 15.0, "best_step": 300,
                    "evaluations": 3, "machines": ["CPU A (avx2), 2 threads", "CPU B (avx512f), 4 threads"]}
    from_metrics = run_of(results, "en-vi", "qknorm")["training"]  # no progress: from metrics.jsonl
    assert from_metrics["steps"] == 300 and from_metrics["best_dev_bleu"] == 15.0
    assert from_metrics["train_seconds"] is None
    gains = run_of(results, "gl-en", "qknorm")["gains"]
    assert gains["final"] == {name: 15.0 + j for j, name in enumerate(GAINS)}
    assert gains["initial"]["encoder.0.self_attn"] == 12.0 and gains["steps"] == [100, 200, 300]
    assert run_of(results, "gl-en", BASELINE)["gains"] is None


def test_markdown(report: dict[str, Any]) -> None:
    text = (report["root"] / "results" / "test" / "results.md").read_text(encoding="utf-8")
    bleu = report["bleu"][("gl-en", "qknorm")]
    expected = round(PUBLISHED[("gl-en", BASELINE)] + QKNORM_AVERAGE_GAIN, 2)
    row = next(line for line in text.splitlines() if line.startswith("| gl-en | qknorm | ") and "expected" in line)
    assert f"| {bleu:.2f} |" in row and f"{expected:.2f} (expected)" in row and f"{bleu - expected:+.2f}" in row
    p_value = run_of(report["results"], "gl-en", "qknorm")["significance"]["p_value"]
    assert f"{p_value:.3f} *" in row
    assert f"| {PUBLISHED[('gl-en', BASELINE)]:.2f} |" in text and "(baseline)" in text
    assert "| gl-en | qknorm | tested | 300 | 1h02 | 15.00 (300) | 16.50 [15.00, 18.00] |" in text
    assert "| gl-en | prenorm_layernorm | missing |" in text
    assert "- gl-en qknorm: CPU A (avx2), 2 threads; then CPU B (avx512f), 4 threads" in text  # the machines
    assert "## Learned QKNorm g" in text and "![dev BLEU, gl-en](dev_bleu_gl-en.png)" in text


def test_plots_are_png(report: dict[str, Any]) -> None:
    out = report["root"] / "results" / "test"
    names = {"dev_bleu_gl-en.png", "dev_bleu_en-vi.png", "gains_gl-en_qknorm.png", "gains_en-vi_qknorm.png"}
    assert {p.name for p in out.glob("*.png")} == names
    assert {p.name for p in report["files"]} >= names | {"results.json", "results.md"}
    for name in names:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


def test_read_metrics_keeps_last_record_per_step(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 2, "bleu": 1}\n{"step": 1, "bleu": 2}\n\n'
                                            '{"step": 2, "bleu": 3}\n', encoding="utf-8")
    assert read_metrics(tmp_path) == [{"step": 1, "bleu": 2}, {"step": 2, "bleu": 3}]
    assert read_metrics(tmp_path / "none") == []


def test_gain_summary_and_reference() -> None:
    summary = gain_summary({"encoder.0.self_attn": 1.0, "encoder.1.self_attn": 3.0, "decoder.0.self_attn": 5.0,
                            "decoder.0.cross_attn": 7.0})
    assert summary["all"] == {"mean": 4.0, "min": 1.0, "max": 7.0}
    assert summary["encoder self"]["mean"] == 2.0 and summary["decoder self"]["mean"] == 5.0
    assert summary["cross"] == {"mean": 7.0, "min": 7.0, "max": 7.0}
    assert reference_score("xx-yy", "qknorm") == {"value": None, "kind": None}
    assert reference_score("sk-en", "postnorm_layernorm") == {"value": None, "kind": None}


def test_equal_scores_have_p_value_one(tmp_path: Path) -> None:
    refs = references(30)
    hyps = corrupt(refs, 3)
    records = []
    for system in (BASELINE, "qknorm"):
        fake_run(tmp_path / system, "gl-en", system, hyps, refs, qknorm=False)
        records.append(collect_run("gl-en", system, tmp_path / system))
    results = build_results(records, {"gl-en": refs}, "same", "cpu", n_samples=50)
    test = results["runs"][1]["significance"]
    assert test["p_value"] == 1.0 and "equal BLEU" in test["note"]
