"""The run records committed under ``docs/results/*/runs/`` (issue 27): each reads as a record whose hypotheses are
the ones it recorded, and its tokenized test BLEU recomputes from those hypotheses and the test references wherever
the corpus it was scored on sits beside the checkout (``../shared/data/PAIR/test.TGT``, as on CI).

And what the README and docs/ quote (issue 47): the BLEU of every other committed hypothesis file under
``docs/results/``, recomputed against the gl-en references, and the speed ratios recomputed from the committed
``bench/`` reports (median, full range and count over the runs of a class), each compared with the text it supports."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from nmt.experiments.records import RECORD, check_references, read_record
from nmt.metrics import tokenized_bleu

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(path.parent for path in (ROOT / "docs" / "results").glob(f"*/runs/*/{RECORD}"))
SHARED_DATA = ROOT.parent / "shared" / "data"


def test_there_are_committed_records() -> None:
    assert FOLDERS, "no run records under docs/results/*/runs/"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: f"{folder.parents[1].name}/{folder.name}")
def test_a_committed_record_recomputes_from_its_hypotheses(folder: Path) -> None:
    record = read_record(folder)  # an error if test.hyp is not what the record says it is
    assert record["name"] == folder.name
    assert len(record["hypotheses"]) == record["test_sentences"]
    target = record["pair"].split("-")[1]
    references_path = SHARED_DATA / record["pair"] / f"test.{target}"
    if not references_path.is_file():
        pytest.skip(f"no {references_path} beside the checkout")
    references = references_path.read_text(encoding="utf-8").split("\n")[:-1]
    check_references(record, references, references_path)  # an error if these are other references
    score = tokenized_bleu(record["hypotheses"], references)
    assert score == pytest.approx(record["test"]["test_bleu_tokenized"], abs=1e-9)


# What the README and docs/ quote, recomputed from committed files (issue 47). Each claim is a text with one "{}"
# for the recomputed figure: the filled-in text must appear in the document it supports (whitespace collapsed, so
# line breaks do not matter).

README = "README.md"
R120 = "docs/results/cpu-gl-en-120/README.md"
BPEDROP = "docs/results/cpu-gl-en-120-bpedrop01/README.md"
PERFORMANCE = "docs/performance.md"
PROBES = "docs/results/cpu-recipe-probes-2026-12-06/README.md"
BLEU_CLAIMS: dict[str, list[tuple[str, str]]] = {  # hypothesis file under docs/results -> [(document, text)]
    "cpu-gl-en-120/test.k1_s8400.hyp": [
        (README, "best checkpoint by then (step 8,400) **{}** (15.67)"),
        (R120, "| best (what `make train PAIR=gl-en` reports) | {} |")],
    "cpu-gl-en-120/test.k8_s8400.hyp": [
        (README, "dev-chosen averages ({} to 17.28)"),
        (R120, "| average of the last 8 (chosen on dev) | {} |")],
    "cpu-gl-en-120/test.best.hyp": [
        (README, "16,891 updates, **{}** (15.93)"),
        (R120, "| 16,891 | best (`make train` with `train.max_minutes=120`) | {} |")],
    "cpu-gl-en-120/test.k5_s16800.hyp": [
        (README, "(chosen on dev): **{}**"),
        (R120, "| average of the last 5 (chosen on dev) | **{}** |")],
    "cpu-gl-en-amd-avx2/test.best.hyp": [
        (README, "(2,782 updates, fp32, both cores): test BLEU **{}**"),
        ("docs/results/cpu-gl-en-amd-avx2/README.md", "| 16.38 (the last evaluation) | **{}** |")],
    "cpu-gl-en-120-bpedrop01/test.best.hyp": [
        (README, "test BLEU is **{}** with the best checkpoint"),
        (BPEDROP, "| best (what `make train` reports) | {} |")],
    "cpu-gl-en-120-bpedrop01/test.k3_s15200.hyp": [
        (README, "({} with the average of the last 3, chosen on dev)"),
        (BPEDROP, "| average of the last 3 (chosen on dev) | **{}** |")],
    "cpu-gl-en-120-bpedrop01/dev.best.hyp": [
        (BPEDROP, "| best (step 13,600, by the 300-sentence greedy validation) | {} |")],
    "cpu-gl-en-120-bpedrop01/dev.last.hyp": [(BPEDROP, "| last (step 15,405) | {} |")],
    "cpu-gl-en-120-bpedrop01/dev.k3_s15200.hyp": [(BPEDROP, "| average of the last 3 (14,400-15,200) | **{}** |")],
    "cpu-gl-en-120-bpedrop01/dev.k5_s15200.hyp": [(BPEDROP, "| average of the last 5 (13,600-15,200) | {} |")],
    "cpu-gl-en-120-bpedrop01/dev.k8_s15200.hyp": [(BPEDROP, "| average of the last 8 (12,400-15,200) | {} |")],
    "cpu-gl-en-probes-2026-12-04/bpedrop01/dev.s12400.hyp": [(README, "({} vs 18.63, 16,891 updates")],
    "cpu-gl-en-probes-2026-12-04/bpedrop01/dev.s8400.hyp": [(PERFORMANCE, "`data.bpe_dropout`) {} / 16.14")],
    "cpu-gl-en-probes-2026-12-04/bpedrop01/dev.avg8_s8400.hyp": [(PERFORMANCE, "`data.bpe_dropout`) 16.65 / {}")],
    "cpu-gl-en-probes-2026-12-04/drop03all/dev.s8400.hyp": [(PERFORMANCE, "model.act_dropout=0.3`) {} / 17.45")],
    "cpu-gl-en-probes-2026-12-04/drop03all/dev.avg8_s8400.hyp": [(PERFORMANCE, "model.act_dropout=0.3`) 17.73 / {}")],
    "cpu-recipe-probes-2026-12-06/preset-ema/dev.raw.s8400.hyp": [(PROBES, "| `preset-ema` (lr 1e-3) | {} / 17.37 |")],
    "cpu-recipe-probes-2026-12-06/preset-ema/dev.avg8.s8400.hyp": [(PROBES, "| 18.12 / 17.37 | {} / 17.29 |")],
    "cpu-recipe-probes-2026-12-06/preset-ema/dev.ema.s8400.hyp": [(PROBES, "| 18.12 / 17.29 | {} / 17.07 |")],
    "cpu-recipe-probes-2026-12-06/lr2e3-ema/dev.raw.s8400.hyp": [(PROBES, "| `lr2e3-ema` (lr 2e-3) | {} / 17.25 |")],
    "cpu-recipe-probes-2026-12-06/lr2e3-ema/dev.avg8.s8400.hyp": [(PROBES, "| 17.96 / 17.25 | **{}** / 17.53 |")],
    "cpu-recipe-probes-2026-12-06/lr2e3-ema/dev.ema.s8400.hyp": [(PROBES, "| **18.33** / 17.53 | {} / 17.39 |")],
    "cpu-recipe-probes-2026-12-06/lr2e3-ema/test.avg8.s8400.hyp": [
        (PROBES, "`lr2e3-ema/test.avg8.s8400.hyp`): **{}** tokenized"),
        (README, "test BLEU of the candidate chosen on dev **{}**")],
}
RESULTS = ROOT / "docs" / "results"
BENCH = ROOT / "bench"


def flat_text(name: str) -> str:
    """A committed document with its whitespace collapsed, so a quoted phrase matches across line breaks."""
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())


def assert_quoted(document: str, text: str, figure: str) -> None:
    quoted = " ".join(text.format(figure).split())
    assert quoted in flat_text(document), f"{document} should say {quoted!r} (recomputed from committed files)"


def recomputed_summary(folder: str) -> Any:
    """``bench/FOLDER/summary.py`` loaded as a module, after checking that its ``main()`` prints its committed
    ``summary.out``; its functions then recompute what the documents quote."""
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location(f"{folder}_summary", BENCH / folder / "summary.py")
    assert spec is not None and spec.loader is not None
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        summary.main()
    assert printed.getvalue() == (BENCH / folder / "summary.out").read_text(encoding="utf-8")
    return summary


def gl_en_lines(split: str) -> list[str]:
    path = SHARED_DATA / "gl-en" / f"{split}.en"
    if not path.is_file():
        pytest.skip(f"no {path} beside the checkout")
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def hypothesis_bleu(name: str) -> float:
    """Tokenized BLEU of a committed hypothesis file against the gl-en references of its split (dev or test)."""
    split = Path(name).name.split(".")[0]
    hypotheses = (RESULTS / name).read_text(encoding="utf-8").split("\n")[:-1]
    references = gl_en_lines(split)
    assert len(hypotheses) == len(references), name
    return tokenized_bleu(hypotheses, references)


def test_every_committed_hypothesis_file_backs_a_quoted_figure() -> None:
    loose = {str(path.relative_to(RESULTS)) for path in RESULTS.glob("**/*.hyp") if "runs" not in path.parts}
    assert loose == set(BLEU_CLAIMS)


@pytest.mark.parametrize("name", sorted(BLEU_CLAIMS))
def test_a_quoted_bleu_recomputes_from_its_hypotheses(name: str) -> None:
    figure = f"{hypothesis_bleu(name):.2f}"
    for document, text in BLEU_CLAIMS[name]:
        assert_quoted(document, text, figure)


def test_the_second_hour_gains_recompute() -> None:
    gain_best = hypothesis_bleu("cpu-gl-en-120/test.best.hyp") - hypothesis_bleu("cpu-gl-en-120/test.k1_s8400.hyp")
    gain_averaged = (hypothesis_bleu("cpu-gl-en-120/test.k5_s16800.hyp")
                     - hypothesis_bleu("cpu-gl-en-120/test.k8_s8400.hyp"))
    assert_quoted(README, "adds only {} test BLEU with the best checkpoint", f"{gain_best:.1f}")
    assert_quoted(README, "and {} with the dev-chosen averages", f"{gain_averaged:.2f}")


def bench_rows(name: str) -> dict[str, dict[str, float]]:
    """The numeric cells of a committed `scripts/bench_peers` report's table, by tool (first column)."""
    rows: dict[str, dict[str, float]] = {}
    header: list[str] = []
    for line in (BENCH / name).read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or set(cells[0]) <= {"-"}:
            continue
        if cells[0] == "tool":
            header = cells
            continue
        rows[cells[0]] = {}
        for column, cell in zip(header, cells):
            try:
                rows[cells[0]][column] = float(cell.replace(",", "").rstrip("x"))
            except ValueError:
                pass
    return rows


