"""What a quantized cache layer really stores: 8-bit (or packed 4- and 2-bit) values, their scales, and any
full-precision residual.

transformers 5.24's ``QuantizedCache(backend="fp8")`` keeps each layer's keys and values as
``float8_e4m3fn`` tensors with one float32 scale each (calibrated on the first update, then frozen),
and no residual full-precision buffer. The layout has no public accessor, so it is read here, in one place.

By design the frozen scale saturates: a later token whose K/V exceed the first update's amax is stored
as ±448 × scale, so a quantized cell's logits may leave the full-precision reference by far more than
any rounding tolerance (up to 0.80 × max|logit| on the shrunk sweep). Quantized cells are therefore
judged against the design itself (``fp8_design.py``), with the dtype's own tolerance; the distance to
full precision and the saturation are reported as findings. The integer backends (quanto, HQQ) keep a
full-precision residual of up to ``residual_length − 1`` tokens and re-quantize everything when it fills; they are
judged against that residual design (``int_design.py``) in the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Per layer: one scale for the keys and one for the values (per-tensor quantization).
SCALES_PER_LAYER = 2


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


@dataclass
class IntQuantizedRecord:
    """An integer-quantized cache (quanto, HQQ) against its documented residual design, layer by layer."""

    quantized_tokens: int
    """Tokens the design holds quantized after the last step (the rest are its full-precision residual)."""
    residual_tokens: int
    worst_delta: float
    """max |stored bits dequantized by kvconform − the design's quantized part| over layers and values."""
    worst_scale: float
    """max |design's quantized part| over every layer (the limit is relative to it)."""
    relative_limit: float
    """4 rounding steps of the K/V dtype: kvconform dequantizes in float32, the backend in the K/V dtype."""
    round_trip_delta: float
    """max |the design's quantized part − the full-precision states it quantized|: the quantization's own error."""
    problem: str | None = None
    """The first layer off the design: its residual (tokens, values) or its packed values beyond the limit."""
