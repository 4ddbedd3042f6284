"""``scripts/reproduce`` end to end on the synthetic task: prepare → train → test → record for two systems x two
seeds, the report from the records, a rerun that neither trains nor decodes again, and --report-only without the run
directories."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml

from nmt.checkpoint.files import load_checkpoint, save_checkpoint
from nmt.experiments.pipeline import RunSpec, finished, train_run
from nmt.experiments.published import BASELINE
from nmt.metrics import tokenized_bleu
from tests.scripts import load_script
from tests.synthetic import tiny_config, write_corpus

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

pytest.importorskip("matplotlib")


def load_reproduce() -> ModuleType:
    return load_script("reproduce", "reproduce_script")


def setup_dirs(tmp_path: Path) -> list[str]:
    """Synthetic corpus under a shared root, a tiny xx-yy-cpu.yaml config; returns the driver's arguments."""
    write_corpus(tmp_path / "shared" / "xx-yy", {"train": 300, "dev": 12, "test": 16})
    tree = tiny_config(tmp_path / "unused", tmp_path / "unused", max_steps=20, eval_every=10, log_every=10)
    tree["data"]["bpe_size"] = 48
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "xx-yy-cpu.yaml").write_text(yaml.safe_dump(tree), encoding="utf-8")
    return ["--pairs", "xx-yy", "--systems", f"{BASELINE} qknorm", "--scale", "cpu", "--device", "cpu",
            "--data-dir", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs"),
            "--results-dir", str(tmp_path / "results"), "--from-dir-root", str(tmp_path / "shared"),
            "--config-dir", str(tmp_path / "configs"), "--bootstrap-samples", "100"]


@pytest.mark.slow
def test_reproduce_two_seeds_records_and_report_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two systems x two seeds: mean ± sd rows, the across-seed test, one record per run; a rerun neither trains nor
    decodes; --report-only after deleting the run directories rebuilds the same tables."""
    script = load_reproduce()
    args = [*setup_dirs(tmp_path), "--seeds", "1", "2", "--max-steps", "20", "--shuffles", "200"]
    assert script.main(args) == 0
    out = tmp_path / "results" / "cpu-xx-yy"
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [(r["system"], r["seed"], r["status"]) for r in results["runs"]] == [
        (BASELINE, 1, "recorded"), ("qknorm", 1, "recorded"), (BASELINE, 2, "recorded"), ("qknorm", 2, "recorded")]
    for run in results["runs"]:
        assert run["training"]["steps"] == 20 and run["training"]["train_seconds"] > 0
        assert [step for step, _ in run["dev_curve"]] == [10, 20]
        assert run["config"]["train"]["seed"] == run["seed"] and run["config"]["train"]["max_minutes"] == 0
        assert run["machines"] and "torch" in run["machines"][0]
        record = json.loads((out / "runs" / run["name"] / "record.json").read_text(encoding="utf-8"))
        seconds = record["dev_curve_seconds"]  # dev BLEU against wall time, beside the steps
        assert len(seconds) == 2 and 0 < seconds[0] < seconds[1] <= record["train_seconds"] + 0.1
        hyps = (out / "runs" / run["name"] / "test.hyp").read_text(encoding="utf-8").splitlines()
        refs = (tmp_path / "data" / "xx-yy" / "raw" / "test.yy").read_text(encoding="utf-8").splitlines()
        assert record["test"]["test_bleu_tokenized"] == pytest.approx(tokenized_bleu(hyps, refs))  # recomputes
        assert record["test"]["sacrebleu_signature"].startswith("nrefs:1")
    seeds = {r["seed"]: r["test"]["test_bleu_tokenized"] for r in results["runs"] if r["system"] == "qknorm"}
    first, second = (load_checkpoint(tmp_path / "runs" / f"xx-yy-cpu-qknorm-s{seed}" / "checkpoint_last.pt")["model"]
                     for seed in (1, 2))
    assert any(not torch.equal(first[key], second[key]) for key in first)  # the seed reached training
    qknorm = results["groups"][1]
    assert qknorm["system"] == "qknorm" and qknorm["tokenized_bleu"]["n"] == 2
    assert qknorm["tokenized_bleu"]["mean"] == pytest.approx((seeds[1] + seeds[2]) / 2)
    assert qknorm["tokenized_bleu"]["sd"] == pytest.approx(abs(seeds[1] - seeds[2]) / 2 ** 0.5)
    across = qknorm["across_seeds"]
    assert 0.0 < across["randomization"]["p_value"] <= 1.0 and across["randomization"]["runs"] == [2, 2]
    assert across["interval"]["low"] <= across["interval"]["difference"] <= across["interval"]["high"]
    assert results["runs"][1]["significance"]["baseline_seed"] == 1
    assert (out / "dev_bleu_xx-yy.png").read_bytes()[:8] == PNG_MAGIC
    assert (out / "gains_xx-yy-qknorm-s2.png").read_bytes()[:8] == PNG_MAGIC
    table = (out / "results.md").read_text(encoding="utf-8")
    assert "| xx-yy | qknorm | " in table and "(n=2)" in table

    runs = tmp_path / "runs"
    stamps = {p: p.stat().st_mtime_ns for p in [*runs.rglob("*"), *out.rglob("record.json")]
              if p.suffix in {".pt", ".json", ".hyp"}}
    capsys.readouterr()
    assert script.main(args) == 0  # recorded runs: no training, no decoding, records untouched
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert "recorded already" in capsys.readouterr().err

    # the checkpoint says whether the run finished: not after an interrupt, nor for another config
    run_dir = runs / "xx-yy-cpu-qknorm-s1"
    payload = load_checkpoint(run_dir / "checkpoint_last.pt")
    assert payload["progress"]["stopped"] == "reached train.max_steps=20"
    assert finished(run_dir, payload["config"])
    assert finished(run_dir, {**payload["config"], "train": {**payload["config"]["train"], "progress": False}})
    assert not finished(run_dir, {**payload["config"], "system": BASELINE})
    save_checkpoint(run_dir / "checkpoint_last.pt", {**payload, "progress": {**payload["progress"], "stopped": ""}})
    assert not finished(run_dir, payload["config"])

    shutil.rmtree(runs)  # the checkpoints are gone: the records alone rebuild the report
    before = table
    assert script.main([*args, "--report-only"]) == 0
    after = (out / "results.md").read_text(encoding="utf-8")
    strip = [line for line in before.splitlines() if not line.startswith("Scale:")]
    assert [line for line in after.splitlines() if not line.startswith("Scale:")] == strip
    again = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert again["groups"] == results["groups"]


def test_missing_config_fails_before_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = load_reproduce()
    args = setup_dirs(tmp_path)
    assert script.main([*args, "--pairs", "zz-yy"]) == 2
    err = capsys.readouterr().err
    assert "no config" in err and "zz-yy-cpu.yaml" in err and "available: xx-yy-cpu" in err
    assert not (tmp_path / "data").exists() and not (tmp_path / "runs").exists()


def test_changed_config_trains_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run finished with another config does not stop training (the run is resumed instead)."""
    setup_dirs(tmp_path)
    spec = RunSpec("xx-yy", "qknorm", "cpu", "cpu", str(tmp_path / "data"), None, str(tmp_path / "runs"),
                   str(tmp_path / "configs"))
    spec.save_dir.mkdir(parents=True)
    (spec.save_dir / "checkpoint_best.pt").write_bytes(b"")
    save_checkpoint(spec.save_dir / "checkpoint_last.pt",
                    {"model": {}, "config": {"other": 1}, "progress": {"stopped": "reached train.max_steps=20"}})
    calls: list[list[str]] = []

    class Child:
        def __init__(self, command: list[str], **_: object) -> None:
            calls.append(command)

        def wait(self) -> int:
            return 1

    monkeypatch.setattr("subprocess.Popen", Child)
    with pytest.raises(Exception, match="exited with status 1"):
        train_run(spec)
    assert calls and "--resume" in calls[0]


