"""The reproduction report on records of fake run directories with known hypotheses, two seeds a system: means and
spreads, published/expected values, differences, the across-seed test and the per-seed bootstrap, training
summaries, PNG plots, and records that refuse to be misread."""

from __future__ import annotations

import json
import random
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from nmt.errors import NmtError
from nmt.experiments.published import BASELINE, PUBLISHED, QKNORM_AVERAGE_GAIN, reference_score
from nmt.experiments.records import (
    check_references,
    lines_digest,
    read_metrics,
    read_record,
    read_records,
    record_from_run,
    write_record,
)
from nmt.experiments.report import Expected, Resampling, build_results, gain_summary
from nmt.metrics import tokenized_bleu

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WORDS = "the a cat dog sat ran on under mat tree big small red blue".split()
GAINS = ["encoder.0.self_attn", "encoder.1.self_attn", "decoder.0.self_attn", "decoder.0.cross_attn"]


def references(n: int = 60) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) for _ in range(n)]


def corrupt(lines: list[str], every: int, offset: int = 0) -> list[str]:
    """Replace the last word of every ``every``-th line (a worse system the more often it happens); ``offset``
    shifts which lines (another seed of the same system)."""
    return [" ".join(line.split()[:-1] + ["xyz"]) if (i + offset) % every == 0 else line
            for i, line in enumerate(lines)]


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


def record_fake_run(results_dir: Path, save_dir: Path, pair: str, system: str, seed: int, hyps: list[str],
                    refs: list[str], qknorm: bool) -> float:
    """A fake run directory and its record under ``results_dir``; returns its tokenized test BLEU."""
    bleu = fake_run(save_dir, pair, system, hyps, refs, qknorm)
    test = json.loads((save_dir / "test_scores.json").read_text(encoding="utf-8"))
    fields = {"name": f"{pair}-{system}-s{seed}", "pair": pair, "system": system, "seed": seed, "scale": "cpu",
              "config": {"train": {"seed": seed}}}
    write_record(results_dir, record_from_run(save_dir, fields, PROGRESS if pair == "gl-en" else None, test, refs),
                 hyps)
    return bleu


SYSTEMS = ((BASELINE, 2), ("qknorm", 7), ("prenorm_layernorm", 0))  # 0: never run (its record is missing)
SEEDS = (1, 2)


def expected_runs() -> list[Expected]:
    return [Expected(f"{pair}-{system}-s{seed}", pair, system, seed)
            for pair in ("gl-en", "en-vi") for system, _ in SYSTEMS for seed in SEEDS]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("report")
    refs = references()
    results_dir = root / "results" / "test"
    bleu: dict[tuple[str, str, int], float] = {}
    for pair in ("gl-en", "en-vi"):
        for system, every in SYSTEMS:
            for seed in SEEDS if every else ():
                bleu[(pair, system, seed)] = record_fake_run(
                    results_dir, root / "runs" / f"{pair}-{system}-s{seed}", pair, system, seed,
                    corrupt(refs, every, seed), refs, system == "qknorm")
    shutil.rmtree(root / "runs")  # the report needs the records only
    results = build_results(expected_runs(), read_records(results_dir), {"gl-en": refs, "en-vi": refs}, "test",
                            "cpu", Resampling(bootstrap_samples=200, shuffles=300))
    from nmt.experiments.report_markdown import write_report

    files = write_report(results, results_dir)
    return {"root": root, "results": results, "files": files, "bleu": bleu, "refs": refs}


def group_of(results: dict[str, Any], pair: str, system: str) -> dict[str, Any]:
    (group,) = [g for g in results["groups"] if g["pair"] == pair and g["system"] == system]
    return group


def run_of(results: dict[str, Any], pair: str, system: str, seed: int) -> dict[str, Any]:
    (run,) = [r for r in results["runs"] if (r["pair"], r["system"], r["seed"]) == (pair, system, seed)]
    return run


