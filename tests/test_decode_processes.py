"""Decoding processes (``--workers`` on a CPU with a translator loaded from checkpoints): bitwise the results of one
thread of the parent, in input order, for one model, an int8 ensemble and sampling; started once and reused; a dead
worker is a one-line error and the next call replaces the pool; the CLI leaves no process behind."""

from __future__ import annotations

import io
import os
import pickle
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import pytest
import torch

from nmt.checkpoint.files import checkpoint_bytes, load_checkpoint
from nmt.errors import NmtError
from nmt.inference.processes import HEADER, DecodeProcesses, read_frame, serve, write_frame
from nmt.inference.request import DecodeRequest, call_settings
from nmt.inference.restore import restorable
from nmt.inference.threads import intra_op_threads
from nmt.inference.translator import Translator
from nmt.search import Hypothesis, Sampling
from nmt.search.batches import DecodeJob
from tests.test_elastic import _children
from tests.test_translate import FakeStdin, run_cli, synthetic_sentences, tiny_checkpoint


def _worker_pids() -> set[int]:
    """The decoding processes whose parent is this process."""
    found = set()
    for pid in _children(os.getpid()):
        try:
            if b"nmt.inference.processes" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:  # gone meanwhile
            continue
    return found


def _tokens_and_scores(hyps: list[list[Hypothesis]]) -> list[list[tuple[list[int], float, list[float]]]]:
    return [[(h.tokens, h.score, h.positional_scores) for h in nbest] for nbest in hyps]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    directory = tmp_path_factory.mktemp("ckpt")
    return [tiny_checkpoint(directory), tiny_checkpoint(directory, "other.pt", seed=1)]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers through /proc")
def test_processes_decode_as_one_thread_and_are_reused(checkpoints: list[Path]) -> None:
    with Translator.from_checkpoint(checkpoints[0], device="cpu") as translator:
        sources = translator.encode(synthetic_sentences(23, seed=7) + [""], pretokenized=True)
        with intra_op_threads(1):  # the arithmetic of one worker: one intra-op thread
            alone = translator.translate_ids(sources, beam=3, nbest=2, batch_size=2)
        parallel = translator.translate_ids(sources, beam=3, nbest=2, batch_size=2, workers=2)
        pool = translator.worker_processes(2)
        assert pool is not None and pool.size == 2 and set(pool.pids) == _worker_pids()
        assert _tokens_and_scores(parallel) == _tokens_and_scores(alone)  # bitwise, in input order
        assert parallel[-1][0].tokens == [] and len(parallel) == len(sources)
        sampling = Sampling(topk=5, seed=3)  # samples are keyed by sentence: the same in processes
        drawn = [translator.translate_ids(sources, nbest=2, batch_size=3, sampling=sampling, first_index=10,
                                          workers=workers) for workers in (1, 2)]
        assert _tokens_and_scores(drawn[0]) == _tokens_and_scores(drawn[1])
        assert translator.worker_processes(2) is pool  # kept between calls
        dead, live = pool.pids
        for pid in (dead, live):  # stopped, each takes one of two jobs and holds it
            os.kill(pid, signal.SIGSTOP)
        job = DecodeJob([[5, 6, 7]], [0], translator.config.decode, 20, None)
        with ThreadPoolExecutor(max_workers=2) as threads:
            held = [threads.submit(pool.decode, job) for _ in range(2)]
            time.sleep(0.5)
            os.kill(dead, signal.SIGKILL)
            os.kill(live, signal.SIGCONT)
            outcomes = [str(future.exception()) for future in held]
        assert sorted(outcomes) == ["None", f"decoding worker {pool.pids.index(live) ^ 1} (pid {dead}) was killed by "
                                    "SIGKILL; see the lines above on stderr"]  # the other process decoded its job
        assert not pool.alive
        again = translator.translate_ids(sources, beam=3, nbest=2, batch_size=2, workers=2)  # the dead one replaced
        assert _tokens_and_scores(again) == _tokens_and_scores(alone)
        assert translator.worker_processes(2) is pool and pool.alive and live in pool.pids and dead not in pool.pids
        replaced = translator.worker_processes(3)  # another count: another pool
        assert replaced is not None and replaced.size == 3 and len(_worker_pids()) == 3
    assert _worker_pids() == set()  # the context manager stopped them


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers through /proc")
def test_int8_ensemble_in_processes(checkpoints: list[Path]) -> None:
    with Translator.from_checkpoints(checkpoints, device="cpu", precision="int8") as translator:
        sources = translator.encode(synthetic_sentences(12, seed=5), pretokenized=True)
        with intra_op_threads(1):
            alone = translator.translate_ids(sources, batch_size=3)
        parallel = translator.translate_ids(sources, batch_size=3, workers=2)
        assert _tokens_and_scores(parallel) == _tokens_and_scores(alone)
        assert len(_worker_pids()) == 2
    assert _worker_pids() == set()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers through /proc")