def only_row(rows: dict[str, dict[str, float]], prefix: str, per_thread: bool = False) -> dict[str, float]:
    """The one row whose tool starts with ``prefix``, in one layout: one batch on all threads, or one per thread."""
    (row,) = [cells for tool, cells in rows.items()
              if tool.startswith(prefix) and ("one batch per thread" in tool) == per_thread]
    return row


PIECES = "output pieces/s"


def decoding_ratios(name: str) -> tuple[float, float]:
    """Ours bf16 over fairseq and over CTranslate2's fastest type, all decoding one batch on both threads."""
    rows = bench_rows(name)
    ours = only_row(rows, "nmt (ours), bf16")[PIECES]
    fairseq = only_row(rows, "fairseq")[PIECES]
    ctranslate2 = max(cells[PIECES] for tool, cells in rows.items()
                      if tool.startswith("CTranslate2") and "one batch per thread" not in tool)
    return ours / fairseq, ours / ctranslate2


def epoch_ratios(name: str) -> tuple[float, float]:
    """Ours bf16 and fp32 training sentences/s over fairseq's, one epoch."""
    rows = bench_rows(name)
    fairseq = rows["fairseq 0.12.3.1, fp32"]["sentences/s"]
    return (rows["nmt (ours), bf16 autocast"]["sentences/s"] / fairseq,
            rows["nmt (ours), fp32"]["sentences/s"] / fairseq)


