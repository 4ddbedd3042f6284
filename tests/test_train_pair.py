"""``scripts/train_pair`` (``make train``): its ``--set`` overrides (``make train SET=...``) reach the run's config,
and a bad one is a one-line error before any data is prepared."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("override, message", [
    ("train.no_such_key=1", "train.no_such_key"),
    ("train.test_average=3", "'train.test_average': averaging the last 3 checkpoints needs train.save_every"),
])
def test_bad_override_is_one_line_before_preparing(tmp_path: Path, override: str, message: str) -> None:
    data = tmp_path / "data"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_pair"), "--pair", "gl-en", "--scale", "cpu",
                             "--data-dir", str(data), "--from-dir", str(tmp_path / "nowhere"), "--set", override],
                            capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                                  os.environ.get("PYTHONPATH")]))})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and message in result.stderr
    assert not data.exists()  # nothing prepared


def test_make_train_passes_set_through() -> None:
    dry = subprocess.run(["make", "-n", "train", "PAIR=gl-en", "SET=train.max_minutes=120 train.save_every=400",
                          "STAMP="], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "--set train.max_minutes=120 --set train.save_every=400" in dry.stdout
