"""Atomic checkpoint files, loaded safely.

A checkpoint is a dict of tensors and plain containers only, so :func:`torch.load` runs with ``weights_only=True``
and an untrusted file cannot execute code. Writes go to a temporary file in the same directory, are fsynced, and
replace the target with :func:`os.replace`: a crash (even ``kill -9``) mid-write leaves the previous file intact.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from nmt.errors import NmtError

FORMAT_VERSION = 1


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Serialise ``payload`` (tensors and plain containers) atomically to ``path``."""
    buffer = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **payload}, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; unreadable or foreign files are a one-line :class:`NmtError`."""
    path = Path(path)
    if not path.is_file():
        raise NmtError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for truncated/corrupt/unsafe files
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NmtError(f"checkpoint {path} is corrupt, truncated or not an nmt checkpoint ({reason[:200]})") from None
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        raise NmtError(f"checkpoint {path} is not an nmt checkpoint (no model/config entries)")
    if payload.get("format_version") != FORMAT_VERSION:
        raise NmtError(f"checkpoint {path} has format version {payload.get('format_version')}, expected {FORMAT_VERSION}")
    return payload


def bytes_to_tensor(data: bytes) -> torch.Tensor:
    """Store raw bytes (e.g. the SentencePiece model) as a uint8 tensor, which ``weights_only`` loading accepts."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def tensor_to_bytes(tensor: torch.Tensor) -> bytes:
    return bytes(tensor.cpu().numpy().tobytes())
