"""What a quantized cache layer really stores: 8-bit values, their scales, and any full-precision residual.

transformers 5.24's ``QuantizedCache(backend="fp8")`` keeps each layer's keys and values as
``float8_e4m3fn`` tensors with one float32 scale each (calibrated on the first update, then frozen),
and no residual full-precision buffer. The layout has no public accessor, so it is read here, in one place.
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
    stored = [getattr(layer, "_quantized_keys", None), getattr(layer, "_quantized_values", None)]
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


#: float8_e4m3fn keeps 3 mantissa bits: rounding moves a normal value by at most 2^-4 of itself, and a
#: subnormal by at most half the smallest step, 2^-10 (in units of the scale; 2^-9 is allowed here).
FP8_RELATIVE_ERROR = 2.0**-4
FP8_ABSOLUTE_STEPS = 2.0**-9


@dataclass
class QuantizedKVRecord:
    """The first K/V layer of an fp8 cache after prefill + decode, against a fresh full-precision pass."""

    layer: int
    tokens: int
    worst_excess: float
    """max over elements of |dequantized − fresh| ÷ the fp8 rounding bound (≤ 1 is within rounding)."""
    worst_position: int
    worst_tensor: str
    scales: tuple[float, float]
    max_ratio_to_scale: float
    """max |fresh value| ÷ scale: above 448 (float8_e4m3fn's largest value) the frozen scale cannot hold it."""


@torch.inference_mode()
def run_quantized_kv(model: torch.nn.Module, plan: Any, keyword: str) -> QuantizedKVRecord:
    """Prefill P seeded tokens into ``QuantizedCache(fp8)``, decode N more one by one, and compare the first
    K/V layer (whose inputs do not depend on any cached attention) with a ``DynamicCache`` pass over all of them."""
    from transformers import DynamicCache

    from kvconform.cache_io import cache_layers, input_device, make_prompt, new_cache, returned_cache

    total = plan.prompt_length + plan.decode_steps
    vocab = model.config.get_text_config(decoder=True).vocab_size
    ids = make_prompt(plan.batch_size, total, plan.seed, vocab, input_device(model))
    cache = new_cache(model, "quantized", total)
    cache = returned_cache(model(input_ids=ids[:, : plan.prompt_length], use_cache=True, **{keyword: cache}), cache)
    for position in range(plan.prompt_length, total):
        cache = returned_cache(model(input_ids=ids[:, position : position + 1], use_cache=True, **{keyword: cache}), cache)
    fresh = DynamicCache(config=model.config.get_text_config(decoder=True))
    fresh = returned_cache(model(input_ids=ids, use_cache=True, **{keyword: fresh}), fresh)
    index, layer = next((i, l) for i, l in enumerate(cache_layers(cache)) if getattr(l, "_quantized_keys", None) is not None)
    reference = cache_layers(fresh)[index]
    worst = (0.0, 0, "keys")
    ratio = 0.0
    scales = []
    for name, stored, want in (("keys", layer._quantized_keys, reference.keys), ("values", layer._quantized_values, reference.values)):
        values, scale = stored
        scale_value = float(scale)
        scales.append(scale_value)
        got = values.float() * scale_value
        want = want.float()
        bound = FP8_RELATIVE_ERROR * want.abs() + FP8_ABSOLUTE_STEPS * scale_value
        excess = torch.nan_to_num((got - want).abs() / bound, nan=float("inf")).amax(dim=(0, 1, 3))  # per position
        position = int(excess.argmax())
        if float(excess[position]) > worst[0]:
            worst = (float(excess[position]), position, name)
        ratio = max(ratio, float(want.abs().max()) / scale_value)
    return QuantizedKVRecord(index, total, worst[0], worst[1], worst[2], (scales[0], scales[1]), ratio)
