"""A run directory in use is refused, a killed run's lock never blocks, and a full disk stops a run in one line with
its last checkpoint intact and resumable."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import nmt.training.loop
import nmt.training.resume
from nmt import cli
from nmt.checkpoint.files import load_checkpoint
from nmt.config import config_from_dict
from nmt.errors import NmtError
from nmt.training.run_lock import LOCK_NAME, RunLock
from tests.synthetic import prepare_synthetic, tiny_config

HOLD = "import sys, time; from pathlib import Path; from nmt.training.run_lock import RunLock; " \
       "lock = RunLock(Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(60)"


def test_a_held_lock_refuses_and_a_killed_holder_leaves_none(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(NmtError, match=f"is in use by another nmt train \\(pid {holder.pid}\\)"):
            RunLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / LOCK_NAME).exists()  # the file stays, the lock does not
    RunLock(tmp_path).acquire().release()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("safety"), {"train": 300, "dev": 10, "test": 10})


@pytest.mark.slow
def test_a_second_trainer_on_a_live_run_is_refused(data: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    tree = tiny_config(data, tmp_path / "run", max_steps=100000, eval_every=100000, log_every=1)
    config.write_text(yaml.safe_dump(tree), encoding="utf-8")
    live = subprocess.Popen([sys.executable, "-m", "nmt", "train", str(config)], stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    try:
        log = tmp_path / "run" / "train.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and " step 2 | " in log.read_text(encoding="utf-8")):
            assert live.poll() is None and time.monotonic() < deadline, "training never started"
            time.sleep(0.2)
        for extra in ([], ["--resume"]):
            second = subprocess.run([sys.executable, "-m", "nmt", "train", str(config), *extra], capture_output=True,
                                    text=True, cwd=Path(__file__).resolve().parents[1])
            assert second.returncode == 2
            assert second.stderr.strip().splitlines() == [
                f"error: {tmp_path / 'run'} is in use by another nmt train (pid {live.pid}); wait for it to end or "
                "set another train.save_dir"]
        assert live.poll() is None  # untouched
    finally:
        live.send_signal(signal.SIGTERM)
        live.wait(timeout=120)
    assert live.returncode == 128 + signal.SIGTERM
    assert load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["progress"]["step"] >= 2


def test_a_full_disk_stops_the_run_in_one_line_and_resume_continues(data: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    tree = tiny_config(data, tmp_path / "run", max_steps=30, eval_every=10, log_every=10)
    real = nmt.training.resume.save_checkpoint
    calls: list[str] = []

    def full_after_two(path: Any, payload: dict[str, Any]) -> None:
        calls.append(str(path))
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, payload)

    monkeypatch.setattr(nmt.training.resume, "save_checkpoint", full_after_two)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tree), encoding="utf-8")
    assert cli.main(["train", str(config), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and calls[-1] in err[0]
    assert "rerun with --resume" in err[0]
    kept = load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")  # the last good checkpoint loads
    assert kept["progress"]["step"] in (10, 20)
    assert not list((tmp_path / "run").glob("*.tmp"))
    monkeypatch.setattr(nmt.training.resume, "save_checkpoint", real)  # space freed
    result = nmt.training.loop.train(config_from_dict(tree), resume=True)
    assert result["step"] == 30 and result["reason"] == "reached train.max_steps=30"
