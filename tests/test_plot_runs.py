"""``scripts/plot_runs``: dev BLEU of several runs against step or wall-clock minutes, from their metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script


def script() -> ModuleType:
    return load_script("plot_runs")


def write_run(directory: Path, points: list[tuple[int, float, float]]) -> Path:
    directory.mkdir(parents=True)
    lines = [{"step": s, "train_seconds": t, "bleu": b, "dev_loss": 4.0} for s, t, b in points]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return directory


def test_curves_against_minutes_and_steps(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot_runs = script()
    a = write_run(tmp_path / "a", [(400, 120.0, 3.5), (800, 300.0, 10.0)])
    b = write_run(tmp_path / "b", [(400, 90.0, 2.0)])
    assert plot_runs.read_curve(a / "metrics.jsonl", "train_seconds", 60.0) == [[2.0, 3.5], [5.0, 10.0]]
    assert plot_runs.read_curve(a / "metrics.jsonl", "step", 1.0) == [[400.0, 3.5], [800.0, 10.0]]
    out = tmp_path / "curves.png"
    assert plot_runs.main([str(a), f"{b}=other", "--x", "minutes", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_metrics_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot_runs = script()
    run = write_run(tmp_path / "a", [(400, 120.0, 3.5)])
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"step": 800, "bleu": 4.0}\n')  # no train_seconds
    assert plot_runs.main([str(run), "--x", "minutes", "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics.jsonl line 2" in err and "'train_seconds'" in err
    assert not (tmp_path / "x.png").exists()