@pytest.mark.parametrize("status", [130, 143, -int(signal.SIGINT), -int(signal.SIGTERM)])
def test_a_trainer_stopped_by_a_signal_stops_the_driver_before_the_next_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], status: int) -> None:
    """A trainer told to stop (`kill -INT` or `-TERM` of it alone, or a Ctrl-C the driver did not see: a driver
    started in the background ignores SIGINT) ends the campaign's driver with 130, not as a failed run followed by
    the next seed; any other status is a failure and the driver goes on to the next run."""
    script = load_reproduce()
    calls: list[list[str]] = []

    class Child:
        def __init__(self, command: list[str], **_: object) -> None:
            calls.append(command)

        def wait(self) -> int:
            return status

    monkeypatch.setattr("subprocess.Popen", Child)
    args = [*setup_dirs(tmp_path), "--seeds", "1", "2", "--max-steps", "20"]
    assert script.main(args) == 130
    assert len(calls) == 1  # the first run only: the second seed never started
    err = capsys.readouterr().err
    assert "interrupted; rerun the same command" in err and "exited with status" not in err

    status = 1  # a crash, by contrast, is counted and the next runs go on
    calls.clear()
    parsed = script.parse_args(args)
    failures = script.run_all(script.make_specs(parsed, script.resolve_scale(parsed.scale)), tmp_path / "out")
    assert len(calls) == len(failures) == 4  # two systems x two seeds, each started and failing
    assert all("exited with status 1" in line for line in failures)


def _sigint_as_a_terminal_gives_it() -> None:
    """In the driver before exec: SIGINT's default action. A shell starts background jobs with SIGINT ignored,
    and Python then installs no KeyboardInterrupt handler; under a backgrounded ``make test`` the driver ignored the
    Ctrl-C that this test sends (its training child, which sets its own handler, stopped)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_during_training_exits_130_with_one_line_and_a_checkpoint(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: the training child saves checkpoint_last.pt, and the driver says so
    in one line (no traceback) and exits 130."""
    args = setup_dirs(tmp_path)
    config = tmp_path / "configs" / "xx-yy-cpu.yaml"
    tree = yaml.safe_load(config.read_text(encoding="utf-8"))
    tree["train"].update(max_steps=100000, eval_every=100000, log_every=1)
    config.write_text(yaml.safe_dump(tree), encoding="utf-8")
    driver = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "reproduce"), *args], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=_sigint_as_a_terminal_gives_it)
    deadline = time.monotonic() + 180
    while not any(" step 2 | " in log.read_text(encoding="utf-8") for log in (tmp_path / "runs").rglob("train.log")):
        assert driver.poll() is None and time.monotonic() < deadline, "training never started"
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGINT)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.rstrip().splitlines()[-1] == "error: interrupted; rerun the same command to resume from " \
                                               "checkpoint_last.pt"
    assert list((tmp_path / "runs").rglob("checkpoint_last.pt"))