def test_means_spreads_published_and_differences(report: dict[str, Any]) -> None:
    results = json.loads((report["root"] / "results" / "test" / "results.json").read_text(encoding="utf-8"))
    assert results["baseline"] == BASELINE and results["pairs"] == ["gl-en", "en-vi"] and results["seeds"] == [1, 2]
    for pair in ("gl-en", "en-vi"):
        for system in (BASELINE, "qknorm"):
            values = [report["bleu"][(pair, system, seed)] for seed in SEEDS]
            group = group_of(results, pair, system)
            assert group["seeds"] == [1, 2] and group["tokenized_bleu"]["values"] == pytest.approx(values)
            assert group["tokenized_bleu"]["mean"] == pytest.approx(statistics.mean(values))
            assert group["tokenized_bleu"]["sd"] == pytest.approx(statistics.stdev(values))
            assert group["sacrebleu"]["mean"] == pytest.approx(statistics.mean(values) - 1.0)
            assert group["difference"] == pytest.approx(statistics.mean(values) - group["reference"]["value"])
            for seed in SEEDS:
                assert run_of(results, pair, system, seed)["status"] == "recorded"
    assert group_of(results, "gl-en", BASELINE)["reference"] == {"value": PUBLISHED[("gl-en", BASELINE)],
                                                                 "kind": "published"}
    expected = round(PUBLISHED[("gl-en", BASELINE)] + QKNORM_AVERAGE_GAIN, 2)
    assert group_of(results, "gl-en", "qknorm")["reference"] == {"value": expected, "kind": "expected"}
    assert group_of(results, "en-vi", "qknorm")["reference"] == {"value": 33.24, "kind": "published"}
    missing = group_of(results, "gl-en", "prenorm_layernorm")
    assert missing["tokenized_bleu"]["n"] == 0 and missing["across_seeds"] is None and missing["difference"] is None
    assert run_of(results, "gl-en", "prenorm_layernorm", 1)["status"] == "missing"


def test_across_seed_test_and_per_seed_bootstrap(report: dict[str, Any]) -> None:
    results = report["results"]
    for pair in ("gl-en", "en-vi"):
        assert group_of(results, pair, BASELINE)["across_seeds"] is None
        across = group_of(results, pair, "qknorm")["across_seeds"]
        difference = (statistics.mean(report["bleu"][(pair, "qknorm", s)] for s in SEEDS)
                      - statistics.mean(report["bleu"][(pair, BASELINE, s)] for s in SEEDS))
        assert across["randomization"]["difference"] == pytest.approx(difference)
        assert across["randomization"]["p_value"] < 0.05  # half the lines corrupted vs a seventh: clearly different
        assert across["randomization"]["n_shuffles"] == 300 and across["baseline_seeds"] == [1, 2]
        interval = across["interval"]
        assert interval["low"] < difference < interval["high"] and interval["n_resamples"] == 200
        for seed in SEEDS:
            test = run_of(results, pair, "qknorm", seed)["significance"]
            assert test["baseline_seed"] == seed and test["p_value"] < 0.05
            assert test["system_bleu"] == pytest.approx(report["bleu"][(pair, "qknorm", seed)])
            assert test["baseline_bleu"] == pytest.approx(report["bleu"][(pair, BASELINE, seed)])
            assert run_of(results, pair, BASELINE, seed)["significance"] is None


def test_training_and_gains(report: dict[str, Any]) -> None:
    results = report["results"]
    done = run_of(results, "gl-en", "qknorm", 1)
    assert done["training"] == {"steps": 300, "epoch": 9, "train_seconds": 3725.0, "best_dev_bleu": 15.0,
                                "best_step": 300}
    assert done["machines"] == ["CPU A (avx2), 2 threads", "CPU B (avx512f), 4 threads"]
    from_metrics = run_of(results, "en-vi", "qknorm", 2)["training"]  # no progress: from metrics.jsonl
    assert from_metrics["steps"] == 300 and from_metrics["best_dev_bleu"] == 15.0
    assert from_metrics["train_seconds"] is None
    gains = done["gains"]
    assert gains["final"] == {name: 15.0 + j for j, name in enumerate(GAINS)}
    assert gains["initial"]["encoder.0.self_attn"] == 12.0 and gains["steps"] == [100, 200, 300]
    assert run_of(results, "gl-en", BASELINE, 1)["gains"] is None
    assert group_of(results, "gl-en", "qknorm")["steps"]["mean"] == 300


