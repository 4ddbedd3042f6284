"""Decoding processes: ``--workers N`` on a CPU decodes N batches side by side in N processes, one intra-op thread
each (CTranslate2's ``inter_threads``, which keeps one model replica per worker too). ``nmt serve`` also decodes
its one-worker batches in a process, there with every intra-op thread (``threads``): its event loop's process then
runs no torch, and the decoding process's OpenMP team is the only one spinning on the cores (a second team, such as
a decoding thread's beside the main thread's, made two-thread decoding no faster than one thread, measured in
``docs/usage.md``).

Threads in one process would share the GIL: a beam-search step is hundreds of small torch operations with Python
between them, and two threads decoded only 1.4-1.55x as fast as one (``docs/performance.md``). A process per worker
runs its own Python. Each holds its own copy of the model, rebuilt from the checkpoints' entries the parent loaded
(:func:`nmt.inference.restore.restorable`: the very weights the parent decodes with, even if the file changed since), in
the precision the parent resolved, so every batch is decoded exactly as one thread of the parent would.

Protocol: a process is ``python -m nmt.inference.processes``, started with :mod:`subprocess` rather than
:mod:`multiprocessing`, whose ``spawn`` re-runs the parent's main script (a script without a main guard would run
again in every worker). Over its stdin and stdout go length-prefixed frames: first the model (checkpoint bytes,
loaded with ``weights_only=True``) and its precision, answered by ``ready``; then one pickled
:class:`~nmt.search.batches.DecodeJob` per request, answered by its hypotheses or an error. Its stdout carries frames
only (its prints go to stderr). It ignores SIGINT (Ctrl-C reaches the whole process group; the parent decides) and
exits when its stdin closes, so a parent that dies, however it dies, leaves no worker behind.
"""

from __future__ import annotations

import io
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import traceback
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, cast

import torch

from nmt.checkpoint.files import checkpoint_bytes
from nmt.errors import NmtError
from nmt.inference.ensemble import Ensemble
from nmt.inference.jobs import for_precision
from nmt.inference.restore import restore_model
from nmt.inference.threads import intra_op_threads
from nmt.machine import fp32_gemm
from nmt.machine.runtime import Runtime, bound_onednn_cache
from nmt.search import Hypothesis, Seq2Seq
from nmt.search.batches import DecodeJob, run_job

HEADER = struct.Struct(">Q")  # a frame: its length in bytes, then the bytes
STOP_SECONDS = 5.0  # how long a worker may take to exit after its stdin closes before it is killed


def thread_environment(threads: int) -> dict[str, str]:
    """OpenMP and MKL told ``threads`` threads (one: no idle OpenMP pool per worker)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def write_frame(stream: IO[bytes], data: bytes) -> None:
    stream.write(HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame, or None where the stream ends between frames; a frame cut short raises EOFError."""
    head = stream.read(HEADER.size)
    if not head:
        return None
    if len(head) < HEADER.size:
        raise EOFError("stream ended inside a frame header")
    (size,) = HEADER.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("stream ended inside a frame")
    return data


def _send(stream: IO[bytes], kind: str, body: Any) -> None:
    write_frame(stream, pickle.dumps((kind, body), protocol=pickle.HIGHEST_PROTOCOL))


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "closed its output"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Worker:
    """One decoding process, used by one thread at a time."""

    def __init__(self, index: int, env: dict[str, str]) -> None:
        self.index = index
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "nmt.inference.processes"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env=env)
        except OSError as exc:  # e.g. no process slots left
            raise NmtError(f"cannot start decoding worker {index}: {exc.strerror or exc}") from None

    @property
    def name(self) -> str:
        return f"decoding worker {self.index} (pid {self.proc.pid})"

    def send(self, data: bytes) -> None:
        try:
            write_frame(cast(IO[bytes], self.proc.stdin), data)
        except (BrokenPipeError, ValueError, OSError):
            raise self._died() from None

    def receive(self) -> Any:
        try:
            frame = read_frame(cast(IO[bytes], self.proc.stdout))
        except (EOFError, OSError, ValueError):
            frame = None
        if frame is None:
            raise self._died()
        kind, body = pickle.loads(frame)
        if kind == "error":
            raise NmtError(body)
        if kind == "bug":
            raise RuntimeError(f"{self.name} failed:\n{body}")
        return body

    def _died(self) -> NmtError:
        try:
            code: int | None = self.proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        return NmtError(f"{self.name} {_exit_reason(code)}; see the lines above on stderr")


def _stop(workers: Sequence[_Worker]) -> None:
    """Close every worker's stdin (it exits), then wait for each, killing one that does not exit in time."""
    for worker in workers:
        try:
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()
        except OSError:
            pass
    for worker in workers:
        try:
            worker.proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
        if worker.proc.stdout is not None:
            worker.proc.stdout.close()


def worker_environment(threads: int = 1) -> dict[str, str]:
    """The parent's environment (its allocator preload and settings included), this package importable, and
    ``threads`` OpenMP threads."""
    env = dict(os.environ, **thread_environment(threads))
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


