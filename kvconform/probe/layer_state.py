"""What each cache layer stores: K/V shapes, dtype and bytes, the states of recurrent layers, and
what a quantized layer really keeps (8-bit values, their scales, any full-precision residual)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvconform.compat import state_tensors
from kvconform.probe.cache_io import cache_layers


@dataclass
class LayerState:
    """One cache layer after a step: K/V shapes and bytes, or the states it keeps instead."""

    index: int
    layer_class: str
    keys_shape: tuple[int, ...] | None
    values_shape: tuple[int, ...] | None
    dtype: str | None
    kv_bytes: int
    state_shapes: tuple[tuple[int, ...], ...] = ()
    scale_bytes: int = 0
    """Quantized layers: bytes of the quantization scales (included in ``kv_bytes``)."""
    residual_bytes: int = 0
    """Quantized layers: bytes of the full-precision part kept beside the quantized one (included in ``kv_bytes``)."""


def snapshot_layers(cache: Any) -> list[LayerState]:
    """Shapes, dtype and tensor bytes of every layer's K/V (or its non-K/V states)."""
    states = []
    for index, layer in enumerate(cache_layers(cache)):
        quantized = quantized_state(index, layer)
        if quantized is not None:
            states.append(quantized)
            continue
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        kv = (keys, values) if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() >= 3 else None
        kv_bytes = sum(t.numel() * t.element_size() for t in kv) if kv else 0
        other = [
            tuple(t.shape)
            for name in ("conv_states", "recurrent_states")
            for t in state_tensors(getattr(layer, name, None))
            if isinstance(t, torch.Tensor)
        ]
        states.append(
            LayerState(
                index=index,
                layer_class=type(layer).__name__,
                keys_shape=tuple(kv[0].shape) if kv else None,
                values_shape=tuple(kv[1].shape) if kv else None,
                dtype=str(kv[0].dtype).removeprefix("torch.") if kv else None,
                kv_bytes=kv_bytes,
                state_shapes=tuple(other),
            )
        )
    return states


def _nbytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def quantized_state(index: int, layer: Any) -> LayerState | None:
    """The stored state of a quantized layer, or ``None`` for any other layer."""
    from transformers import cache_utils

    # Releases before the fp8 backend (5.20) have no BaseQuantizedLayer, and kvconform builds no other quantized cache.
    quantized_class = getattr(cache_utils, "BaseQuantizedLayer", None)
    if quantized_class is None or not isinstance(layer, quantized_class):
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
