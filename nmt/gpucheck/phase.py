"""One phase of ``scripts/gpu_check`` in its own process: ``python -m nmt.gpucheck.phase NAME SETTINGS RESULT``.

Each phase function takes the :class:`~nmt.gpucheck.runner.Settings` and returns a JSON-ready dict with ``status``
(pass, fail, error), a one-line ``summary`` and its figures; the dict is written to RESULT.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nmt.gpucheck.runner import ROOT, Settings, child_env
from nmt.gpucheck.throughput import peak_tflops

Result = dict[str, Any]


def env_phase(settings: Settings) -> Result:
    """The machine: GPU, memory, driver, torch and CUDA versions, the GPU's peak rates."""
    info: Result = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                    "cpu_count": os.cpu_count()}
    try:
        import sacremoses  # noqa: F401 - only probing: sacreBLEU on detokenized text needs it

        info["sacremoses"] = True
    except ImportError:
        info["sacremoses"] = False
    if settings.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", memory_gib=props.total_memory / 2**30,
                    multiprocessors=props.multi_processor_count, peak_tflops=peak_tflops(props.name))
        try:
            from torch.cuda import nccl

            info["nccl"] = str(nccl.version())
        except (ImportError, RuntimeError, AttributeError) as exc:
            info["nccl"] = f"unavailable ({exc})"
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            info["nvidia_smi"] = smi.stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            info["nvidia_smi"] = f"unavailable ({exc})"
        summary = f"{props.name}, {info['memory_gib']:.0f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}"
    else:
        info["gpu"] = None
        summary = f"CPU dry run, torch {torch.__version__}"
    return {"status": "pass", "summary": summary, **info}


def tests_phase(settings: Settings) -> Result:
    """The suite's ``gpu``-marked tests (they skip without CUDA), outcome per test from pytest's JUnit XML."""
    xml = Path(settings.work) / "gpu-tests.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", f"--junitxml={xml}",
               "tests"]
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True)
    print(done.stdout[-20000:], done.stderr[-5000:], sep="\n", flush=True)
    if not xml.is_file():
        return {"status": "error", "summary": f"pytest exited {done.returncode} without a report"}
    tests: dict[str, str] = {}
    for case in ElementTree.parse(xml).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        tests[f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"] = outcome
    counts = {k: sum(v == k for v in tests.values()) for k in ("passed", "failed", "skipped")}
    ok = counts["failed"] == 0 and (counts["passed"] > 0 or settings.device == "cpu") and done.returncode in (0, 5)
    summary = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    return {"status": "pass" if ok else "fail", "summary": summary, "counts": counts, "tests": tests}


def _phases() -> dict[str, Callable[[Settings], Result]]:
    from nmt.gpucheck.glen import glen_phase
    from nmt.gpucheck.resume import resume_phase, torchrun_phase
    from nmt.gpucheck.throughput import throughput_phase

    return {"env": env_phase, "tests": tests_phase, "resume": resume_phase, "torchrun": torchrun_phase,
            "throughput": throughput_phase, "glen": glen_phase}


def main(argv: list[str]) -> int:
    name, settings_path, result_path = argv
    settings = Settings(**json.loads(Path(settings_path).read_text(encoding="utf-8")))
    try:
        result = _phases()[name](settings)
    except Exception as exc:  # a phase that breaks is reported, and the check goes on with the next one
        traceback.print_exc()
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        result = {"status": "error", "summary": f"{type(exc).__name__}: {first}"}
    Path(result_path).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
