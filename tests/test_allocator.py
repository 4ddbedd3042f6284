"""The ``nmt`` command runs with TCMalloc preloaded where the system has it, and ``NMT_ALLOCATOR`` chooses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.errors import NmtError
from nmt.machine import allocator


def _fake_library(directory: Path, name: str = "libtcmalloc_minimal.so.4") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"\x7fELF")
    return path


def test_auto_preloads_a_found_library_once(tmp_path: Path) -> None:
    library = _fake_library(tmp_path / "lib")
    env = allocator.preload_environment({"LD_PRELOAD": "/other.so"}, dirs=[str(tmp_path / "lib")])
    assert env is not None and env["LD_PRELOAD"] == f"{library}:/other.so"
    assert int(env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) >= 1 << 40
    assert allocator.preload_environment(env, dirs=[str(tmp_path / "lib")]) is None  # already preloaded: no loop


def test_virtual_environment_library_comes_first(tmp_path: Path) -> None:
    system = _fake_library(tmp_path / "system")
    venv = _fake_library(tmp_path / "venv" / "lib", "libtcmalloc.so")
    assert allocator.find_tcmalloc([str(tmp_path / "system")], {"VIRTUAL_ENV": str(tmp_path / "venv")}) == venv
    assert allocator.find_tcmalloc([str(tmp_path / "system")], {}) == system
    assert allocator.find_tcmalloc([str(tmp_path / "none")], {}) is None


def test_choices(tmp_path: Path) -> None:
    _fake_library(tmp_path)
    dirs = [str(tmp_path)]
    assert allocator.preload_environment({"NMT_ALLOCATOR": "system"}, dirs) is None
    assert allocator.preload_environment({"NMT_ALLOCATOR": "tcmalloc"}, dirs) is not None
    assert allocator.preload_environment({}, [str(tmp_path / "none")]) is None  # auto without a library: as is
    with pytest.raises(NmtError, match="no TCMalloc library was found"):
        allocator.preload_environment({"NMT_ALLOCATOR": "tcmalloc"}, [str(tmp_path / "none")])
    with pytest.raises(NmtError, match="NMT_ALLOCATOR='jemalloc' is not one of auto, tcmalloc, system"):
        allocator.choice({"NMT_ALLOCATOR": "jemalloc"})


@pytest.mark.skipif(allocator.find_tcmalloc() is None, reason="no TCMalloc library on this machine")
def test_the_command_reexecutes_with_tcmalloc_and_system_opts_out() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "NMT_ALLOCATOR")}
    # each process running this prints its allocator, then nmt's main(): a re-execution prints a second line
    probe = "from nmt import cli; from nmt.machine import allocator; print(allocator.active(), flush=True); cli.main()"
    for setting, expected in (("auto", ["system", "tcmalloc"]), ("system", ["system"])):
        out = subprocess.run([sys.executable, "-c", probe, "--version"], capture_output=True, text=True, timeout=120,
                             env={**env, "NMT_ALLOCATOR": setting})
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[:-1] == expected and out.stdout.startswith("system"), out.stdout


def test_bad_setting_is_one_line_error() -> None:
    env = {**os.environ, "NMT_ALLOCATOR": "bogus"}
    out = subprocess.run([sys.executable, "-m", "nmt", "--version"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: NMT_ALLOCATOR='bogus' is not one of auto, tcmalloc, system"