def spread(values: list[float]) -> tuple[str, str, int]:
    """The median, the full range and the count, as the README writes them: ('1.14', '0.60-1.65', 19)."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return f"{statistics.median(values):.2f}", low if low == high else f"{low}-{high}", len(values)


def ranged(summary: tuple[str, str, int]) -> str:
    """The range and count of :func:`spread` as the README writes them: '0.60-1.65×, n = 19'."""
    return f"{summary[1]}×, n = {summary[2]}"


def decode_reports(pattern: str) -> list[str]:
    """The decoding reports of the Intel class (the README's Intel rows); the other classes' carry their name."""
    return sorted(path.name for path in BENCH.glob(f"peers-decode-{pattern}.md")
                  if not any(other in path.name for other in OTHER_CLASSES))


OTHER_CLASSES = ("-amd-", "-zen")  # report names of the non-Intel classes


EPOCH_RUNS = [*(f"peers-epoch-2026-12-01-{run}.md" for run in ("s6", "s6-b", "s6-c", "s7", "s8", "s10")),
              "peers-epoch-2026-12-07-intel-marian.md"]
# The decoding runs of 2026-12-01 by machine, labelled as in docs/performance.md.
MACHINES = {"C": "2026-12-01", "D": "2026-12-01-[bc]", "E": "2026-12-01-s6*", "G": "2026-12-01-s8*",
            "H": "2026-12-01-s9*", "I": "2026-12-01-s10"}


def test_the_training_ratios_are_median_and_range_of_every_run() -> None:
    bf16, fp32 = (spread(list(values)) for values in zip(*(epoch_ratios(name) for name in EPOCH_RUNS)))
    assert_quoted(README, "{}", f"bf16 **{bf16[0]}×** fairseq ({bf16[1]}×, n = {bf16[2]}), "
                                     f"fp32 **{fp32[0]}×** ({fp32[1]}×, n = {fp32[2]})")
    fairseq = [bench_rows(name)["fairseq 0.12.3.1, fp32"]["sentences/s"] for name in EPOCH_RUNS]
    assert_quoted(README, "fairseq 0.12.3 fp32: {}", f"{min(fairseq):.1f}-{max(fairseq):.1f}")
    for tool, text in (("nmt (ours), bf16 autocast", "| bf16 {} MiB |"),
                       ("fairseq 0.12.3.1, fp32", "| fairseq {} MiB |")):
        rss = [bench_rows(name)[tool]["peak RSS MiB"] for name in EPOCH_RUNS]
        assert_quoted(README, text, f"{min(rss):,.0f}-{max(rss):,.0f}")
    # The other epoch reports are of older code (2026-11-30, 2026-12-01 before E) or of another class.
    others = {path.name for path in BENCH.glob("peers-epoch*.md")} - set(EPOCH_RUNS)
    assert others == {"peers-epoch.md", "peers-epoch-2026-12-01.md", "peers-epoch-2026-12-01-tcmalloc.md",
                      "peers-epoch-2026-12-01-tcmalloc-2.md", "peers-epoch-2026-12-02-zen5.md",
                      "peers-epoch-2026-12-07-amd-avx2.md", "peers-epoch-2026-12-07-amd-avx2-b.md",
                      "peers-epoch-2026-12-07-amd-zen4.md"}


def test_the_marian_training_ratios_are_their_report() -> None:
    rows = bench_rows("peers-epoch-2026-12-07-intel-marian.md")
    speed = {tool: row["sentences/s"] for tool, row in rows.items()}
    marian, fairseq = speed["Marian 1.12.42, fp32"], speed["fairseq 0.12.3.1, fp32"]
    assert_quoted(README, "{}", f"Marian 1.12.42 fp32 (1 run): {marian / fairseq:.2f}× fairseq, ours bf16 "
                                f"{speed['nmt (ours), bf16 autocast'] / marian:.2f}× and fp32 "
                                f"{speed['nmt (ours), fp32'] / marian:.2f}× Marian")
    assert_quoted(README, "(Marian: {} MiB)", f"{rows['Marian 1.12.42, fp32']['peak RSS MiB']:,.0f}")


def test_the_zen5_training_ratios_are_their_report() -> None:
    name = "peers-epoch-2026-12-02-zen5.md"
    rows = bench_rows(name)
    reported = [rows[tool]["vs fairseq (sentences/s)"] for tool in ("nmt (ours), bf16 autocast", "nmt (ours), fp32")]
    assert epoch_ratios(name) == pytest.approx(reported, abs=0.01)  # the report's ratios use the unrounded speeds
    assert_quoted(README, "{}", f"bf16 **{reported[0]:.2f}×** fairseq, fp32 **{reported[1]:.2f}×**")


def test_the_amd_avx2_training_figures_are_their_report() -> None:
    rows = bench_rows("peers-epoch-2026-12-07-amd-avx2.md")
    speed = {tool: row["sentences/s"] for tool, row in rows.items()}
    ours, fairseq, marian = (speed[tool] for tool in ("nmt (ours), fp32", "fairseq 0.12.3.1, fp32",
                                                       "Marian 1.12.42, fp32"))
    assert rows["nmt (ours), fp32"]["vs fairseq (sentences/s)"] == pytest.approx(ours / fairseq, abs=0.01)
    assert_quoted(README, "{}", f"fp32 **{ours / fairseq:.2f}×** fairseq, **{ours / marian:.2f}×** Marian")
    assert_quoted(README, "{}", f"fairseq 0.12.3 fp32: {fairseq:.1f}; Marian 1.12.42 fp32: {marian:.1f} "
                                f"({marian / fairseq:.2f}× fairseq)")
    second = bench_rows("peers-epoch-2026-12-07-amd-avx2-b.md")
    ratio = second["nmt (ours), fp32"]["sentences/s"] / second["fairseq 0.12.3.1, fp32"]["sentences/s"]
    assert_quoted(README, "{}", f"`bench/peers-epoch-2026-12-07-amd-avx2-b.md`): {ratio:.2f}× fairseq")
    both = spread([ours / fairseq, ratio])
    assert_quoted(README, "{}", f"both runs: {both[0]}× fairseq ({ranged(both)})")
    memory = {tool: f"{row['peak RSS MiB']:,.0f}" for tool, row in rows.items()}
    assert_quoted(README, "{}", f"fp32 {memory['nmt (ours), fp32']} MiB | fairseq "
                                f"{memory['fairseq 0.12.3.1, fp32']} MiB, Marian {memory['Marian 1.12.42, fp32']} MiB")


def test_the_amd_zen4_training_and_bf16_decoding_figures_are_their_reports() -> None:
    rows = bench_rows("peers-epoch-2026-12-07-amd-zen4.md")
    speed = {tool: row["sentences/s"] for tool, row in rows.items()}
    bf16, fp32 = speed["nmt (ours), bf16 autocast"], speed["nmt (ours), fp32"]
    fairseq, marian = speed["fairseq 0.12.3.1, fp32"], speed["Marian 1.12.42, fp32"]
    assert_quoted(README, "{}", f"bf16 **{bf16 / fairseq:.2f}×** fairseq, fp32 **{fp32 / fairseq:.2f}×**; "
                                f"**{bf16 / marian:.2f}×** and **{fp32 / marian:.2f}×** Marian")
    marian_ratio = rows["Marian 1.12.42, fp32"]["vs fairseq (sentences/s)"]  # of the unrounded speeds
    assert marian_ratio == pytest.approx(marian / fairseq, abs=0.01)
    assert_quoted(README, "{}", f"fairseq 0.12.3 fp32: {fairseq:.1f}; Marian 1.12.42 fp32: {marian:.1f} "
                                f"({marian_ratio:.2f}× fairseq)")
    assert_quoted(PERFORMANCE, "{}", f"ours bf16 autocast {bf16:.1f} sentences/s (**{bf16 / fairseq:.2f}x** fairseq), "
                                     f"ours fp32 {fp32:.1f} (**{fp32 / fairseq:.2f}x**)")
    decode = {tool: cells[PIECES] for tool, cells in bench_rows("peers-decode-2026-12-07-amd-zen4.md").items()}
    ours = [decode["nmt (ours), bf16 autocast" + layout] for layout in ("", ", --workers (one batch per thread)")]
    fastest = [max(pieces for tool, pieces in decode.items() if tool.startswith("CTranslate2")
                   and ("one batch per thread" in tool) == per_thread) for per_thread in (False, True)]
    assert_quoted(README, "{}", f"bf16 {ours[0]:,.0f} and {ours[1]:,.0f} pieces/s (**{ours[0] / fastest[0]:.2f}×** "
                                f"and **{ours[1] / fastest[1]:.2f}×** CTranslate2's fastest type)")
    gemm = (BENCH / "amd-zen4-fp32-2026-12-07" / "shapes-2threads.out").read_text(encoding="utf-8")
    mkl, onednn = (float(re.search(pattern, gemm).group(1)) for pattern in
                   (r"total MKL replay (\d+) ms", r"all-oneDNN mm (\d+) ms"))
    assert_quoted(PERFORMANCE, "{}", f"MKL's products take {mkl:.0f} ms an update, {onednn:.0f} with oneDNN's linear")
    epoch = json.loads((BENCH / "peers-epoch-2026-12-07-amd-zen4.json").read_text(encoding="utf-8"))
    step = 1000 / epoch["ours-fp32"]["train"]["updates_per_s"]
    assert_quoted(PERFORMANCE, "{}", f"The update takes {step:,.0f} ms in the epoch run: a step of MKL's matmuls "
                                     f"alone ({mkl:.0f} ms) would make {fp32 / fairseq * step / mkl:.2f}x fairseq, "
                                     f"of oneDNN's ({onednn:.0f} ms) {fp32 / fairseq * step / onednn:.2f}x")


def amd_decoding_quotes(name: str) -> list[str]:
    """What the README says of an AMD (AVX2 or Zen 4) decoding report ``name``: ours against CTranslate2's best type
    of the same precision in both layouts, against fairseq, and CTranslate2's backends (MKL forced against its
    default)."""
    rows = {tool: cells[PIECES] for tool, cells in bench_rows(name).items()}

    def best(kind: str, per_thread: bool, mkl: bool | None = None) -> float:
        return max(speed for tool, speed in rows.items() if tool.startswith("CTranslate2")
                   and (tool.split(",")[1].strip() == "float32" if kind == "float32" else "int8" in tool)
                   and ("one batch per thread" in tool) == per_thread
                   and (mkl is None or ("MKL forced" in tool) == mkl))

    ours = {(kind, per_thread): rows[f"nmt (ours), {kind}" + (", --workers (one batch per thread)" if per_thread
                                                                else "")]
            for kind in ("fp32", "int8") for per_thread in (False, True)}
    versus = [f"{ours[('fp32', t)] / best('float32', t):.2f}" for t in (False, True)]
    versus_int8 = [f"{ours[('int8', t)] / best('int8', t):.2f}" for t in (False, True)]
    fairseq = {key: f"{speed / rows['fairseq 0.12.3.1, fp32']:.2f}" for key, speed in ours.items()}
    mkl = [best("float32", t, True) / best("float32", t, False) for t in (False, True)]
    int8 = [best("int8", t, True) / best("int8", t, False) for t in (False, True)]
    forced = ", MKL forced (CT2_USE_MKL=1)"
    int8 += [rows[tool] / rows[tool.replace(forced, "")] for tool in rows if forced in tool and "int8" in tool]
    return [f"one batch on both threads: fp32 **{versus[0]}×** CTranslate2's best float32, int8 **{versus_int8[0]}×** "
            f"its best int8; one batch per thread: fp32 **{versus[1]}×**, int8 **{versus_int8[1]}×**",
            f"against fairseq fp32 {fairseq[('fp32', False)]}×, int8 {fairseq[('int8', False)]}× "
            f"(per thread {fairseq[('fp32', True)]}×, {fairseq[('int8', True)]}×)",
            f"float32 {mkl[0]:.2f}× its default with one batch, {mkl[1]:.2f}× per thread; int8 "
            f"{min(int8):.2f}-{max(int8):.2f}×"]


@pytest.mark.parametrize("name", ["peers-decode-2026-12-07-amd-avx2.md",
                                  "peers-decode-2026-12-07-amd-avx2-int8-rows.md",
                                  "peers-decode-2026-12-07-amd-zen4.md"])
def test_the_amd_decoding_ratios_are_their_report(name: str) -> None:
    for quote in amd_decoding_quotes(name):
        assert_quoted(README, "{}", quote)


def test_the_decoding_ratios_are_median_and_range_of_every_run() -> None:
    every = decode_reports("2026-12-0*")
    assert len(every) == 19
    fairseq, ctranslate2 = (spread(list(values)) for values in zip(*(decoding_ratios(name) for name in every)))
    assert_quoted(README, "{}", f"ours bf16 is **{ctranslate2[0]}×** CTranslate2's best type ({ranged(ctranslate2)}) "
                                f"and **{fairseq[0]}×** fairseq ({ranged(fairseq)})")

    first_day = decode_reports("2026-12-01*")
    fairseq, ctranslate2 = (spread(list(values)) for values in zip(*(decoding_ratios(name) for name in first_day)))
    assert_quoted(README, "{}", f"it was {ctranslate2[0]}× CTranslate2 ({ctranslate2[1]}×, n = {ctranslate2[2]}) "
                                     f"and {fairseq[0]}× fairseq ({fairseq[1]}×, n = {fairseq[2]})")
    assert sorted(name for pattern in MACHINES.values() for name in decode_reports(pattern)) == first_day
    for machine, pattern in MACHINES.items():
        _, span, count = spread([decoding_ratios(name)[1] for name in decode_reports(pattern)])
        assert_quoted(README, "{}", f"{machine} {span}× (n = {count})")

    bleu = "test BLEU (tokenized)"
    ours_bleu, fairseq_bleu, ctranslate2_bleu = [], [], []
    for name in first_day:
        rows = bench_rows(name)
        ours_bleu.append(only_row(rows, "nmt (ours), bf16")[bleu])
        fairseq_bleu.append(only_row(rows, "fairseq")[bleu])
        ctranslate2_bleu.append(max((cells for tool, cells in rows.items() if tool.startswith("CTranslate2")
                                     and "one batch per thread" not in tool), key=lambda cells: cells[PIECES])[bleu])
    assert_quoted(README, "{}", "the models' test BLEU there: " + ", ".join(
        f"{who} {min(values):.2f}-{max(values):.2f}" for who, values in
        (("ours", ours_bleu), ("fairseq", fairseq_bleu), ("CTranslate2's best type", ctranslate2_bleu))))

    (other_day,) = decode_reports("2026-12-04*")
    assert_quoted(README, "ours 8.56, CTranslate2 int8 5.32): {}×", f"{decoding_ratios(other_day)[1]:.2f}")

    same_models = decode_reports("2026-12-05*")
    fairseq_ratios, ctranslate2_ratios = zip(*(decoding_ratios(name) for name in same_models))
    fairseq, ctranslate2 = spread(list(fairseq_ratios)), spread(list(ctranslate2_ratios))
    assert_quoted(README, "{}", f"bf16 **{fairseq[0]}×** fairseq ({ranged(fairseq)}), "
                                f"**{ctranslate2[0]}×** CTranslate2's best type ({ranged(ctranslate2)})")
    _, span, count = spread([f / c for f, c in zip(fairseq_ratios, ctranslate2_ratios)])
    assert_quoted(README, "{}", f"CTranslate2 4.8.5's best type: {span}× fairseq (n = {count})")


def test_the_decoding_layouts_recompute() -> None:
    """One batch per thread: ours in threads (s21-workers) and in processes (s22, s22-b) against CTranslate2."""
    quoted = []
    for name in ("peers-decode-2026-12-05-s21-workers.md", "peers-decode-2026-12-05-s22.md",
                 "peers-decode-2026-12-05-s22-b.md"):
        rows = bench_rows(name)
        ours = only_row(rows, "nmt (ours), bf16", per_thread=True)[PIECES]
        fairseq = only_row(rows, "fairseq")[PIECES]
        ctranslate2 = max(cells[PIECES] for tool, cells in rows.items()
                          if tool.startswith("CTranslate2") and "one batch per thread" in tool)
        quoted.append((ours, ours / ctranslate2, ours / fairseq))
    (threads, threads_ct2, _), (first, first_ct2, first_fs), (second, second_ct2, second_fs) = quoted
    assert_quoted(README, "{}", f"in threads (1 run): bf16 {threads:,.0f}, {threads_ct2:.2f}× CTranslate2's best type")
    assert_quoted(README, "{}", f"bf16 **{first:,.0f}** and **{second:,.0f}**, **{first_ct2:.2f}×** and "
                                f"**{second_ct2:.2f}×** CTranslate2's best type, {first_fs:.2f}× and "
                                f"{second_fs:.2f}× fairseq")
    threads_run, first_run, second_run = (bench_rows(f"peers-decode-2026-12-05-{run}.md")
                                          for run in ("s21-workers", "s22", "s22-b"))

    def per_thread(rows: dict[str, dict[str, float]], kind: str) -> str:
        return f"{rows[f'CTranslate2 4.8.5, {kind}, inter_threads (one batch per thread)'][PIECES]:,.0f}"

    fairseq_speeds = ", ".join(f"{rows['fairseq 0.12.3.1, fp32'][PIECES]:,.0f}" for rows in (first_run, second_run))
    assert_quoted(README, "{}", f"CTranslate2 int8 {per_thread(threads_run, 'int8')} (threads run); int8_float32 "
                                f"{per_thread(first_run, 'int8_float32')}, int8 {per_thread(second_run, 'int8')} "
                                f"(process runs); fairseq {fairseq_speeds}")


def serve_summary(values: list[float], digits: int = 1) -> str:
    """``median (min-max)`` as scripts/bench_serve and docs/usage.md write it."""
    return f"{statistics.median(values):,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def serving_row(name: str) -> tuple[str, list[dict[str, Any]]]:
    """The docs/usage.md row of the serving report ``name`` from its JSON rounds (from its link to its last cell),
    and the rounds."""
    rounds = json.loads((BENCH / f"{name}.json").read_text(encoding="utf-8"))["rounds"]
    cli = serve_summary([r["cli"]["sentences_per_s"] for r in rounds])
    count = len(rounds[0]["service"]["levels"])  # the client levels, the largest last
    levels = [serve_summary([r["service"]["levels"][i]["sentences_per_s"] for r in rounds]) for i in range(count)]
    ratio = serve_summary([r["service"]["levels"][-1]["sentences_per_s"] / r["cli"]["sentences_per_s"]
                           for r in rounds], 2)
    return f"(`bench/{name}.md`) | {cli} | {' | '.join(levels)} | {ratio.replace(' (', 'x (')} |", rounds


@pytest.mark.parametrize("workers", [1, 2])
def test_the_amd_avx2_serving_rows_are_their_report(workers: int) -> None:
    """docs/usage.md's rows of ``nmt serve`` on the AMD AVX2 class: every figure from the committed JSON rounds."""
    assert_quoted("docs/usage.md", "{}", serving_row(f"serve-2026-12-07-amd-avx2-workers{workers}")[0])


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_amd_zen4_serving_rows_are_their_report(precision: str) -> None:
    """docs/usage.md's rows of ``nmt serve`` on the AMD Zen 4 class, and how many answers equal the command line's."""
    row, rounds = serving_row(f"serve-2026-12-07-amd-zen4-{precision}")
    assert_quoted("docs/usage.md", "{}", f"{precision} {row}")
    equal = [level["equal_to_cli"] for r in rounds for level in r["service"]["levels"]]
    span = f"{min(equal):,}" if min(equal) == max(equal) else f"{min(equal):,}-{max(equal):,}"
    assert_quoted("docs/usage.md", "{}", f"{precision} answers equal to the command line's: {span} of 1,112")


