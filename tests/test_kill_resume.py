"""``kill -9`` at any moment loses nothing: a real ``python -m nmt train`` is killed several times at random moments
(one of them as soon as a checkpoint write has begun), resumed each time, and ends bitwise equal to
an uninterrupted run with the same settings."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from nmt.checkpoint.files import load_checkpoint
from nmt.config import config_from_dict
from nmt.data.prepare import prepare
from nmt.training.loop import train
from tests.synthetic import tiny_config, write_corpus

ROOT = Path(__file__).resolve().parents[1]
KILLS = 3
SETTINGS = dict(max_steps=60, eval_every=4, eval_sentences=2, save_every=2, keep_last=2, log_every=1)


def start(config: Path, resume: bool, started: threading.Event) -> tuple[subprocess.Popen[str], threading.Thread]:
    """Start training; ``started`` is set once the run has loaded its data (and checkpoint) and begins stepping."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "nmt", "train", str(config)] + (["--resume"] if resume else [])
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)

    def drain() -> None:
        for line in proc.stderr or []:
            if line.startswith(("training ", "resuming ")):
                started.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return proc, reader


def wait_for_temporary(directory: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not any(name.endswith(".tmp") for name in os.listdir(directory)):
        assert time.monotonic() < deadline, "no checkpoint write seen"
        time.sleep(0.0005)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_is_bitwise_equal(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus", {"train": 600, "dev": 10, "test": 10})
    prepare("xx-yy", tmp_path / "data", from_dir=corpus, bpe_size=48, progress=False)
    tree = tiny_config(tmp_path / "data", tmp_path / "killed", **SETTINGS)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tree))
    last = tmp_path / "killed" / "checkpoint_last.pt"

    rng = random.Random(20240917)
    steps_at_kill = []
    for kill in range(KILLS):
        started = threading.Event()
        proc, reader = start(config, resume=kill > 0, started=started)
        assert started.wait(timeout=120), "training never started"
        if kill == 1:  # this one lands in a checkpoint write: as soon as a temporary checkpoint file shows up
            wait_for_temporary(tmp_path / "killed", timeout=60)
        else:
            time.sleep(rng.uniform(0.3, 1.5))
        assert proc.poll() is None, "the run finished before it could be killed; raise max_steps"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        reader.join(timeout=30)
        if last.exists():  # a kill before the first evaluation leaves nothing to resume, and that is fine
            steps_at_kill.append(load_checkpoint(last)["step"])
    assert steps_at_kill and steps_at_kill[-1] > 0

    proc, reader = start(config, resume=True, started=threading.Event())
    assert proc.wait(timeout=300) == 0
    reader.join(timeout=30)
    killed = load_checkpoint(last)
    assert killed["step"] == SETTINGS["max_steps"]
    assert not list((tmp_path / "killed").glob(".*.tmp"))  # temporaries of interrupted writes are cleaned up

    tree["train"]["save_dir"] = str(tmp_path / "uninterrupted")
    train(config_from_dict(tree))
    reference = load_checkpoint(tmp_path / "uninterrupted" / "checkpoint_last.pt")
    assert killed["model"].keys() == reference["model"].keys()
    differing = [k for k in reference["model"] if not torch.equal(killed["model"][k], reference["model"][k])]
    assert not differing, f"parameters differ after kill/resume: {differing[:5]} (kills at steps {steps_at_kill})"
    assert killed["progress"]["best_bleu"] == reference["progress"]["best_bleu"]
