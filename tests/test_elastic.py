"""Training under torchrun's elastic agent, with real processes on loopback (CPU, gloo, fp32): a group whose
worker is SIGKILLed restarts from the last checkpoint and finishes with exactly the weights of an uninterrupted run
(every rank's generators are in the checkpoint, so dropout draws what it would have); two nodes train exactly the
model of one node with two processes; a node that never joins ends the run within a timeout."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from nmt.checkpoint.files import load_checkpoint
from tests.synthetic import prepare_synthetic, tiny_config

ROOT = Path(__file__).resolve().parents[1]
STEPS = 60


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("elastic"), {"train": 600, "dev": 8, "test": 4})


def _config(data_dir: Path, run_dir: Path, **train: Any) -> Path:
    settings: dict[str, Any] = dict(max_steps=STEPS, eval_every=30, save_every=5, keep_last=0, eval_sentences=4,
                                    log_every=5, max_tokens=200)
    settings.update(train)
    tree = tiny_config(data_dir, run_dir, **settings)
    tree["model"].update(dropout=0.2, attn_dropout=0.1)  # the generators matter
    path = run_dir.parent / f"{run_dir.name}.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    ckpt = load_checkpoint(run_dir / "checkpoint_last.pt")
    assert ckpt["step"] == STEPS
    return dict(ckpt["model"])


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert different == []


STANDALONE = ["--standalone", "--nproc_per_node=2", "--max-restarts=2", "-m", "nmt", "train"]


@pytest.fixture(scope="module")
def reference(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run of one node with two processes."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    done = subprocess.run(_torchrun(*STANDALONE, str(_config(data_dir, run_dir)), "--resume"), capture_output=True,
                          text=True, env=_env(), cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("training qknorm") == 1  # only rank 0 logs
    return run_dir


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers through /proc")
def test_a_killed_worker_restarts_the_group_and_the_run_ends_as_if_uninterrupted(data_dir: Path, reference: Path,
                                                                                 tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    config = _config(data_dir, run_dir)
    agent = subprocess.Popen(_torchrun(*STANDALONE, str(config), "--resume"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    deadline = time.time() + 300
    while not (run_dir / "checkpoint_10.pt").exists() and agent.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(random.Random(os.getpid()).uniform(0.0, 0.5))  # a random moment, checkpoint writes included
    workers = _children(agent.pid)
    assert workers, "no worker processes found"
    os.kill(random.Random(1).choice(workers), signal.SIGKILL)
    _, stderr = agent.communicate(timeout=600)
    assert agent.returncode == 0, stderr[-3000:]
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    assert "resuming qknorm" in log  # the restarted group said where it resumed
    _same(_weights(run_dir), _weights(reference))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _node(rank: int, port: int, config: Path) -> list[str]:
    return _torchrun("--nnodes=2", "--nproc_per_node=1", f"--node_rank={rank}", "--master_addr=127.0.0.1",
                     f"--master_port={port}", "-m", "nmt", "train", str(config), "--resume")


def test_two_nodes_on_loopback_train_the_model_of_one_node_with_two_processes(data_dir: Path, reference: Path,
                                                                              tmp_path: Path) -> None:
    run_dir = tmp_path / "nodes"
    config, port = _config(data_dir, run_dir), _free_port()
    nodes = [subprocess.Popen(_node(rank, port, config), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=_env(), cwd=ROOT) for rank in (0, 1)]
    errors = [node.communicate(timeout=600)[1] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], errors[0][-2000:] + errors[1][-2000:]
    assert errors[0].count("training qknorm") == 1 and "training qknorm" not in errors[1]  # global rank 0 only
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(p.name for p in reference.iterdir())
    _same(_weights(run_dir), _weights(reference))


def test_a_node_that_never_joins_ends_the_run_with_one_line(data_dir: Path, tmp_path: Path) -> None:
    config, port = _config(data_dir, tmp_path / "alone"), _free_port()
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "nmt", "launch", "--nnodes=2", "--nproc-per-node=1", "--node-rank=0",
                           "--master-addr=127.0.0.1", f"--master-port={port}", "--join-timeout", "5", "train",
                           str(config)], capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120)
    assert done.returncode == 2 and time.time() - started < 60
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: nmt launch: not every node joined within 5 s"), done.stderr


def test_launch_splits_torchrun_options_from_the_command() -> None:
    from nmt.commands.launch import split
    from nmt.errors import NmtError

    launcher, command, timeout = split(["--standalone", "--nproc-per-node=2", "--join-timeout=30", "train", "C.yaml",
                                        "--resume"])
    assert launcher == ["--standalone", "--nproc-per-node=2", "--rdzv-conf", "timeout=30,join_timeout=30"]
    assert command == ["train", "C.yaml", "--resume"] and timeout == 30
    assert split(["--rdzv-conf", "timeout=9", "train", "C"])[0] == ["--rdzv-conf", "timeout=9"]  # the user's own
    with pytest.raises(NmtError, match="then the nmt command"):
        split(["--standalone"])
    with pytest.raises(NmtError, match="positive number"):
        split(["--join-timeout", "x", "train", "C"])