def equal_answers(rounds: list[dict[str, Any]]) -> str:
    """``979-1,026 of 1,112``: the fewest and most service answers equal to the command line's, over every level."""
    equal = [level["equal_to_cli"] for r in rounds for level in r["service"]["levels"]]
    span = f"{min(equal):,}" if min(equal) == max(equal) else f"{min(equal):,}-{max(equal):,}"
    return f"{span} of 1,112"


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_amd_zen4_second_pass_serving_rows_are_their_report(precision: str) -> None:
    """The 2026-12-08 rows (8 and 64 clients) with their count of answers equal to the command line's."""
    row, rounds = serving_row(f"serve-2026-12-08-amd-zen4-{precision}")
    assert_quoted("docs/usage.md", "{}", f"{precision} {row} {equal_answers(rounds)} |")


def test_the_batch_invariance_ab_is_its_reports() -> None:
    """The before/after service pairs that docs/usage.md and the folder's README quote."""
    folder = BENCH / "batch-invariance-2026-12-08" / "serve-ab"

    def level(name: str) -> tuple[float, float, int]:
        (only,) = json.loads((folder / f"serve-ab-{name}.json").read_text(encoding="utf-8"))["rounds"]
        return only["service"]["levels"][-1]["sentences_per_s"], only["cli"]["sentences_per_s"], \
            only["service"]["levels"][-1]["equal_to_cli"]

    before, after = [level(f"before-{i}") for i in (1, 2)], [level(f"main-{i}") for i in (1, 2)]
    assert_quoted("docs/usage.md", "{}", f"{before[0][0]:.1f} / {before[1][0]:.1f} sentences/s before and "
                                         f"{after[0][0]:.1f} / {after[1][0]:.1f} after")
    readme = "bench/batch-invariance-2026-12-08/README.md"
    assert_quoted(readme, "{}", f"1,112 before, {after[0][2]:,} and {after[1][2]:,} after")
    assert_quoted(readme, "{}", f"{before[0][2]:,} and {before[1][2]:,} of")
    assert_quoted(readme, "{}", f"(command line {before[0][1]:.1f} / {before[1][1]:.1f} and {after[0][1]:.1f} / "
                                f"{after[1][1]:.1f})")


