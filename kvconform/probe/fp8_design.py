"""The documented design of ``QuantizedCache(backend="fp8")``, as a reference for quantized cells.

The design (cache_utils.Fp8QuantizedLayer): one float32 scale per tensor, amax / 448 of the first
update, then frozen; every state is stored as ``float8_e4m3fn(x / scale)``, saturating at ±448; the
first update attends to its own unquantized states, later ones to the dequantized stored states.
``Fp8DesignLayer`` does the same on full-precision storage, so a decode through it gives the logits
and the stored values the design promises, to compare the real cache with at the dtype's tolerance.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from kvconform.build.models import Model
from kvconform.probe.quantized import QuantizedKVRecord

#: float8_e4m3fn's largest finite value: a frozen scale maps |x| > 448 × scale to ±448 × scale (saturation).
FP8_MAX = 448.0


def fp8_round_trip(tensor: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``tensor`` quantized to float8_e4m3fn with ``scale`` and back, in ``tensor``'s dtype (saturating, as torch casts)."""
    return ((tensor.float() / scale).to(torch.float8_e4m3fn).float() * scale).to(tensor.dtype)


def _calibrate(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.abs().amax().float() / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)


class Fp8DesignLayer(DynamicLayer):
    """The documented design of ``QuantizedCache(backend="fp8")`` on full-precision storage, the reference for
    quantized cells: a per-tensor scale calibrated on the first update (amax / 448) and then frozen; the first
    update attends to its own unquantized states, every later one to the float8 round trip of all stored states.

    It keeps the full-precision K/V, so the stored fp8 values can be compared with what the design stores.
    """

    scales: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        if self.scales is None:
            self.scales = (_calibrate(key_states), _calibrate(value_states))
            return key_states, value_states
        return fp8_round_trip(keys, self.scales[0]), fp8_round_trip(values, self.scales[1])


def design_cache(model: Model) -> Any:
    """A cache of ``Fp8DesignLayer`` for every layer ``QuantizedCache`` would quantize."""

    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[Fp8DesignLayer() for _ in range(layers)])


#: float8_e4m3fn keeps 3 mantissa bits: one rounding step is 2^-3 of a normal value, 2^-9 of the scale below.
FP8_RELATIVE_STEP = 2.0**-3
FP8_SUBNORMAL_STEP = 2.0**-9


def compare_with_design(cache: Any, design: Any) -> QuantizedKVRecord:
    """Every quantized layer of ``cache`` against the matching ``design_cache`` layer after the same inputs."""
    worst = (0.0, 0, 0, "keys")
    scale_problem, saturated, total, ratio, tokens = None, 0, 0, 0.0, 0
    first: tuple[int, int, str] | None = None  # the earliest layer, then position, off the design
    for index, (layer, reference) in enumerate(zip(cache.layers, design.layers, strict=False)):
        if getattr(layer, "_quantized_keys", None) is None or reference.scales is None:
            continue
        pairs = (("keys", layer._quantized_keys, reference.keys, reference.scales[0]),
                 ("values", layer._quantized_values, reference.values, reference.scales[1]))
        for name, (stored, scale), full, want_scale in pairs:
            if scale_problem is None and not torch.allclose(scale.float(), want_scale, rtol=1e-6, atol=0.0):
                scale_problem = f"layer {index} {name}: stored scale {float(scale):.6g} != amax of the first update / 448 = {float(want_scale):.6g}"
            expected = fp8_round_trip(full, want_scale).float()
            got = stored.float() * scale.float()
            step = FP8_RELATIVE_STEP * expected.abs() + FP8_SUBNORMAL_STEP * want_scale
            if got.shape != expected.shape:
                worst = max(worst, (float("inf"), index, 0, name))
                continue
            excess = torch.nan_to_num((got - expected).abs() / step, nan=float("inf")).amax(dim=(0, 1, 3))
            over = (excess > 1).nonzero()
            if first is None and len(over):
                first = (index, int(over[0]), name)
            worst = max(worst, (float(excess.max()), index, int(excess.argmax()), name))
            ratios = full.float().abs() / want_scale
            saturated += int((ratios > FP8_MAX).sum())
            total += ratios.numel()
            ratio = max(ratio, float(ratios.max()))
            tokens = full.shape[-2]
    layer, position, tensor = first if first is not None else worst[1:]
    return QuantizedKVRecord(tokens, worst[0], layer, position, tensor, scale_problem, saturated / max(total, 1), ratio)
