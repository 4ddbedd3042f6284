"""The CPU this process runs on, as /proc/cpuinfo names it: model name and ISA flags."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

# ISA flags reported with every benchmark figure (x86 names from /proc/cpuinfo, then the Arm ones)
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "asimd", "sve", "bf16")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """ISA flags of the first CPU in /proc/cpuinfo (x86 ``flags``, Arm ``Features``); empty where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@functools.cache
def cpu_vendor() -> str:
    """The x86 ``vendor_id`` of /proc/cpuinfo (``GenuineIntel``, ``AuthenticAMD``); empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return ""


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
