"""Validate the plugin's command-line options up front, like the matrix file (no torch, no pytest).

Every problem is one ``MatrixError`` line naming the option, the value, the allowed values and close matches;
the plugin turns it into a pytest usage error (exit 4) before any model is built.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvconform.matrix import ATTENTIONS, CACHES, DEVICES, DTYPES, MatrixError, ModelSpec, unknown_message

GPU_HINT = " (for a GPU pass --device cuda and choose which one with CUDA_VISIBLE_DEVICES={index})"
#: Option name -> (Settings field, allowed values).
NARROWING = {"--dtype": ("dtypes", DTYPES), "--device": ("devices", DEVICES), "--cache": ("caches", CACHES),
             "--attn": ("attentions", ATTENTIONS)}


def check_choices(option: str, values: list[str]) -> tuple[str, ...]:
    """``values`` without repeats, or ``MatrixError`` for the first one that is not allowed."""
    allowed = NARROWING[option][1]
    for value in values:
        if value not in allowed:
            gpu = option == "--device" and (value == "gpu" or value.startswith("cuda:"))
            hint = GPU_HINT.format(index=value.partition(":")[2] or "N") if gpu else ""
            raise MatrixError(unknown_message(f"{option}: unknown value", value, allowed) + hint)
    return tuple(dict.fromkeys(values))


def narrow(spec: ModelSpec, option: str, values: tuple[str, ...]) -> ModelSpec:
    """``spec`` limited to ``values`` of one narrowing option (already checked by :func:`check_choices`)."""
    field = NARROWING[option][0]
    narrowed: dict[str, Any] = {field: values}
    return replace(spec, settings=replace(spec.settings, **narrowed))


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)`` with ``N >= 1`` and ``1 <= I <= N``."""
    index, slash, count = text.partition("/")
    if not (slash and index.isdigit() and count.isdigit()):
        raise MatrixError(f"--shard expects I/N such as 2/4, got {text!r}")
    i, n = int(index), int(count)
    if n < 1:
        raise MatrixError(f"--shard {text}: N (the number of shards) must be >= 1, got {n}")
    if not 1 <= i <= n:
        raise MatrixError(f"--shard {text}: I (this shard) must be between 1 and N={n}, got {i}")
    return i, n
