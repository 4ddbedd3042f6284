"""``results.md``: the results tree of :func:`nmt.experiments.report.build_results` as Markdown tables, and the
report writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmt.experiments.conclusion import SIGNIFICANCE_LEVEL, conclusions
from nmt.experiments.report import write_json


def _num(value: float | None, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}" if minutes >= 60 else f"{seconds / 60:.1f} min"


def _spread(stats: dict[str, Any]) -> str:
    """``mean ± sd (n)``; a single value as itself (n=1), nothing as —."""
    if not stats["n"]:
        return "—"
    sd = f" ± {stats['sd']:.2f}" if stats["sd"] is not None else ""
    return f"{stats['mean']:.2f}{sd} (n={stats['n']})"


def _p(p_value: float) -> str:
    return f"{p_value:.3f}" + (" *" if p_value < SIGNIFICANCE_LEVEL else "")


def _reference(ref: dict[str, Any]) -> str:
    if ref["value"] is None:
        return "—"
    return f"{ref['value']:.2f}" if ref["kind"] == "published" else f"{ref['value']:.2f} (expected)"


def _versus(group: dict[str, Any], baseline: str) -> tuple[str, str, str]:
    if group["system"] == baseline:
        return "(baseline)", "(baseline)", "(baseline)"
    test = group["across_seeds"]
    if test is None:
        return "—", "—", "—"
    interval, detectable = test["interval"], test.get("detectable")
    return (f"{interval['difference']:+.2f} [{interval['low']:+.2f}, {interval['high']:+.2f}]",
            _p(test["randomization"]["p_value"]), "—" if detectable is None else f"{detectable['difference']:.2f}")


def bleu_table(results: dict[str, Any]) -> list[str]:
    """Test BLEU per pair × system over seeds, beside the published (or expected) number, with the across-seed
    comparison with the baseline."""
    lines = ["| pair | system | test BLEU (tokenized), mean ± sd | per seed | sacreBLEU, mean ± sd | published | Δ "
             "| vs baseline: Δ mean [95% CI] | p (seeds × sentences) | detectable Δ (80% power) |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for group in results["groups"]:
        bleu = group["tokenized_bleu"]
        seeds = ", ".join(f"s{s}: {v:.2f}" for s, v in zip(group["seeds"], bleu["values"], strict=True)) or "—"
        versus, p_value, detectable = _versus(group, results["baseline"])
        lines.append(f"| {group['pair']} | {group['system']} | {_spread(bleu)} | {seeds} | "
                     f"{_spread(group['sacrebleu'])} | {_reference(group['reference'])} | "
                     f"{_num(group['difference'], signed=True)} | {versus} | {p_value} | {detectable} |")
    return lines


def runs_table(results: dict[str, Any]) -> list[str]:
    """One row per pair × system × seed: status, steps, time, best dev BLEU, test BLEU, the same-seed bootstrap."""
    lines = ["| pair | system | seed | status | steps | training time | best dev BLEU (step) | test BLEU | sacreBLEU "
             "| p vs baseline, same seed | final g: mean [min, max] |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for run in results["runs"]:
        head = f"| {run['pair']} | {run['system']} | {run['seed'] if run['seed'] is not None else '—'} |"
        if run["status"] != "recorded":
            lines.append(f"{head} {run['status']} | — | — | — | — | — | — | — |")
            continue
        train, test = run["training"], run["test"]
        best = f"{_num(train['best_dev_bleu'])} ({train['best_step']})" if train["best_dev_bleu"] is not None else "—"
        p_value = ("(baseline)" if run["system"] == results["baseline"] else
                   _p(run["significance"]["p_value"]) if run["significance"] else "—")
        g = "—"
        if run["gains"] is not None:
            stats = run["gains"]["summary"]["all"]
            g = f"{stats['mean']:.2f} [{stats['min']:.2f}, {stats['max']:.2f}]"
        lines.append(f"{head} recorded | {train['steps'] if train['steps'] is not None else '—'} | "
                     f"{_duration(train['train_seconds'])} | {best} | {_num(test['test_bleu_tokenized'])} | "
                     f"{_num(test['sacrebleu'])} | {p_value} | {g} |")
    machines = [f"- {run['name']}: " + "; then ".join(run["machines"]) for run in results["runs"]
                if run.get("machines")]
    return lines + (["", "Trained on (CPU or GPU, ISA flags, threads, torch; from each run's train.log):", *machines]
                    if machines else [])


def tests_note(results: dict[str, Any]) -> list[str]:
    """What each test is and what its p means."""
    tests = results["tests"]
    return [
        f"- *vs baseline*: mean test BLEU of the system's seeds minus that of `{results['baseline']}`'s seeds, with a "
        f"95% percentile bootstrap interval ({tests['bootstrap_samples']} resamples of both the test sentences and "
        "each system's seeds).",
        "- *p (seeds × sentences)*: stratified approximate randomization in the manner of Clark et al. 2011 "
        f"(MultEval), {tests['shuffles']} shuffles: under H0 (the method makes no difference) a sentence's "
        "hypotheses are exchangeable among all runs of both systems, so each shuffle permutes them per sentence "
        "across systems *and* seeds; p is the share of shuffles whose |Δ mean BLEU| is at least the observed one. "
        "It accounts for the training seed, not only the test set: a small p says the methods differ, not just "
        "these models.",
        "- *p vs baseline, same seed*: sacreBLEU's paired bootstrap between the system's and the baseline's run of "
        f"the same seed ({tests['bootstrap_samples']} resamples of the test sentences): whether these two models "
        f"differ. * marks p < {SIGNIFICANCE_LEVEL}.",
        "- *detectable Δ (80% power)*: the smallest true difference of mean test BLEU that a two-sided Welch t-test "
        "at 0.05 over these seeds would find 4 times in 5, from the two systems' seed-to-seed spread "
        "((t[0.975, ν] + t[0.8, ν]) × standard error of the difference, ν by Welch–Satterthwaite; "
        "`nmt/experiments/power.py`). A difference below it that was not found is not evidence of no difference.",
    ]


def gains_table(results: dict[str, Any]) -> list[str]:
    """Mean g at the first evaluation and final mean g per kind of attention of every QKNorm run (or nothing)."""
    rows = [run for run in results["runs"] if run.get("gains")]
    if not rows:
        return []
    kinds = ["encoder self", "decoder self", "cross"]
    lines = ["| pair | system | seed | g at first evaluation (mean) | "
             + " | ".join(f"final g, {k} (mean)" for k in kinds) + " |",
             "|---|---|---:|---:|" + "---:|" * len(kinds)]
    for run in rows:
        initial = list(run["gains"]["initial"].values())
        summary = run["gains"]["summary"]
        finals = " | ".join(_num(summary[k]["mean"]) if k in summary else "—" for k in kinds)
        lines.append(f"| {run['pair']} | {run['system']} | {run['seed']} | {_num(sum(initial) / len(initial))} | "
                     f"{finals} |")
    return lines


def format_markdown(results: dict[str, Any], plots: dict[str, str] | None = None) -> str:
    """The whole ``results.md``; ``plots`` maps a caption to a PNG path relative to the report."""
    scale_note = ("the papers' configurations" if results["scale"] == "paper" else
                  "the CPU preset (smaller models and budgets): published numbers are for the papers' "
                  "configurations and are not expected to be matched")
    out = [
        f"# Reproduction results: {results['name']}", "",
        f"Scale: {results['scale']}, {scale_note}. Generated {results['generated_at']} from the run records in "
        "`runs/` (rebuild with `scripts/reproduce ... --report-only`).", "",
        "## Test BLEU over seeds", "",
        *bleu_table(results), "",
        "- *test BLEU (tokenized)*: the papers' metric (multi-bleu.perl on Moses-tokenized text, i.e. sacreBLEU "
        "with `tokenize='none'`, no smoothing); *sacreBLEU*: detokenized, default `13a` tokenizer (signatures in "
        "results.json). ± is the sample standard deviation over seeds.",
        "- *published*: Nguyen & Salazar 2019 (TwT) and Henry et al. 2020 (QKNorm). QKNorm's per-pair numbers were "
        "only published for en-vi; *(expected)* is the TwT baseline's published BLEU + "
        f"{results['qknorm_average_gain']}, QKNorm's published average gain. Δ = our mean − published (or expected).",
        *tests_note(results), "",
        "## Conclusion", "",
        *[f"- {sentence}" for sentence in conclusions(results)], "",
        "The rule: `nmt/experiments/conclusion.py` (better or worse only where the seeds × sentences test gives "
        "p < 0.05 and the interval excludes 0).", "",
        "## Runs", "",
        *runs_table(results), "",
    ]
    gains = gains_table(results)
    if gains:
        out += ["## Learned QKNorm g", "", *gains, "",
                "g starts at log2(L² − L), L = the 97.5th percentile of training lengths in pieces; every module's "
                "value at every evaluation is in results.json.", ""]
    if plots:
        out += ["## Plots", ""] + [f"![{caption}]({path})" for caption, path in plots.items()] + [""]
    return "\n".join(out)


def write_report(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write ``results.json``, the PNG plots and ``results.md`` into ``out_dir``; returns the files written."""
    from nmt.experiments.plots import plot_dev_bleu, plot_gains

    out_dir.mkdir(parents=True, exist_ok=True)
    plots: dict[str, str] = {}
    for pair in results["pairs"]:
        curves: dict[str, dict[str, list[list[float]]]] = {}
        for run in results["runs"]:
            if run["pair"] == pair:
                curves.setdefault(run["system"], {})
                if run["status"] == "recorded":
                    curves[run["system"]][f"s{run['seed']}"] = run["dev_curve"]
        path = plot_dev_bleu(curves, out_dir / f"dev_bleu_{pair}.png", f"{pair}: dev BLEU ({results['scale']})")
        plots[f"dev BLEU, {pair}"] = path.name
    for run in results["runs"]:
        if not run.get("gains"):
            continue
        path = plot_gains(run["gains"]["steps"], run["gains"]["history"], out_dir / f"gains_{run['name']}.png",
                          f"{run['name']}: learned QKNorm g")
        plots[f"QKNorm g, {run['name']}"] = path.name
    results = {**results, "plots": plots}
    written = [write_json(results, out_dir / "results.json")]
    (out_dir / "results.md").write_text(format_markdown(results, plots), encoding="utf-8")
    return [*written, out_dir / "results.md", *(out_dir / name for name in plots.values())]