def test_the_decode_route_figures_are_its_runs() -> None:
    """fp32 decoding's own route: the six MKL/route pairs and the CTranslate2 ratios that README.md and
    docs/performance.md quote, from runs.json and one-thread.out."""
    folder = BENCH / "decode-route-2026-12-08"
    runs = json.loads((folder / "runs.json").read_text(encoding="utf-8"))["runs"]

    def rate(name: str) -> float:
        return float(runs[name]["pieces_per_s"])

    layouts = [(layout, r) for layout in ("all", "per") for r in (1, 2)]
    lines = [line.split() for line in (folder / "one-thread.out").read_text(encoding="utf-8").splitlines()]
    after = lines[next(i for i, words in enumerate(lines) if words[:2] == ["#", "after"]) + 1:]
    one: dict[str, list[float]] = {"auto:": [], "mkl:": []}
    for words in after:  # auto: ours fp32 27.29s 22608 pieces 828/s
        one[words[0]].append(float(words[6].removesuffix("/s")))
    pairs = [rate(f"ours-auto-{lay}-{r}") / rate(f"ours-mkl-{lay}-{r}") for lay, r in layouts]
    pairs += [a / m for a, m in zip(one["auto:"], one["mkl:"], strict=True)]
    span = f"{min(pairs):.2f}-{max(pairs):.2f}"
    assert_quoted("docs/performance.md", "{}", f"{span}x, median {statistics.median(pairs):.2f}x ({len(pairs)} pairs)")
    assert_quoted("README.md", "{}", f"{span}× the MKL route (median {statistics.median(pairs):.2f}×, 6 pairs)")
    for layout, words in (("all", "with one batch on both threads"), ("per", "per thread")):
        ratios = [rate(f"ours-auto-{layout}-{r}") / rate(f"ct2-{layout}-{r}") for r in (1, 2)]
        span = f"{min(ratios):.2f}-{max(ratios):.2f}"
        assert_quoted("README.md", "{}", f"**{span}×** CTranslate2's float32 {words}" if layout == "all"
                      else f"**{span}×** {words}")
        assert_quoted("docs/performance.md", "{}", f"{span}x of it with one batch" if layout == "all"
                      else f"batch and {span}x per thread")


