"""``results.md``: the results tree of :func:`nmt.experiments.report.build_results` as Markdown tables, and the
report writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmt.experiments.report import write_json

SIGNIFICANCE_LEVEL = 0.05


def _num(value: float | None, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}" if minutes >= 60 else f"{seconds / 60:.1f} min"


def _p_value(run: dict[str, Any], baseline: str) -> str:
    if run["system"] == baseline:
        return "(baseline)"
    test = run["significance"]
    if test is None:
        return "—"
    mark = " *" if test["p_value"] < SIGNIFICANCE_LEVEL else ""
    return f"{test['p_value']:.3f}{mark}"


def _reference(run: dict[str, Any]) -> str:
    ref = run["reference"]
    if ref["value"] is None:
        return "—"
    return f"{ref['value']:.2f}" if ref["kind"] == "published" else f"{ref['value']:.2f} (expected)"


def bleu_table(results: dict[str, Any]) -> list[str]:
    """Test BLEU per pair × system beside the published (or expected) number, with p-values."""
    lines = ["| pair | system | test BLEU (tokenized) | sacreBLEU | published | Δ | p vs baseline |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for run in results["runs"]:
        test = run["test"] or {}
        lines.append(f"| {run['pair']} | {run['system']} | {_num(test.get('tokenized_bleu'))} | "
                     f"{_num(test.get('sacrebleu'))} | {_reference(run)} | {_num(run['difference'], signed=True)} | "
                     f"{_p_value(run, results['baseline'])} |")
    return lines


def training_table(results: dict[str, Any]) -> list[str]:
    """Steps, training time, best dev BLEU and the final learned QKNorm g of every run."""
    lines = ["| pair | system | status | steps | training time | best dev BLEU (step) | final g: mean [min, max] |",
             "|---|---|---|---:|---:|---:|---|"]
    for run in results["runs"]:
        train = run["training"]
        best = (f"{_num(train['best_dev_bleu'])} ({train['best_step']})" if train["best_dev_bleu"] is not None
                else "—")
        gains = run["gains"]
        g = "—"
        if gains is not None:
            stats = gains["summary"]["all"]
            g = f"{stats['mean']:.2f} [{stats['min']:.2f}, {stats['max']:.2f}]"
        steps = train["steps"] if train["steps"] is not None else "—"
        lines.append(f"| {run['pair']} | {run['system']} | {run['status']} | {steps} | "
                     f"{_duration(train['train_seconds'])} | {best} | {g} |")
    machines = [f"- {run['pair']} {run['system']}: " + "; then ".join(run["training"]["machines"])
                for run in results["runs"] if run["training"].get("machines")]
    return lines + (["", "Trained on (CPU or GPU, ISA flags, threads, torch; from each run's train.log):", *machines]
                    if machines else [])


def gains_table(results: dict[str, Any]) -> list[str]:
    """Mean g at the first evaluation and final mean g per kind of attention of every QKNorm run (or nothing)."""
    rows = [run for run in results["runs"] if run["gains"] is not None]
    if not rows:
        return []
    kinds = ["encoder self", "decoder self", "cross"]
    lines = ["| pair | system | g at first evaluation (mean) | "
             + " | ".join(f"final g, {k} (mean)" for k in kinds) + " |",
             "|---|---|---:|" + "---:|" * len(kinds)]
    for run in rows:
        initial = list(run["gains"]["initial"].values())
        summary = run["gains"]["summary"]
        finals = " | ".join(_num(summary[k]["mean"]) if k in summary else "—" for k in kinds)
        lines.append(f"| {run['pair']} | {run['system']} | {_num(sum(initial) / len(initial))} | {finals} |")
    return lines


def format_markdown(results: dict[str, Any], plots: dict[str, str] | None = None) -> str:
    """The whole ``results.md``; ``plots`` maps a caption to a PNG path relative to the report."""
    scale_note = ("the papers' configurations" if results["scale"] == "paper" else
                  "the CPU preset (smaller models, time-limited): published numbers are for the papers' "
                  "configurations and are not expected to be matched")
    out = [
        f"# Reproduction results: {results['name']}", "",
        f"Scale: {results['scale']}, {scale_note}. Generated {results['generated_at']}.", "",
        "## Test BLEU", "",
        *bleu_table(results), "",
        "- *test BLEU (tokenized)*: the papers' metric (multi-bleu.perl on Moses-tokenized text, i.e. sacreBLEU "
        "with `tokenize='none'`); *sacreBLEU*: detokenized, default `13a` tokenizer (signatures in results.json).",
        "- *published*: Nguyen & Salazar 2019 (TwT) and Henry et al. 2020 (QKNorm). QKNorm's per-pair numbers were "
        "only published for en-vi; *(expected)* is the TwT baseline's published BLEU + "
        f"{results['qknorm_average_gain']}, QKNorm's published average gain. Δ = ours − published (or expected).",
        f"- *p vs baseline*: sacreBLEU paired bootstrap of tokenized test BLEU against `{results['baseline']}` "
        f"(H0: no difference); * marks p < {SIGNIFICANCE_LEVEL}.", "",
        "## Training", "",
        *training_table(results), "",
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
        curves = {run["system"]: run["dev_curve"] for run in results["runs"] if run["pair"] == pair}
        path = plot_dev_bleu(curves, out_dir / f"dev_bleu_{pair}.png", f"{pair}: dev BLEU ({results['scale']})")
        plots[f"dev BLEU, {pair}"] = path.name
    for run in results["runs"]:
        if run["gains"] is None:
            continue
        path = plot_gains(run["gains"]["steps"], run["gains"]["history"],
                          out_dir / f"gains_{run['pair']}_{run['system']}.png",
                          f"{run['pair']} {run['system']}: learned QKNorm g")
        plots[f"QKNorm g, {run['pair']} {run['system']}"] = path.name
    results = {**results, "plots": plots}
    written = [write_json(results, out_dir / "results.json")]
    (out_dir / "results.md").write_text(format_markdown(results, plots), encoding="utf-8")
    return [*written, out_dir / "results.md", *(out_dir / name for name in plots.values())]
