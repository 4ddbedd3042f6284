"""The ``resume`` and ``torchrun`` phases of ``scripts/gpu_check``: real ``nmt train`` processes on the device.

``resume``: a run is killed with SIGKILL twice (once after its first checkpoint, once right after resuming), resumed
to the end, and compared parameter by parameter with an uninterrupted run of the same config, both with
``torch.use_deterministic_algorithms(True)`` (warn only), SDPA's math backend and ``CUBLAS_WORKSPACE_CONFIG=:4096:8``.
It passes when the weights are bitwise equal, or, where a kernel has no deterministic version, within
:data:`TOLERANCE`.

``torchrun``: ``torchrun --nproc_per_node=1`` (nccl on CUDA, gloo on the CPU) trains and checkpoints; then two
processes on the one device, which nccl may refuse (reported, not failed).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from nmt.gpucheck.runner import ROOT, Settings, child_env

# Largest |difference| of any weight between the resumed and the uninterrupted run, relative to that tensor's
# largest |weight|, still accepted when the run is not bitwise equal.
TOLERANCE = 1e-3
# Deterministic algorithms, and attention through SDPA's math backend: the flash and memory-efficient backward
# passes accumulate with atomics, so they differ from run to run in the last bits.
DETERMINISTIC_MAIN = ("import sys, torch; torch.use_deterministic_algorithms(True, warn_only=True); "
                      "[f(False) for f in (torch.backends.cuda.enable_flash_sdp, "
                      "torch.backends.cuda.enable_mem_efficient_sdp, torch.backends.cuda.enable_cudnn_sdp)]; "
                      "from nmt.cli import main; sys.exit(main(sys.argv[1:]))")


class Training:
    """A ``nmt train`` child process whose stderr is read line by line in a thread."""

    def __init__(self, config: str, save_dir: Path, resume: bool) -> None:
        argv = [sys.executable, "-c", DETERMINISTIC_MAIN, "train", config, "--set", f"train.save_dir={save_dir}"]
        env = {**child_env(), "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
        self.proc = subprocess.Popen(argv + (["--resume"] if resume else []), stderr=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr or []:
            self.lines.append(line)

    def wait_for(self, prefix: str, after: int = 0, timeout: float = 120) -> bool:
        """Wait until a stderr line (from the ``after``-th on) starts with ``prefix``; False if the run ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line[20:].startswith(prefix) or line.startswith(prefix) for line in self.lines[after:]):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        return False

    def finish(self, timeout: float = 600) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=30)
        return code

    def kill(self) -> bool:
        """SIGKILL; True if the process was still running."""
        running = self.proc.poll() is None
        if running:
            self.proc.send_signal(signal.SIGKILL)
        self.finish()
        return running


