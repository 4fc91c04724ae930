"""A second stage's ``generate()`` call, as the model's own ``generate()`` makes it.

Models that speak through a second generating stage (Qwen2.5-Omni's talker, SeamlessM4T's text-to-unit model) build
that stage's inputs inside their own ``generate()`` and call the stage's ``generate()`` with them. A cell drives the
stage on exactly those inputs: it runs the outer ``generate()`` once with a stand-in for the stage's, keeps the
arguments and stops there; the generate check runs it with a wrapper that keeps the stage's scores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kvconform.build.models import Model


class _Called(Exception):
    """Raised by the stand-in stage ``generate`` once it has kept its arguments."""


def through_stage(model: Model, stage: str, settings: dict[str, Any], stage_generate: Callable[..., Any]) -> Any:
    """``model.generate(**settings)`` with ``stage_generate`` in place of ``model.<stage>.generate``."""
    module = getattr(model, stage)
    module.generate = stage_generate
    try:
        with torch.inference_mode():
            return model.generate(**settings)
    finally:
        del module.generate


def stage_call(model: Model, stage: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``model.generate(**settings)`` calls ``model.<stage>.generate`` with (tensors cloned before the
    stage runs); the outer call stops there."""
    kept: dict[str, Any] = {}

    def keep(**call: Any) -> Any:
        kept.update({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in call.items()})
        raise _Called

    try:
        through_stage(model, stage, settings, keep)
    except _Called:
        pass
    if not kept:
        raise RuntimeError(f"{type(model).__name__}.generate() returned without calling its {stage}")
    return kept