def test_the_amd_avx2_serving_comparison_recomputes() -> None:
    """The prose beside those rows: independent processes against one process, and against the command line's."""
    runs = {w: json.loads((BENCH / f"serve-2026-12-07-amd-avx2-workers{w}.json").read_text(encoding="utf-8"))["rounds"]
            for w in (1, 2)}

    def level(workers: int, index: int, key: str = "sentences_per_s") -> float:
        return statistics.median(r["service"]["levels"][index][key] for r in runs[workers])

    gains = [level(2, i) / level(1, i) for i in (2, 1, 0)]
    assert_quoted("docs/usage.md", "{}", f"({gains[0]:.2f}x at 64 clients, {gains[1]:.2f}x at 8, {gains[2]:.2f}x at 1;")
    assert_quoted("docs/usage.md", "{}", f"latency p50 {level(2, 0, 'latency_p50_ms'):.0f} ms against "
                                         f"{level(1, 0, 'latency_p50_ms'):.0f})")
    memory = [f"{level(w, 2, 'peak_rss_mb'):,.0f}" for w in (2, 1)]
    assert_quoted("docs/usage.md", "{}", f"({memory[0]} against {memory[1]} MiB at 64 clients)")
    two = statistics.median(r["cli"]["runs"][1]["sentences_per_s"] for r in runs[2])
    one = statistics.median(r["cli"]["runs"][0]["sentences_per_s"] for r in runs[2])
    assert_quoted("docs/usage.md", "{}", f"at {level(2, 2) / two:.2f}x the rate")
    assert_quoted("docs/usage.md", "{}", f"({level(2, 2):.1f} against {two:.1f} sentences/s for two of each)")
    assert_quoted("docs/usage.md", "{}", f"(`--workers 1` was: {one:.1f} against {two:.1f} sentences/s)")


def _serve_rounds(name: str) -> list[dict[str, Any]]:
    return list(json.loads((BENCH / f"{name}.json").read_text(encoding="utf-8"))["rounds"])


def test_the_similar_length_serving_rows_are_their_reports() -> None:
    """docs/usage.md's rows of the shares of similar lengths (the full run and the 64-client run), from their JSON."""
    full, only64 = "serve-2026-12-07-amd-avx2-similar-lengths", "serve-2026-12-07-amd-avx2-similar-lengths-64"
    light, first = "serve-2026-12-07-amd-avx2-light-sampler", "serve-2026-12-07-amd-avx2-first-line-startup"
    for name, blanks in ((full, ""), (only64, " | |"), (light, ""), (first, "")):
        rounds = _serve_rounds(name)
        cli = serve_summary([r["cli"]["sentences_per_s"] for r in rounds])
        levels = [serve_summary([level["sentences_per_s"] for level in levels])
                  for levels in zip(*(r["service"]["levels"] for r in rounds), strict=True)]
        ratio = serve_summary([r["service"]["levels"][-1]["sentences_per_s"] / r["cli"]["sentences_per_s"]
                               for r in rounds], 2)
        assert_quoted("docs/usage.md", "{}", f"(`bench/{name}.md`) | {cli} |{blanks} {' | '.join(levels)} | "
                                             f"{ratio.replace(' (', 'x (')} |")


def test_the_similar_length_serving_prose_recomputes() -> None:
    """The prose beside those rows: the gains over the run before, the median ratio, the back-to-back pair, the
    last rounds of the 64-client run and the traced round."""
    full, before = _serve_rounds("serve-2026-12-07-amd-avx2-similar-lengths"), _serve_rounds(
        "serve-2026-12-07-amd-avx2-workers2")
    only64 = _serve_rounds("serve-2026-12-07-amd-avx2-similar-lengths-64")

    def level(rounds: list[dict[str, Any]], index: int, key: str = "sentences_per_s") -> float:
        return statistics.median(r["service"]["levels"][index][key] for r in rounds)

    ratios = [r["service"]["levels"][-1]["sentences_per_s"] / r["cli"]["sentences_per_s"] for r in full]
    gains = " / ".join(f"{level(full, i) / level(before, i):.2f}x" for i in (2, 1, 0))
    docs = "docs/usage.md"
    assert_quoted(docs, "{}", f"(the median is {statistics.median(ratios):.3f}, so")
    assert_quoted(docs, "{}", f"and {gains} the previous run's rates at 64 / 8 / 1 clients")
    assert_quoted(docs, "{}", f"(21.4 sentences against {level(before, 2, 'mean_batch'):.1f} in the run before)"
                  .replace("21.4", f"{level(full, 2, 'mean_batch'):.1f}"))
    last = sorted(r["service"]["levels"][0]["sentences_per_s"] / r["cli"]["sentences_per_s"] for r in only64[1:])
    assert_quoted(docs, "{}", f"({last[0]:.2f}-{last[-1]:.2f} over its last three rounds;")
    seconds = [r["cli"]["seconds_total"] for r in only64]
    assert_quoted(docs, "{}", f"took {seconds[0]:.0f} s against {max(seconds[1:]):.0f} s for the others")
    clis = [[r["cli"]["sentences_per_s"] for r in rounds] for rounds in (only64[1:], full)]
    services = [[r["service"]["levels"][-1]["sentences_per_s"] for r in rounds] for rounds in (only64, full)]
    assert_quoted(docs, "{}", f"line ran at {min(clis[0]):.0f}-{max(clis[0]):.0f} sentences/s there against "
                              f"{min(clis[1]):.0f}-{max(clis[1]):.0f} in the full run, the service at "
                              f"{min(services[0]):.1f}-{max(services[0]):.1f} against "
                              f"{min(services[1]):.1f}-{max(services[1]):.1f}")
    pair = {name: _serve_rounds(f"serve-lanes-2026-12-07/ab-{name}")[0]
            for name in ("similar-lengths", "independent-batches")}
    new, old = (pair[name]["service"]["levels"][0] for name in ("similar-lengths", "independent-batches"))
    new_cli, old_cli = (pair[name]["cli"]["sentences_per_s"] for name in ("similar-lengths", "independent-batches"))
    fast, slow = new["sentences_per_s"], old["sentences_per_s"]
    assert_quoted(docs, "{}", f"it served {fast / slow:.2f}x the sentences/s of independent batches ({fast:.1f} "
                              f"against {slow:.1f}; {fast / new_cli:.2f}x and {slow / old_cli:.2f}x of their command "
                              f"lines, {new_cli:.1f} and {old_cli:.1f};")
    assert_quoted(docs, "{}", f"p50 latency {new['latency_p50_ms']:,.0f} ms against {old['latency_p50_ms']:,.0f}, p99 "
                              f"{new['latency_p99_ms']:,.0f} ms against {old['latency_p99_ms']:,.0f}")