def test_isolated_one_worker_decodes_in_one_process_with_every_thread(checkpoints: list[Path]) -> None:
    """``nmt serve``'s route: one worker, ``isolated``: one decoding process running this process's intra-op
    threads, giving what this process gives with those threads."""
    with Translator.from_checkpoint(checkpoints[0], device="cpu") as translator, intra_op_threads(2):
        sources = translator.encode(synthetic_sentences(9, seed=3), pretokenized=True)
        here = translator.translate_ids(sources, beam=3, batch_size=4)
        assert _worker_pids() == set()  # one worker, not isolated: in this process
        request = DecodeRequest(True, 4, 1, isolated=True)
        isolated = translator.translate_ids(sources, settings=call_settings(translator.config.decode, beam=3),
                                            request=request)
        pool = translator.worker_processes(1, isolated=True)
        assert pool is not None and pool.size == 1 and pool.threads == [2] and set(pool.pids) == _worker_pids()
        assert _tokens_and_scores(isolated) == _tokens_and_scores(here)
        assert translator.worker_processes(2) is not pool  # two one-thread workers replace it
    assert _worker_pids() == set()


def _frames(*payloads: bytes) -> io.BytesIO:
    stream = io.BytesIO()
    for payload in payloads:
        write_frame(stream, payload)
    stream.seek(0)
    return stream


def _answers(out: io.BytesIO) -> list[tuple[str, object]]:
    out.seek(0)
    answers = []
    while (frame := read_frame(out)) is not None:
        answers.append(pickle.loads(frame))
    return answers


def test_serve_answers_jobs_and_errors(checkpoints: list[Path]) -> None:
    payload = load_checkpoint(checkpoints[0])
    translator = Translator.from_checkpoint(checkpoints[0], device="cpu")
    model = checkpoint_bytes({"members": [restorable(payload, payload["model"])], "precision": "fp32"})
    job = DecodeJob([[5, 6, 7, 8], [9, 10]], [0, 1], translator.config.decode, 20, None)
    out = io.BytesIO()
    assert serve(_frames(model, pickle.dumps(job)), out) == 0
    (ready, _), (kind, answer) = _answers(out)
    hyps = cast(list[list[Hypothesis]], answer)
    with torch.no_grad():
        expected = translator.translate_ids([[5, 6, 7, 8], [9, 10]])
    assert (ready, kind) == ("ready", "ok") and _tokens_and_scores(hyps) == _tokens_and_scores(expected)

    broken = dict(payload["model"])
    broken.pop(next(iter(broken)))  # a weight missing: restore_model's one-line error, sent back, exit 1
    out = io.BytesIO()
    model = checkpoint_bytes({"members": [restorable(payload, broken)], "precision": "fp32"})
    assert serve(_frames(model), out) == 1
    [(kind, message)] = _answers(out)
    assert kind == "error" and str(message).startswith("checkpoint <sent by the parent process> does not match")

    assert serve(io.BytesIO(b""), io.BytesIO()) == 0  # the parent closed before sending anything
    with pytest.raises(EOFError):
        read_frame(io.BytesIO(HEADER.pack(10) + b"short"))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers through /proc")
def test_cli_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = tiny_checkpoint(tmp_path)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(synthetic_sentences(9, seed=3)) + "\n", encoding="utf-8")
    outputs = []
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}.txt"
        args = ["translate", "--checkpoint", str(checkpoint), "--device", "cpu", "--input", str(source),
                "--output", str(out), "--batch-size", "2", "--workers", workers, "--quiet"]
        with intra_op_threads(1):
            assert run_cli(args, monkeypatch) == 0
        outputs.append(out.read_text(encoding="utf-8"))
        assert _worker_pids() == set()  # stopped when the command ends
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == 9
    monkeypatch.setattr("sys.stdin", FakeStdin(b"a cat\n"))
    assert run_cli(["translate", "--checkpoint", str(tmp_path / "missing.pt"), "--workers", "0"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --workers 0 must be at least 1") and err.count("\n") == 1


def test_a_pool_that_cannot_start_stops_its_workers(checkpoints: list[Path]) -> None:
    payload = load_checkpoint(checkpoints[0])
    broken = dict(payload["model"])
    broken.pop(next(iter(broken)))
    with pytest.raises(NmtError, match="^checkpoint <sent by the parent process> does not match"):
        DecodeProcesses([restorable(payload, broken)], "fp32", 2)
    assert not Path("/proc").is_dir() or _worker_pids() == set()
