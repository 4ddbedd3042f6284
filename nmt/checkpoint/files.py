"""Atomic checkpoint files, loaded safely.

A checkpoint is a dict of tensors and plain containers only, so :func:`torch.load` runs with ``weights_only=True``
and an untrusted file cannot execute code. Writes go to a temporary file in the same directory, are fsynced, and
replace the target with :func:`os.replace` (:mod:`nmt.atomic`; the file gets the user's umask): a crash (even
``kill -9``) mid-write leaves the previous file intact (and a temporary that :func:`remove_temporaries` deletes).
Loading first checks every zip member's CRC-32, which :func:`torch.load` skips, so a damaged file is an error rather
than silently wrong weights.
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from nmt.atomic import TMP_SUFFIX, atomic_write_bytes
from nmt.errors import NmtError

__all__ = ["TMP_SUFFIX", "atomic_write_bytes", "checkpoint_bytes", "load_checkpoint", "remove_temporaries",
           "save_checkpoint"]

FORMAT_VERSION = 1


def remove_temporaries(directory: str | Path) -> int:
    """Delete the partial files of writes that were killed (``kill -9`` skips the cleanup in
    :func:`atomic_write_bytes`); call it only where no other process is writing. Returns how many were removed."""
    stale = list(Path(directory).glob(f".*.pt.*{TMP_SUFFIX}"))
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def checkpoint_bytes(payload: dict[str, Any]) -> bytes:
    """The file content of a checkpoint of ``payload`` (tensors and plain containers)."""
    buffer = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **payload}, buffer)
    return buffer.getvalue()


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Serialise ``payload`` (tensors and plain containers) atomically to ``path``."""
    atomic_write_bytes(path, checkpoint_bytes(payload))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; unreadable or foreign files are a one-line :class:`NmtError`."""
    path = Path(path)
    if path.is_dir():
        raise NmtError(f"checkpoint {path} is a directory, not a checkpoint file (e.g. {path}/checkpoint_best.pt)")
    if not path.is_file():
        raise NmtError(f"checkpoint not found: {path}")
    _verify_archive(path)
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:  # weights_only met something other than tensors and plain containers
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = f"a pickled {found.group(1)}" if found else "pickled objects other than tensors"
        raise NmtError(f"checkpoint {path} holds {what}, which could run code when loaded; refused (not an nmt "
                       "checkpoint, or a tampered one)") from None
    except Exception as exc:  # torch raises many types for truncated/corrupt files
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NmtError(f"checkpoint {path} is corrupt, truncated or not an nmt checkpoint ({reason[:200]})") from None
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        raise NmtError(f"checkpoint {path} is not an nmt checkpoint (no model/config entries)")
    if payload.get("format_version") != FORMAT_VERSION:
        version = payload.get("format_version")
        raise NmtError(f"checkpoint {path} has format version {version}, expected {FORMAT_VERSION}")
    return payload


def _verify_archive(path: Path) -> None:
    """Check the zip container and every member's CRC-32, which :func:`torch.load` does not: a damaged byte in
    tensor data would otherwise load as silently wrong weights."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise NmtError(f"checkpoint {path} is truncated, corrupt or not an nmt checkpoint (not a complete zip "
                       f"archive: {exc})") from None
    if damaged is not None:
        raise NmtError(f"checkpoint {path} is corrupt: member {damaged} fails its CRC-32 check")


def bytes_to_tensor(data: bytes) -> torch.Tensor:
    """Store raw bytes (e.g. the SentencePiece model) as a uint8 tensor, which ``weights_only`` loading accepts."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def tensor_to_bytes(tensor: torch.Tensor) -> bytes:
    return bytes(tensor.cpu().numpy().tobytes())


def model_payload(state: dict[str, torch.Tensor], config: dict[str, Any], spm: bytes, spec: Mapping[str, Any],
                  step: int = 0, epoch: int = 0) -> dict[str, Any]:
    """The entries every checkpoint has, enough to translate (:func:`restore_model`); training adds its state.

    Args:
        state: the model's ``state_dict()``.
        config: the resolved config as a plain dict (:func:`nmt.config.config_to_dict`).
        spm: the SentencePiece model's bytes.
        spec: the entries of what the model was built from (:meth:`nmt.model.spec.ModelSpec.payload`:
            ``vocab_size``, ``qknorm_length``, ``spm_sha256``).
        step: training updates behind the weights.
        epoch: the epoch they were reached in.
    """
    return {"model": state, "config": config, "spm": bytes_to_tensor(spm), **spec, "step": step,
            "epoch": epoch}


def sentencepiece_bytes(path: str | Path) -> bytes:
    """The SentencePiece model ``path`` names for ``--spm-model``: a checkpoint's own (its ``spm`` entry) or the bytes
    of any other file (an ``spm.model``; the data layer checks that it is one)."""
    source = Path(path)
    if not source.is_file():
        raise NmtError(f"--spm-model {source}: file not found" if not source.exists() else
                       f"--spm-model {source} is not a file")
    if not zipfile.is_zipfile(source):
        return source.read_bytes()
    payload = load_checkpoint(source)
    if "spm" not in payload:
        raise NmtError(f"--spm-model {source}: a checkpoint without a SentencePiece model")
    return tensor_to_bytes(payload["spm"])
