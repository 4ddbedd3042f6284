"""The CPU this process runs on, as /proc/cpuinfo names it: model name, vendor and ISA flags."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

# ISA flags reported with every benchmark figure (x86 names from /proc/cpuinfo, then the Arm ones)
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "asimd", "sve", "bf16")


def cpuinfo_field(keys: tuple[str, ...]) -> str | None:
    """The value of the first /proc/cpuinfo line whose key is one of ``keys`` with a value; None where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys and value.strip():
            return value.strip()
    return None


@functools.cache
def cpu_flags() -> frozenset[str]:
    """ISA flags of the first CPU in /proc/cpuinfo (x86 ``flags``, Arm ``Features``); empty where there is none."""
    return frozenset((cpuinfo_field(("flags", "Features")) or "").split())


@functools.cache
def cpu_vendor() -> str:
    """The x86 ``vendor_id`` of /proc/cpuinfo (``GenuineIntel``, ``AuthenticAMD``); empty elsewhere."""
    return cpuinfo_field(("vendor_id",)) or ""


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else the platform's processor string)."""
    return (cpuinfo_field(("model name", "Model", "Hardware")) or platform.processor() or platform.machine()
            or "unknown CPU")