class DecodeProcesses:
    """``size`` decoding processes holding the model of ``members`` in ``precision``; :meth:`decode` runs a job on
    an idle one (call it from up to ``size`` threads at once). Started here, stopped by :meth:`close` or when the
    pool is garbage-collected or the interpreter exits.

    Args:
        members: :func:`nmt.inference.restore.restorable` entries of each checkpoint (several: an ensemble).
        precision: the resolved decoding precision (fp32, bf16, fp16 or int8).
        size: how many processes.
        threads: intra-op threads of each (``threads`` answers what each process runs with).

    Raises:
        NmtError: a process could not start or rebuild the model (the others are stopped).
    """

    def __init__(self, members: Sequence[dict[str, Any]], precision: str, size: int, threads: int = 1) -> None:
        if threads < 1:
            raise NmtError(f"decoding processes need at least one thread each, not {threads}")
        if precision == "fp32":  # the workers' fp32 route is that of their thread count: measured once, here (cached)
            with intra_op_threads(threads):
                fp32_gemm.choice()
        self._model = checkpoint_bytes({"members": list(members), "precision": precision, "threads": threads})
        self._env = worker_environment(threads)
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _stop, self._workers)  # stops those started, whatever happens
        try:
            for index in range(size):  # all started first: they import torch side by side
                self._workers.append(_Worker(index, self._env))
            for worker in self._workers:
                worker.send(self._model)
            self.threads = [int(worker.receive()) for worker in self._workers]  # what each runs with
        except BaseException:
            self.close()
            raise
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for worker in self._workers:
            self._idle.put(worker)

    @property
    def size(self) -> int:
        return len(self._workers)

    @property
    def alive(self) -> bool:
        """Whether every process is still running (a dead one is replaced when its turn comes: :meth:`decode`)."""
        return self._finalizer.alive and all(worker.proc.poll() is None for worker in self._workers)

    @property
    def pids(self) -> list[int]:
        return [worker.proc.pid for worker in self._workers]

    def decode(self, job: DecodeJob) -> list[list[Hypothesis]]:
        """``job``'s n-best lists, decoded by an idle process; its error (:class:`NmtError`) or death is raised. A
        process found dead when its turn comes is replaced first, alone: the others may be decoding for other
        threads (``nmt serve``'s lanes), which a new pool would cut short."""
        worker = self._idle.get()
        try:
            if worker.proc.poll() is not None:
                worker = self._replace(worker)
            worker.send(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
            return cast(list[list[Hypothesis]], worker.receive())
        finally:
            self._idle.put(worker)

    def _replace(self, dead: _Worker) -> _Worker:
        """A new process in ``dead``'s place, holding the same model (raised: it could not start)."""
        _stop([dead])
        fresh = _Worker(dead.index, self._env)
        try:
            fresh.send(self._model)
            fresh.receive()
        except BaseException:
            _stop([fresh])
            raise
        self._workers[dead.index] = fresh
        return fresh

    def close(self) -> None:
        """Stop the processes (idempotent)."""
        self._finalizer()


class ProcessSlot:
    """The decoding processes of one translator: started on first use, kept between calls (a dead process is
    replaced by the pool), replaced when the count changes (``entries`` and ``precision`` as for
    :class:`DecodeProcesses`). Safe to call from several threads (``nmt serve``'s lanes)."""

    def __init__(self, entries: Sequence[dict[str, Any]], precision: str) -> None:
        self.entries, self.precision = tuple(entries), precision
        self.pool: DecodeProcesses | None = None
        self.threads = 1
        self.lock = threading.Lock()

    def get(self, size: int, threads: int = 1) -> DecodeProcesses:
        with self.lock:
            if self.pool is None or self.pool.size != size or self.threads != threads:
                self._close()
                self.pool = DecodeProcesses(self.entries, self.precision, size, threads)
                self.threads = threads
            return self.pool

    def close(self) -> None:
        with self.lock:
            self._close()

    def _close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def _replica(init: dict[str, Any]) -> tuple[Seq2Seq[Any], Runtime]:
    """The model and runtime that the parent's init frame describes."""
    device, precision = torch.device("cpu"), str(init["precision"])
    models = [restore_model(member, device, path="<sent by the parent process>")[0] for member in init["members"]]
    model = cast(Seq2Seq[Any], models[0] if len(models) == 1 else Ensemble(models))
    bound_onednn_cache(device, precision)
    return for_precision(model, precision), Runtime(device, precision)


def serve(inp: IO[bytes], out: IO[bytes]) -> int:
    """A worker's life: rebuild the model from the first frame, then answer one job per frame until ``inp`` ends."""
    torch.set_num_threads(1)
    try:
        init = read_frame(inp)
        if init is None:
            return 0
        loaded = torch.load(io.BytesIO(init), map_location="cpu", weights_only=True)
        torch.set_num_threads(int(loaded.get("threads", 1)))
        model, runtime = _replica(loaded)
        _send(out, "ready", torch.get_num_threads())
        while (frame := read_frame(inp)) is not None:
            job = pickle.loads(frame)
            try:
                _send(out, "ok", run_job(model, runtime, job))
            except NmtError as exc:
                _send(out, "error", str(exc))
    except BrokenPipeError:  # the parent is gone
        return 0
    except NmtError as exc:
        _send(out, "error", str(exc))
        return 1
    except Exception:
        _send(out, "bug", traceback.format_exc())
        return 1
    return 0


def main() -> int:
    """Entry point of ``python -m nmt.inference.processes``: frames on the original stdin and stdout only."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp, out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # a stray print goes to stderr, never into a frame
    sys.stdout = sys.stderr
    return serve(inp, out)


if __name__ == "__main__":
    raise SystemExit(main())