def test_the_traced_round_recomputes() -> None:
    """The traced round's lane figures (docs/usage.md) from the committed trace and run."""
    folder = BENCH / "serve-lanes-2026-12-07"
    decodes = [line.split() for line in (folder / "batcher-trace.txt").read_text(encoding="utf-8").splitlines()
               if " decode " in line]
    ends = [float(d[0]) + float(d[3][:-2]) / 1000 for d in decodes]
    busy = sum(float(d[3][:-2]) for d in decodes) / 1000
    wall = max(ends) - min(float(d[0]) for d in decodes)
    rate = sum(int(d[2]) for d in decodes) / busy
    run = _serve_rounds("serve-lanes-2026-12-07/trace-run")[0]
    per_thread = run["cli"]["sentences_per_s"] / 2
    assert_quoted("docs/usage.md", "{}", f"(`trace-run.md` there, "
                  f"{run['service']['levels'][0]['sentences_per_s'] / run['cli']['sentences_per_s']:.2f}x) the two "
                  f"decoding processes were busy {busy / (2 * wall):.0%} of the time and decoded {rate:.1f} sentences "
                  f"per busy second each, against {per_thread:.1f} per thread for that round's command line "
                  f"({rate / per_thread:.2f}x)")


def test_the_batch_surface_and_simulation_figures_are_their_outputs() -> None:
    """docs/usage.md's batch rates and fitted step cost, from the committed outputs."""
    folder = BENCH / "serve-lanes-2026-12-07"
    rates = {" ".join(line.split("sent/s")[0].split()[:-1]): float(line.split("sent/s")[0].split()[-1])
             for line in (folder / "batch_surface.out").read_text(encoding="utf-8").splitlines()}
    assert_quoted("docs/usage.md", "{}", f"length-sorted batches of 16 decode faster than random ones of 32 "
                                         f"({rates['sorted 16']:.1f} against {rates['random 32']:.1f} sentences/s)")
    fit = (folder / "scheduler_sim.out").read_text(encoding="utf-8").splitlines()[0].split()
    assert_quoted("docs/usage.md", "{}", f"({fit[2]} ms on one thread in the fitted model, against "
                                         f"{float(fit[5]):.2f} ms per live sentence;")


def test_the_lane_batch_costs_recompute() -> None:
    """docs/usage.md's per-thread rates of sorted and random batches of 32, from the committed output."""
    rates: dict[str, list[float]] = {}
    for line in (BENCH / "serve-lanes-2026-12-07" / "lane_batches.out").read_text(encoding="utf-8").splitlines():
        words = line.split()
        rates.setdefault(" ".join(words[2:5]), []).append(float(words[-6]))
    cli = rates["command line (token"]
    ratios = {kind: sorted(r / c for r, c in zip(rates[f"{kind} batches of"], cli, strict=True))
              for kind in ("sorted", "random")}
    sort, mixed = (f"{ratios[kind][0]:.2f}-{ratios[kind][-1]:.2f}x" for kind in ("sorted", "random"))
    assert_quoted("docs/usage.md", "{}", f"batches of 32 decode at {sort} the command line's rate and random ones at "
                                         f"{mixed}")


def test_the_sampler_comparison_recomputes() -> None:
    """docs/usage.md's figures on what the old memory sampler cost, from the committed A/B rounds."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sampler_summary", BENCH / "serve-sampler-2026-12-07" / "summary.py")
    assert spec is not None and spec.loader is not None
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    table = summary.rates()

    def ratios(side: str, sampler: str) -> list[float]:
        runs = table[side, sampler]
        return [runs[key] / table[side, "none"][key] for key in runs]

    cli = ratios("translate --workers 1", "walk-every-sample")
    assert len(cli) == 7 and max(cli) < 1  # slower in every round
    docs = "docs/usage.md"
    serve = statistics.median(ratios("serve 64 clients", "walk-every-sample"))
    light = statistics.median(ratios("translate --workers 1", "tree-cached"))
    assert_quoted(docs, "{}", f"to {statistics.median(cli):.2f}x in the median of 7 rounds "
                              f"({min(cli):.2f}-{max(cli):.2f}x)")
    serves, lights = ratios("serve 64 clients", "walk-every-sample"), ratios("translate --workers 1", "tree-cached")
    assert_quoted(docs, "{}", f"did not measurably change ({serve:.2f}x, {min(serves):.2f}-{max(serves):.2f})")
    assert_quoted(docs, "{}", f"({light:.2f}x, {min(lights):.2f}-{max(lights):.2f}, of no sampler")
    rounds = _serve_rounds("serve-2026-12-07-amd-avx2-light-sampler")
    ratio = serve_summary([r["service"]["levels"][-1]["sentences_per_s"] / r["cli"]["sentences_per_s"]
                           for r in rounds], 2)
    assert_quoted(docs, "{}", f"gives **{ratio.replace(' (', 'x (')} at 64 clients**")
    client = table["serve 64 clients client cpu", "walk-every-sample"].values()
    assert_quoted(docs, "{}", f"~{statistics.median(client):.1f} s of CPU time per 64-client level")
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        summary.main()
    assert printed.getvalue() == (BENCH / "serve-sampler-2026-12-07" / "summary.out").read_text(encoding="utf-8")


def test_the_shared_weights_comparison_recomputes() -> None:
    """The per-round ratio of the shared-weights patch to the code before (docs/usage.md) from its committed rounds."""
    import re

    rates: dict[int, dict[str, float]] = {}
    for line in (BENCH / "serve-shared-weights-2026-12-07" / "tree_ab.out").read_text(encoding="utf-8").splitlines():
        match = re.match(r"round (\d+) (before|shared)\s+64 clients: ([\d.]+) sentences/s", line)
        if match:
            rates.setdefault(int(match[1]), {})[match[2]] = float(match[3])
    ratios = [pair["shared"] / pair["before"] for pair in rates.values()]
    assert len(ratios) == 6
    quoted = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) per round"
    assert_quoted("docs/usage.md", "{}", quoted)
    assert_quoted("bench/serve-shared-weights-2026-12-07/README.md", "{}",
                  quoted.replace(") per round", ", n = 6)"))


def test_the_first_line_startup_prose_recomputes() -> None:
    """docs/usage.md's start-up seconds and command-line rates of the run whose start-up was taken on one line."""
    rounds = _serve_rounds("serve-2026-12-07-amd-avx2-first-line-startup")
    runs = {workers: [r["cli"]["runs"][index] for r in rounds] for index, workers in enumerate((1, 2))}
    assert all(run["workers"] == workers for workers in runs for run in runs[workers])
    startup = {w: [run["seconds_startup"] for run in runs[w]] for w in runs}
    rates = {w: statistics.median(run["sentences_per_s"] for run in runs[w]) for w in runs}
    ratio = serve_summary([r["service"]["levels"][-1]["sentences_per_s"] / r["cli"]["sentences_per_s"]
                           for r in rounds], 2)
    assert_quoted("docs/usage.md", "{}", f"({min(startup[2]):.1f}-{max(startup[2]):.1f} s of start-up with "
                                         f"`--workers 2` against {min(startup[1]):.1f}-{max(startup[1]):.1f} s")
    assert_quoted("docs/usage.md", "{}", f"are level ({rates[2]:.1f} against {rates[1]:.1f} sentences/s)")
    assert_quoted("docs/usage.md", "{}", f"still gives **{ratio.replace(' (', 'x (')}**")


