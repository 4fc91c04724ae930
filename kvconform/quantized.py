"""What a quantized cache layer really stores: 8-bit values, their scales, and any full-precision residual.

transformers 5.24's ``QuantizedCache(backend="fp8")`` keeps each layer's keys and values as
``float8_e4m3fn`` tensors with one float32 scale each (calibrated on the first update, then frozen),
and no residual full-precision buffer. The layout has no public accessor, so it is read here, in one place.

By design the frozen scale saturates: a later token whose K/V exceed the first update's amax is stored
as ±448 × scale, so a quantized cell's logits may leave the full-precision reference by far more than
any rounding tolerance (up to 0.80 × max|logit| on the shrunk sweep). Quantized cells are therefore
judged against the design itself (``fp8_design.py``), with the dtype's own tolerance; the distance to
full precision and the saturation are reported as findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvconform.cache_io import LayerState

#: Per layer: one scale for the keys and one for the values (per-tensor quantization).
SCALES_PER_LAYER = 2


def _nbytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def quantized_state(index: int, layer: Any) -> LayerState | None:
    """The stored state of a quantized layer, or ``None`` for any other layer."""
    from transformers.cache_utils import BaseQuantizedLayer

    if not isinstance(layer, BaseQuantizedLayer):
        return None
    stored: list[Any] = [getattr(layer, "_quantized_keys", None), getattr(layer, "_quantized_values", None)]
    if stored == [None, None]:  # never updated (e.g. a cross-attention layer's slot)
        return LayerState(index=index, layer_class=type(layer).__name__, keys_shape=None, values_shape=None, dtype=None, kv_bytes=0)
    if not all(isinstance(part, tuple) and len(part) == 2 for part in stored):
        raise TypeError(f"{type(layer).__name__}: unknown quantized layout (kvconform reads the fp8 backend's (values, scale) pairs)")
    (keys, key_scale), (values, value_scale) = stored
    scale_bytes = _nbytes(key_scale) + _nbytes(value_scale)
    residual = _nbytes(getattr(layer, "keys", None)) + _nbytes(getattr(layer, "values", None))
    return LayerState(
        index=index, layer_class=type(layer).__name__, keys_shape=tuple(keys.shape), values_shape=tuple(values.shape),
        dtype=str(keys.dtype).removeprefix("torch."), kv_bytes=_nbytes(keys) + _nbytes(values) + scale_bytes + residual,
        scale_bytes=scale_bytes, residual_bytes=residual,
    )


@dataclass
class QuantizedKVRecord:
    """The fp8 cache's stored values against what its documented design stores, layer by layer."""

    tokens: int
    worst_excess: float
    """max over layers and elements of |dequantized − design| ÷ float8 rounding at that value (≤ 1: within rounding)."""
    first_layer: int
    """The first layer, and in it the first position and tensor, whose stored values are off the design."""
    first_position: int
    first_tensor: str
    scale_problem: str | None
    """Set when a stored scale is not amax(first update) / 448 of the design."""
    saturated_fraction: float
    """Share of the design's K/V values beyond 448 × their frozen scale (stored as ±448 × scale by design)."""
    max_ratio_to_scale: float
    """max |full-precision value| ÷ its frozen scale over all layers (> 448: saturated)."""