def test_markdown(report: dict[str, Any]) -> None:
    text = (report["root"] / "results" / "test" / "results.md").read_text(encoding="utf-8")
    group = group_of(report["results"], "gl-en", "qknorm")
    expected = round(PUBLISHED[("gl-en", BASELINE)] + QKNORM_AVERAGE_GAIN, 2)
    row = next(line for line in text.splitlines() if line.startswith("| gl-en | qknorm | ") and "expected" in line)
    bleu = group["tokenized_bleu"]
    assert f"| {bleu['mean']:.2f} ± {bleu['sd']:.2f} (n=2) |" in row
    assert f"s1: {bleu['values'][0]:.2f}, s2: {bleu['values'][1]:.2f}" in row
    assert f"{expected:.2f} (expected)" in row and f"{bleu['mean'] - expected:+.2f}" in row
    interval = group["across_seeds"]["interval"]
    assert f"{interval['difference']:+.2f} [{interval['low']:+.2f}, {interval['high']:+.2f}]" in row
    assert f"{group['across_seeds']['randomization']['p_value']:.3f} *" in row
    assert f"| {PUBLISHED[('gl-en', BASELINE)]:.2f} |" in text and "(baseline)" in text
    run_row = next(line for line in text.splitlines() if line.startswith("| gl-en | qknorm | 1 | recorded |"))
    assert "| 300 | 1h02 | 15.00 (300) |" in run_row and "| 16.50 [15.00, 18.00] |" in run_row
    assert "| gl-en | prenorm_layernorm | 1 | missing |" in text
    assert "- gl-en-qknorm-s1: CPU A (avx2), 2 threads; then CPU B (avx512f), 4 threads" in text  # the machines
    assert "Clark et al. 2011" in text and "## Learned QKNorm g" in text and "## Conclusion" in text
    assert "- gl-en: qknorm against prenorm_fixnorm_scalenorm: " in text
    assert "![dev BLEU, gl-en](dev_bleu_gl-en.png)" in text


def test_plots_are_png(report: dict[str, Any]) -> None:
    out = report["root"] / "results" / "test"
    names = {"dev_bleu_gl-en.png", "dev_bleu_en-vi.png"} | {f"gains_{pair}-qknorm-s{seed}.png"
                                                              for pair in ("gl-en", "en-vi") for seed in SEEDS}
    assert {p.name for p in out.glob("*.png")} == names
    assert {p.name for p in report["files"]} >= names | {"results.json", "results.md"}
    for name in names:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


def test_a_rebuild_from_the_records_is_the_same_report(report: dict[str, Any]) -> None:
    results_dir = report["root"] / "results" / "test"
    again = build_results(expected_runs(), read_records(results_dir), {"gl-en": report["refs"],
                          "en-vi": report["refs"]}, "test", "cpu", Resampling(bootstrap_samples=200, shuffles=300))
    assert again["groups"] == report["results"]["groups"]
    assert [{k: v for k, v in r.items()} for r in again["runs"]] == report["results"]["runs"]


def test_records_refuse_to_be_misread(tmp_path: Path) -> None:
    refs = references(10)
    folder = write_record(tmp_path, {"name": "xx-yy-qknorm-s1", "pair": "xx-yy", "system": "qknorm", "seed": 1,
                                     "test": {"test_bleu_tokenized": 1.0}, "references_sha256": lines_digest(refs)},
                          refs)
    record = read_record(folder)
    assert record["hypotheses"] == refs and record["test_sentences"] == 10
    check_references(record, refs, tmp_path / "refs")
    with pytest.raises(NmtError, match="not the test references run xx-yy-qknorm-s1"):
        check_references(record, refs[:-1], tmp_path / "refs")
    (folder / "test.hyp").write_text("".join(line + "\n" for line in refs[:-1]), encoding="utf-8")
    with pytest.raises(NmtError, match=r"test.hyp: its 9 lines are not the hypotheses .*record.json records"):
        read_record(folder)
    (folder / "record.json").write_text("{", encoding="utf-8")
    with pytest.raises(NmtError, match="cannot read run record .*record.json"):
        read_records(tmp_path)


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
    for system in (BASELINE, "qknorm"):
        record_fake_run(tmp_path / "results", tmp_path / system, "gl-en", system, 1, hyps, refs, qknorm=False)
    expected = [Expected(f"gl-en-{system}-s1", "gl-en", system, 1) for system in (BASELINE, "qknorm")]
    results = build_results(expected, read_records(tmp_path / "results"), {"gl-en": refs}, "same", "cpu",
                            Resampling(bootstrap_samples=50, shuffles=50))
    test = results["runs"][1]["significance"]
    assert test["p_value"] == 1.0 and "equal BLEU" in test["note"]
    assert results["groups"][1]["across_seeds"]["randomization"]["p_value"] == 1.0