def test_the_int8_rows_records_recompute() -> None:
    """The per-row int8 change's figures (docs/performance.md, docs/usage.md, the README beside the rounds) from its
    committed A/B rounds, layer errors and service runs."""
    summary = recomputed_summary("int8-rows-2026-12-07")
    readme = "bench/int8-rows-2026-12-07/README.md"

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}, n = {len(values)})"

    one_whole = spread(summary.ratios("ab_1thread.out", "sentences_per_s"))
    two_whole = spread(summary.ratios("ab_2threads.out", "sentences_per_s"))
    one_small = spread(summary.ratios("ab_1thread.out", "sorted21_sentences_per_s"))
    for document in ("docs/performance.md", readme):
        assert_quoted(document, "{}", one_whole)
        assert_quoted(document, "{}", two_whole)
        assert_quoted(document, "{}", one_small)
    for figure in (one_whole, one_small):
        assert_quoted("docs/usage.md", "{}", figure.split(", n =")[0] + ")")
    equal = {(new["alone_equal_64"], old["alone_equal_64"]) for name in ("ab_1thread.out", "ab_2threads.out")
             for new, old in summary.pairs(name)}
    assert len(equal) == 1
    (new_equal, old_equal), = equal
    assert_quoted("docs/performance.md", "{}",
                  f"lines equal alone and in the file {new_equal} of 64 ({old_equal} before)")
    assert_quoted("docs/performance.md", "{}", f"{64 - old_equal} of the first 64 test lines translated differently")
    tensor, change = summary.layer_errors()
    assert_quoted("docs/performance.md", "{}", f"errs {statistics.mean(change):.4f} on average against "
                                              f"{statistics.mean(tensor):.4f}")
    runs = {side: _serve_rounds(f"int8-rows-2026-12-07/serve-{side}") for side in ("per-tensor", "per-row")}
    equal_cli = {side: min(r["service"]["levels"][-1]["equal_to_cli"] for r in rounds) for side, rounds in runs.items()}
    assert_quoted("docs/usage.md", "{}", f"differ from the command line's for {equal_cli['per-tensor']:,} of the 1,112")
    assert_quoted("docs/usage.md", "{}", f"and {equal_cli['per-row']:,} of 1,112 answers are the command line's")
    assert_quoted("docs/performance.md", "{}", f"service answers equal {equal_cli['per-row']:,} of 1,112")
    service = {side: [r["service"]["levels"][-1]["sentences_per_s"] for r in rounds] for side, rounds in runs.items()}
    bar = {side: [r["cli"]["sentences_per_s"] for r in rounds] for side, rounds in runs.items()}
    ratio = {side: serve_summary([s / c for s, c in zip(service[side], bar[side], strict=True)], 2) for side in runs}
    assert_quoted("docs/usage.md", "{}", f"{serve_summary(service['per-row'])} sentences/s at 64 clients, "
                                         f"{ratio['per-row'].replace(' (', 'x (')} of its command line "
                                         f"({statistics.median(bar['per-row']):.1f} sentences/s; before: "
                                         f"{statistics.median(service['per-tensor']):.1f}, "
                                         f"{ratio['per-tensor'].split(' ')[0]}x)")
    assert_quoted(readme, "{}", f"per tensor {serve_summary(service['per-tensor'])} sentences/s, "
                                f"{ratio['per-tensor'].replace(' (', 'x (')} of its command line; per row "
                                f"{serve_summary(service['per-row'])}, {ratio['per-row'].replace(' (', 'x (')}")
    after = bench_rows("peers-decode-2026-12-07-amd-avx2-int8-rows.md")
    before = bench_rows("peers-decode-2026-12-07-amd-avx2.md")

    def pieces(rows: dict[str, dict[str, float]], per_thread: bool) -> tuple[str, str]:
        """Ours int8 and CTranslate2's best int8 type, output pieces/s, in one layout."""
        layout = ("one batch per thread" in tool for tool in rows)
        ct2 = max(row[PIECES] for (tool, row), own in zip(rows.items(), layout, strict=True)
                  if tool.startswith("CTranslate2") and "int8" in tool and own == per_thread)
        ours = rows["nmt (ours), int8" + (", --workers (one batch per thread)" if per_thread else "")][PIECES]
        return f"{ours:,.0f}", f"{ct2:,.0f}"

    (one, one_ct2), (per, per_ct2), (old_per, old_ct2) = pieces(after, False), pieces(after, True), pieces(before, True)
    assert_quoted("docs/performance.md", "{}", f"ours int8 {one} output pieces/s with one batch on both threads "
                                              f"against CTranslate2's best int8 {one_ct2}")
    assert_quoted("docs/performance.md", "{}", f"{per} with one batch per thread against {per_ct2}")
    assert_quoted("docs/performance.md", "{}", f"before; ours {old_per} then, CTranslate2 {old_ct2})")
    bleu = {kind: after[f"nmt (ours), {kind}"]["test BLEU (tokenized)"] for kind in ("fp32", "int8")}
    assert_quoted(README, "{}", f"test BLEU ours {bleu['fp32']:.2f} fp32, {bleu['int8']:.2f} int8")


def test_the_small_decoding_costs_records_recompute() -> None:
    """The measured-and-left decoding costs (docs/performance.md, round four on the AVX2 class): the A/B ratios and
    the profile rows recompute from the committed rounds and profiles, and both documents quote them."""
    summary = recomputed_summary("decode-small-costs-2026-12-07")
    readme = "bench/decode-small-costs-2026-12-07/README.md"
    for name in ("ab_sorted21.out", "ab_b64.out"):
        figure = summary.describe(summary.speedups(name))
        for document in ("docs/performance.md", readme):
            assert_quoted(document, "**{}**", figure)
    before = summary.profile_row("ops_before.out", "aten::addmm", "[[3900], [84, 256]")
    after = summary.profile_row("ops_after.out", "aten::addmm", "[[3904], [84, 256]")
    assert before is not None and after is not None
    assert_quoted(readme, "{}", f"took {after[1]:,.0f} us a call against {before[1]:,.0f} us")
    for document in ("docs/performance.md", readme):
        assert_quoted(document, "only {}x faster" if document.startswith("docs") else "({}x, not",
                      f"{before[1] / after[1]:.2f}")
    two, one = summary.budget_rates("budget_2t.out"), summary.budget_rates("budget_1t.out")
    for rates in (two, one):
        for budget, values in rates.items():
            assert_quoted(readme, "{}", f"{budget} **{statistics.median(values):.1f}**")
    assert max(two, key=lambda budget: statistics.median(two[budget])) == 8000  # the default stays: it is fastest
    quoted = ", ".join(f"{statistics.median(two[b]):.1f}" for b in (8000, 4000))
    assert_quoted("docs/performance.md", "fastest measured on both threads with the lanes paused ({})",
                  f"{quoted.split(', ')[0]} sentences/s against {quoted.split(', ')[1]} at 4000 and "
                  f"{statistics.median(two[1000]):.1f} at 1000, medians of 3 rounds")
    eight, four, one_thousand = (f"{min(two[b]):.1f}-{max(two[b]):.1f}" for b in (8000, 4000, 1000))
    ranges = f"{eight}, {four} and {one_thousand}"
    assert_quoted("docs/performance.md", "medians of 3 rounds) with ranges {} over those rounds", ranges)
    tiny, real = summary.step_ms("overhead_tiny.out"), summary.step_ms("overhead_real.out")
    for document in ("docs/performance.md", readme):
        assert_quoted(document, "{} ms", f"{min(tiny):.1f}-{max(tiny):.1f}")
        assert_quoted(document, "{} ms", f"{min(real):.1f}-{max(real):.1f}")
