"""scripts/bench_serve drives a real ``nmt serve`` and a real ``nmt translate`` on the same sentences: every served
answer is compared with the command line's, each client level reports its throughput, latencies and memory, and the
report's ratio is the one its JSON holds. (A smoke run on a tiny model; the figures themselves are benchmarks.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import load_script
from tests.test_translate import synthetic_sentences, tiny_checkpoint

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_serve"


def test_bench_serve_measures_both_sides_on_the_same_sentences(tmp_path: Path) -> None:
    checkpoint = tiny_checkpoint(tmp_path)
    source = tmp_path / "input.txt"
    source.write_text("\n".join(synthetic_sentences(10, seed=3)) + "\n", encoding="utf-8")
    out = tmp_path / "bench" / "serve-test"
    run = subprocess.run([sys.executable, str(SCRIPT), "--checkpoint", str(checkpoint), "--input", str(source),
                          "--reference", str(source), "--pretokenized", "--precision", "fp32", "--clients", "1", "4",
                          "--rounds", "2", "--workers", "2", "--out", str(out)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", "NMT_ALLOCATOR": "system"})
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.with_suffix(".json").read_text())
    assert [r["order"] for r in result["rounds"]] == ["command line first", "service first"]
    for record in result["rounds"]:
        cli = record["cli"]
        assert [run["workers"] for run in cli["runs"]] == [1, 2]  # the bar: the faster command line
        assert cli["sentences_per_s"] == max(run["sentences_per_s"] for run in cli["runs"])
        assert cli["seconds_total"] > 0 and cli["seconds_startup"] > 0 and cli["peak_rss_mb"] > 50
        # decoding = the run minus a run of the first line alone (on 10 tiny sentences both are mostly start-up)
        assert cli["seconds_decoding"] == max(cli["seconds_total"] - cli["seconds_startup"], 1e-9)
        assert cli["sentences_per_s"] == 9 / cli["seconds_decoding"]
        assert [level["clients"] for level in record["service"]["levels"]] == [1, 4]
        for level in record["service"]["levels"]:
            assert level["equal_to_cli"] == 10  # fp32: a sentence decodes the same alone or in a batch
            assert 0 < level["latency_p50_ms"] <= level["latency_p99_ms"] <= level["latency_max_ms"]
            assert level["peak_rss_mb"] > 50
    ratios = sorted(r["service"]["levels"][-1]["sentences_per_s"] / r["cli"]["sentences_per_s"]
                    for r in result["rounds"])
    text = out.with_suffix(".md").read_text()
    assert f"range {ratios[0]:.2f}-{ratios[1]:.2f}x, n = 2" in text and "| 10 of 10 |" in text
    assert "| nmt translate --workers 1 (" in text and "| nmt translate --workers 2 (" in text
    assert "torch" in result["meta"]["machine_line"] and result["meta"]["bleu_tokenized"] is not None


def test_bench_serve_names_a_missing_checkpoint(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--checkpoint", str(tmp_path / "none.pt"),
                          "--input", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and run.stderr.strip() == f"bench_serve: {tmp_path / 'none.pt'}: no such file"


def test_peak_memory_sums_the_tree_and_finds_a_process_started_later() -> None:
    """The sampler walks /proc only now and then: a grandchild started after it holds 300 MiB and is still counted."""
    bench = load_script("bench_serve")
    grandchild = ("import time; block = bytearray(300 * 2**20); block[::4096] = b'x' * len(block[::4096]); "
                  "time.sleep(1.5)")
    child = (f"import subprocess, sys, time; time.sleep(0.3); subprocess.run([sys.executable, '-c', {grandchild!r}])")
    process = subprocess.Popen([sys.executable, "-c", child])
    memory = bench.PeakMemory(process.pid, interval=0.02, tree_every=0.1)
    process.wait(timeout=60)
    peak = memory.stop()
    assert peak > 300 + 2 * 5  # the block plus two interpreters
    assert bench.rss_mb(process.pid) == 0.0  # an exited process counts nothing, and raises nothing
    assert os.getpid() in bench.process_tree(os.getpid())


def test_bench_serve_needs_two_lines(tmp_path: Path) -> None:
    source = tmp_path / "one.txt"
    source.write_text("Ola .\n", encoding="utf-8")
    run = subprocess.run([sys.executable, str(SCRIPT), "--checkpoint", str(SCRIPT), "--input", str(source)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip() == (f"bench_serve: {source}: 1 line(s); the command line's start-up takes the first, "
                                  "so at least 2 are needed")
