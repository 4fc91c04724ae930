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
    quantized_tokens: int | None = None
    """Integer-quantized layers (quanto, HQQ): tokens held quantized; the shapes count these and the residual's."""


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
        shapes = [tuple(t.shape) for t in kv] if kv else [None, None]
        prompt = _prompt_part(layer)
        if prompt:  # the prompt kept apart from the window (reference sliding window): the layer holds both
            kv_bytes += sum(t.numel() * t.element_size() for t in prompt)
            shapes = [(*part.shape[:-2], part.shape[-2] + (t.shape[-2] if kv else 0), part.shape[-1])
                      for t, part in zip(kv or prompt, prompt, strict=True)]
            kv = kv or prompt
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
                keys_shape=shapes[0],
                values_shape=shapes[1],
                dtype=str(kv[0].dtype).removeprefix("torch.") if kv else None,
                kv_bytes=kv_bytes,
                state_shapes=tuple(other),
            )
        )
    return states


def _prompt_part(layer: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The prompt's K/V a layer keeps beside its ``keys``/``values`` window (``prefill_keys``/``prefill_values``: the
    reference sliding window layers of UnlimitedOcr, modeling_unlimited_ocr.py:1272-1323), else ``None``."""
    keys, values = getattr(layer, "prefill_keys", None), getattr(layer, "prefill_values", None)
    if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() >= 3:
        return keys, values
    return None


def _nbytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def quantized_state(index: int, layer: Any) -> LayerState | None:
    """The stored state of a quantized layer, or ``None`` for any other layer."""
    from transformers import cache_utils

    # Releases before the fp8 backend (5.20) have no BaseQuantizedLayer; kvconform reads fp8, quanto and HQQ layers.
    quantized_class = getattr(cache_utils, "BaseQuantizedLayer", None) or getattr(cache_utils, "QuantizedLayer", None)
    if quantized_class is None or not isinstance(layer, quantized_class):
        return None
    stored: list[Any] = [getattr(layer, "_quantized_keys", None), getattr(layer, "_quantized_values", None)]
    if stored == [None, None]:  # never updated (e.g. a cross-attention layer's slot)
        return LayerState(index=index, layer_class=type(layer).__name__, keys_shape=None, values_shape=None, dtype=None, kv_bytes=0)
    residual = [tensor if isinstance(tensor, torch.Tensor) and tensor.dim() == 4 else None
                for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None))]
    residual_bytes = sum(_nbytes(tensor) for tensor in residual)
    nbits = getattr(layer, "nbits", None)
    if nbits is not None:  # quanto / HQQ: packed integers, per-group scale and zero point, a full-precision residual
        parts = [_int_parts(part) for part in stored]
        shapes = [tuple(shape[:-2]) + (shape[-2] + (0 if held is None else held.shape[-2]), shape[-1])
                  for (shape, _, _), held in zip(parts, residual, strict=True)]
        scale_bytes = sum(scales for _, _, scales in parts)
        return LayerState(
            index=index, layer_class=type(layer).__name__, keys_shape=shapes[0], values_shape=shapes[1], dtype=f"int{nbits}",
            kv_bytes=sum(packed for _, packed, _ in parts) + scale_bytes + residual_bytes,
            scale_bytes=scale_bytes, residual_bytes=residual_bytes, quantized_tokens=parts[0][0][-2],
        )
    if not all(isinstance(part, tuple) and len(part) == 2 for part in stored):
        raise TypeError(f"{type(layer).__name__}: unknown quantized layout (kvconform reads the fp8 backend's (values, scale) pairs)")
    (keys, key_scale), (values, value_scale) = stored
    scale_bytes = _nbytes(key_scale) + _nbytes(value_scale)
    return LayerState(
        index=index, layer_class=type(layer).__name__, keys_shape=tuple(keys.shape), values_shape=tuple(values.shape),
        dtype=str(keys.dtype).removeprefix("torch."), kv_bytes=_nbytes(keys) + _nbytes(values) + scale_bytes + residual_bytes,
        scale_bytes=scale_bytes, residual_bytes=residual_bytes,
    )


def _int_parts(part: Any) -> tuple[tuple[int, ...], int, int]:
    """A quanto or HQQ quantized tensor: its logical shape, the bytes of its packed values, of its scales and zero points."""
    if isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], dict):  # HQQ: (packed, meta)
        packed, meta = part
        return tuple(meta["shape"]), _nbytes(packed), _nbytes(meta.get("scale")) + _nbytes(meta.get("zero"))
    packed = getattr(getattr(part, "_data", None), "_data", None)
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"{type(part).__name__}: unknown quantized layout (kvconform reads quanto's PackedTensor and HQQ's (packed, meta))")
    return tuple(part.shape), _nbytes(packed), _nbytes(getattr(part, "_scale", None)) + _nbytes(getattr(part, "_shift", None))
