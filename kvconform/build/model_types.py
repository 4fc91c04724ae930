"""Which model types transformers maps to a causal LM, and the attention each runs by default (no torch).

The xdist controller plans every cell before its workers start: it reads these from the memo of transformers' auto
mappings and of ``_supports_sdpa`` (``kvconform.transformers_memo``), importing neither transformers nor torch.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from kvconform.matrix import ModelSpec
from kvconform.transformers_memo import auto_mapping, remembered


@cache
def causal_lm_names() -> dict[str, str]:
    """``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` of the installed transformers (model type -> class name)."""
    return auto_mapping("modeling_auto", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")


def causal_lm_model_types() -> list[str]:
    """Sorted model types that ``AutoModelForCausalLM`` maps in the installed transformers."""
    return sorted(causal_lm_names())


def model_class(model_type: str) -> Any:
    """The causal-LM class transformers maps ``model_type`` to (imports only that modeling module)."""
    import transformers

    return getattr(transformers, causal_lm_names()[model_type])


def model_attention(spec: ModelSpec) -> str:
    """The attention a matrix entry runs by default: eager for classes without sdpa, else sdpa.

    A checkpoint folder is read by the ``model_type`` of its config.json (remote code, hub ids and GGUF files are
    decided when loaded: ``attention_support``, and ``run_agreement`` never compares an attention with itself).
    """
    model_type = spec.model_type or _checkpoint_model_type(spec)
    if model_type is None:
        return "sdpa"
    class_name = causal_lm_names()[model_type]
    sdpa = remembered("supports-sdpa", class_name, lambda: bool(model_class(model_type)._supports_sdpa))
    return "sdpa" if sdpa else "eager"


def _checkpoint_model_type(spec: ModelSpec) -> str | None:
    """A local checkpoint's transformers ``model_type`` (``None`` for remote code or a type transformers lacks)."""
    from kvconform.build.checkpoint_files import CheckpointFileError, read_config

    if spec.source != "checkpoint":
        return None
    try:
        config = read_config(Path(spec.location))
    except CheckpointFileError:
        return None
    model_type = config.get("model_type")
    if "auto_map" in config or model_type not in causal_lm_names():
        return None
    return str(model_type)