def compare(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Bitwise-equal tensor count and the largest relative difference between two state dicts."""
    equal, worst, worst_name = 0, 0.0, ""
    for name, value in a.items():
        other = b[name]
        if torch.equal(value, other):
            equal += 1
            continue
        diff = (value.double() - other.double()).abs().max().item() / max(value.double().abs().max().item(), 1e-12)
        if diff > worst:
            worst, worst_name = diff, name
    return {"tensors": len(a), "bitwise_equal": equal, "max_relative_diff": worst, "worst_tensor": worst_name}


def resume_phase(settings: Settings) -> dict[str, Any]:
    """Two SIGKILLs and resumes against an uninterrupted run (started at the same time, on the same device)."""
    from nmt.checkpoint.files import load_checkpoint

    work, rng = Path(settings.work), random.Random(20260917)
    reference = Training(settings.tiny_config, work / "resume-reference", resume=False)
    killed_dir = work / "resume-killed"
    kills: list[dict[str, Any]] = []
    run = Training(settings.tiny_config, killed_dir, resume=False)
    for attempt in range(2):
        mark = len(run.lines)
        prefix = "eval step" if attempt == 0 else "step "
        if not run.wait_for(prefix, after=mark):
            break
        time.sleep(rng.uniform(0.05, 0.4))
        was_running = run.kill()
        step = load_checkpoint(killed_dir / "checkpoint_last.pt")["step"] if (killed_dir / "checkpoint_last.pt"
                                                                               ).is_file() else None
        kills.append({"killed_while_running": was_running, "checkpoint_step": step})
        run = Training(settings.tiny_config, killed_dir, resume=True)
    code, ref_code = run.finish(), reference.finish()
    if code != 0 or ref_code != 0:
        tail = "".join((run.lines if code else reference.lines)[-5:]).strip().replace("\n", " | ")
        return {"status": "fail", "summary": f"training exited {code} / reference {ref_code}: {tail[-300:]}",
                "kills": kills}
    killed = load_checkpoint(killed_dir / "checkpoint_last.pt")
    ref = load_checkpoint(work / "resume-reference" / "checkpoint_last.pt")
    weights = compare(ref["model"], killed["model"])
    same_bleu = killed["progress"]["best_bleu"] == ref["progress"]["best_bleu"]
    bitwise = weights["bitwise_equal"] == weights["tensors"]
    ok = len(kills) == 2 and killed["step"] == ref["step"] and (bitwise or weights["max_relative_diff"] <= TOLERANCE)
    how = "bitwise equal" if bitwise else (f"{weights['bitwise_equal']}/{weights['tensors']} tensors bitwise equal, "
                                           f"max relative difference {weights['max_relative_diff']:.2e} "
                                           f"(tolerance {TOLERANCE:g})")
    summary = (f"{len(kills)} SIGKILLs (checkpoints at steps {[k['checkpoint_step'] for k in kills]}), resumed to "
               f"step {killed['step']}: {how}; best dev BLEU {'equal' if same_bleu else 'differs'}")
    return {"status": "pass" if ok else "fail", "summary": summary, "kills": kills, "weights": weights,
            "bitwise": bitwise, "tolerance": TOLERANCE, "steps": killed["step"], "same_best_bleu": same_bleu,
            "deterministic_algorithms": True}


def torchrun(settings: Settings, nproc: int, save_dir: Path, steps: int, timeout: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m",
               "nmt", "train", settings.tiny_config, "--set", f"train.save_dir={save_dir}", "--set",
               f"train.max_steps={steps}", "--set", f"train.eval_every={steps // 2}"]
    started = time.time()
    child = subprocess.Popen(command, cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        _, stderr = child.communicate(timeout=timeout)
        code = child.returncode
    except subprocess.TimeoutExpired:  # kill the launcher and its workers, which would hold the GPU
        os.killpg(child.pid, signal.SIGKILL)
        _, stderr = child.communicate()
        code, stderr = -1, f"{stderr}\nerror: timeout after {timeout:.0f} s"
    print(stderr[-6000:], flush=True)
    last = save_dir / "checkpoint_last.pt"
    step = None
    if code == 0 and last.is_file():
        from nmt.checkpoint.files import load_checkpoint

        step = load_checkpoint(last)["step"]
    errors = [line.strip() for line in stderr.splitlines() if "Error" in line or "error:" in line or "NCCL" in line]
    return {"returncode": code, "step": step, "seconds": round(time.time() - started, 1),
            "ok": code == 0 and step == steps, "first_error": errors[0][:300] if errors else None,
            "logged_by_rank0_only": stderr.count("training ") <= 1}


def torchrun_phase(settings: Settings) -> dict[str, Any]:
    backend = "nccl" if settings.device == "cuda" else "gloo"
    work = Path(settings.work)
    steps = 6 if settings.dry_run else 40
    cuda = settings.device == "cuda"  # the phase has 75 s on a GPU: nccl may hang rather than refuse two processes
    one = torchrun(settings, 1, work / "torchrun-1", steps, 35 if cuda else 90)
    two = torchrun(settings, 2, work / "torchrun-2", steps, 30 if cuda else 90)
    two_text = ("ran and checkpointed" if two["ok"] else
                f"refused or failed (exit {two['returncode']}: {two['first_error'] or 'no error line'})")
    summary = (f"--nproc_per_node=1 with {backend}: {'trained and checkpointed' if one['ok'] else 'FAILED'}; "
               f"2 processes on one device: {two_text}")
    # two processes sharing one GPU are optional (nccl refuses duplicate GPUs); on the CPU (gloo) they must work
    ok = one["ok"] and (two["ok"] or settings.device == "cuda")
    return {"status": "pass" if ok else "fail", "summary": summary, "backend": backend, "nproc1": one,
            "nproc2": two, "os_cpu_count": os.cpu_count()}
