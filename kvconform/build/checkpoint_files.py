"""Read a checkpoint folder's files with errors that name the file and what is wrong with it (no torch).

transformers reports a broken ``config.json`` as a bare ``JSONDecodeError`` and a truncated
``.safetensors`` as ``SafetensorError: incomplete metadata``, naming neither file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl")


class ModelUnavailable(RuntimeError):
    """The checkpoint is not on this machine (missing folder or file, offline hub cache miss)."""


class CheckpointFileError(ValueError):
    """A checkpoint file that cannot be used; the message names the file."""


def read_config(folder: str | Path) -> dict[str, Any]:
    """``folder/config.json`` as a dict; raise :class:`CheckpointFileError` naming the file otherwise."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise CheckpointFileError(f"{folder}: no config.json found in this folder (a transformers checkpoint folder holds one)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointFileError(f"{path}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise CheckpointFileError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "re-download or re-save the checkpoint") from None
    if not isinstance(raw, dict):
        raise CheckpointFileError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    return raw


def safetensors_problem(path: str | Path) -> str | None:
    """What is wrong with a ``.safetensors`` file's header and length, or ``None`` when it is whole."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"{path}: truncated ({size} bytes, shorter than the 8-byte header length)"
        (header_len,) = struct.unpack("<Q", head)
        if 8 + header_len > size:
            return f"{path}: truncated (its header says {header_len:,} bytes of metadata, the file holds {size:,} bytes in all)"
        try:
            header = json.loads(handle.read(header_len))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return f"{path}: not a safetensors file (its {header_len:,}-byte header is not JSON)"
    if not isinstance(header, dict):
        return f"{path}: not a safetensors file (its header is not a JSON object)"
    offsets = [entry.get("data_offsets", [0, 0]) for name, entry in header.items()
               if name != "__metadata__" and isinstance(entry, dict)]
    needed = max((int(end) for _, end in offsets), default=0)
    held = size - 8 - header_len
    if needed > held:
        return f"{path}: truncated (its tensors need {needed:,} bytes of data, the file holds {held:,})"
    return None


def weight_files(folder: str | Path) -> list[str]:
    """Names of the weight files in ``folder`` (safetensors or pickle), sorted."""
    return sorted(p.name for p in Path(folder).iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))


def check_safetensors_files(folder: str | Path) -> None:
    """Raise :class:`CheckpointFileError` naming the first truncated or malformed ``.safetensors`` in ``folder``."""
    for name in weight_files(folder):
        if name.endswith(".safetensors"):
            problem = safetensors_problem(Path(folder) / name)
            if problem:
                raise CheckpointFileError(f"{problem}; re-download or re-save the checkpoint")
