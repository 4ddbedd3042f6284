"""``scripts/install`` installs TCMalloc exactly when the installed nmt would not find it (it once asked a check that
was always true, so a fresh machine never got it), and a failed apt-get only leaves a note."""

from __future__ import annotations

import os
import stat
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest

from nmt.machine.allocator import find_tcmalloc

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    loader = SourceFileLoader("nmt_install_script", str(ROOT / "scripts" / "install"))
    module = ModuleType(loader.name)
    loader.exec_module(module)
    return module


def _executable(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path, Path, Path]:
    """The script, with a stand-in venv python that reports what nmt.machine.allocator finds (the library exists once
    ``lib`` does) and a stand-in apt-get that logs its calls and installs ``lib`` (or fails, with ``apt-fails``)."""
    lib, log, fails = tmp_path / "libtcmalloc_minimal.so.4", tmp_path / "apt.log", tmp_path / "apt-fails"
    python = _executable(tmp_path / "python", f'if [ -e "{lib}" ]; then echo "{lib}"; else echo None; fi\n')
    apt = _executable(tmp_path / "apt-get", f'echo "$@" >> "{log}"\n[ -e "{fails}" ] && exit 100\n'
                                            f'case "$1" in install) touch "{lib}";; esac\n')
    script = _script()
    monkeypatch.setattr(script.shutil, "which", lambda name: str(apt) if name == "apt-get" else None)
    monkeypatch.setattr(script.os, "geteuid", lambda: 0)
    monkeypatch.setattr(script.sys, "platform", "linux")
    return script, python, lib, log


def test_missing_tcmalloc_is_installed(machine: tuple[ModuleType, Path, Path, Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    script, python, lib, log = machine
    assert not script.has_tcmalloc(python)
    script.install_tcmalloc(python)
    assert lib.exists() and "install -y -q --no-install-recommends libtcmalloc-minimal4" in log.read_text()
    assert script.has_tcmalloc(python)
    assert capsys.readouterr().err == ""


def test_present_tcmalloc_is_left_alone(machine: tuple[ModuleType, Path, Path, Path]) -> None:
    script, python, lib, log = machine
    lib.touch()
    script.install_tcmalloc(python)
    assert not log.exists()


def test_failed_apt_get_leaves_a_note(machine: tuple[ModuleType, Path, Path, Path],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    script, python, lib, log = machine
    (lib.parent / "apt-fails").touch()
    script.install_tcmalloc(python)  # never raises
    assert not lib.exists()
    assert log.read_text().splitlines()[1] == "update -q"  # retried after refreshing the package lists
    assert "could not install libtcmalloc-minimal4" in capsys.readouterr().err


def test_the_probe_runs_the_installed_allocator_finder() -> None:
    script = _script()
    assert script.has_tcmalloc(Path(sys.executable)) == (find_tcmalloc(environ=dict(os.environ)) is not None)


def test_missing_browser_is_installed_and_a_present_one_left_alone(machine: tuple[ModuleType, Path, Path, Path],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    script, _, _, log = machine
    script.install_browser()  # the fixture's which() finds apt-get only
    assert "install -y -q --no-install-recommends chromium chromium-driver" in log.read_text()
    log.unlink()
    monkeypatch.setattr(script.shutil, "which", lambda name: f"/usr/bin/{name}")
    script.install_browser()
    assert not log.exists()
