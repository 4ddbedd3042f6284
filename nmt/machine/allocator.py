"""The process's malloc: TCMalloc preloaded where the system has it (``NMT_ALLOCATOR``).

PyTorch's CPU tensors come from ``malloc``. glibc's keeps most freed blocks of a training step in its heaps (its
mmap threshold rises to the largest block freed, so later blocks of every batch shape land in heaps it never
returns), which put our peak training RSS 300-1,200 MB above what is live. TCMalloc (gperftools, Debian package
``libtcmalloc-minimal4``) keeps per-size free lists that batches of other shapes reuse: on the bench model our
peak RSS drops below fairseq's, at the same or better speed (``docs/performance.md``). PyTorch's own CPU launcher
(``python -m torch.backends.xeon.run_cpu``) preloads it by default for the same reasons.

A library can only be preloaded before the process starts, so the ``nmt`` command re-executes itself once with
``LD_PRELOAD`` set (:func:`reexec_with_allocator`, before torch is imported) when the library is found and not
already loaded. ``NMT_ALLOCATOR``: ``auto`` (default: tcmalloc if found, else the system's), ``tcmalloc`` (an error
if it is not found), or ``system`` (never preload). :func:`active` names the allocator a process runs with.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from nmt.errors import NmtError

ENV = "NMT_ALLOCATOR"
CHOICES = ("auto", "tcmalloc", "system")
# gperftools' library names, minimal (no heap profiler) first
LIBRARIES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so")
SEARCH_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
               "/usr/local/lib64")
# TCMalloc reports every allocation over 1 GiB on stderr; a large batch is no news
QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)}


def choice(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """``NMT_ALLOCATOR``, checked (``auto`` when unset)."""
    value = environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise NmtError(f"{ENV}={value!r} is not one of {', '.join(CHOICES)}")
    return value


def find_tcmalloc(dirs: Sequence[str] = SEARCH_DIRS, environ: dict[str, str] | os._Environ[str] = os.environ,
                  ) -> Path | None:
    """The TCMalloc shared library: in the active virtual/conda environment's ``lib`` or a system directory."""
    prefixes = [environ[key] for key in ("VIRTUAL_ENV", "CONDA_PREFIX") if environ.get(key)]
    for directory in [*(str(Path(p) / "lib") for p in prefixes), *dirs]:
        for name in LIBRARIES:
            path = Path(directory) / name
            if path.is_file():
                return path
    return None


def active(maps: Path = Path("/proc/self/maps")) -> str:
    """``tcmalloc`` when this process has TCMalloc loaded, else ``system``."""
    try:
        text = maps.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "system"
    return "tcmalloc" if "libtcmalloc" in text else "system"


def preload_environment(environ: dict[str, str] | os._Environ[str] = os.environ,
                        dirs: Sequence[str] = SEARCH_DIRS) -> dict[str, str] | None:
    """The environment to re-execute with, or None when this process should run as it is (``system`` chosen,
    TCMalloc already preloaded, not Linux, or, under ``auto``, not found)."""
    wanted = choice(environ)
    preload = environ.get("LD_PRELOAD", "")
    if wanted == "system" or "libtcmalloc" in preload or not sys.platform.startswith("linux"):
        return None
    library = find_tcmalloc(dirs, environ)
    if library is None:
        if wanted == "tcmalloc":
            raise NmtError(f"{ENV}=tcmalloc but no TCMalloc library was found (install libtcmalloc-minimal4, "
                           f"or set {ENV}=system)")
        return None
    return {**environ, **QUIET, "LD_PRELOAD": ":".join(p for p in (str(library), preload) if p)}


def reexec_with_allocator() -> None:
    """Re-execute this process's command line (``sys.orig_argv``: interpreter options, ``-m nmt`` or the ``nmt``
    script, arguments) with TCMalloc preloaded when :func:`preload_environment` says so; returns only when the
    process runs as it is (``os.execve`` replaces it, same PID, otherwise)."""
    if "torch" in sys.modules:  # torch is loaded (nmt.cli imported by a program): not our process to replace
        return
    environ = preload_environment()
    if environ is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, environ)
