"""The documented design of ``QuantizedCache`` with an integer backend (quanto, HQQ), as a reference for its cells.

The design (cache_utils.QuantizedLayer, after KIVI, arXiv 2402.02750 Algorithm 1): the first update quantizes the
prefill's K/V and attends to them unquantized; every later update attends to [the dequantized quantized part, the
full-precision residual, the new states]; when the residual and the new states reach ``residual_length`` tokens,
all of that is quantized again (group-wise, ``q_group_size``, ``nbits``, along ``axis_key``/``axis_value`` 0) and the
residual is emptied. ``reorder_cache`` moves every row's states (transformers defers the quantized part's move to its
next dequantization). ``IntDesignLayer`` does the same with the backend's own quantize/dequantize round trip (the
backend is a separate package: what it rounds is its design; what transformers does around it is under test).

``compare_with_design`` then reads what the real layer stores with kvconform's own unpacking of the documented
layouts (quanto: ``PackedTensor`` rows of ``8 // nbits`` values, ``scale × q − shift`` per group of
``q_group_size`` consecutive values; HQQ: the tensor as ``[q_group_size, numel / q_group_size]``, bit planes of
``8 // nbits`` row blocks, ``(q − zero) × scale`` per column), not the backend's dequantization.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from kvconform.build.models import Model
from kvconform.probe.quantized import IntQuantizedRecord


def round_trip(tensor: torch.Tensor, config: dict[str, Any]) -> torch.Tensor:
    """``tensor`` quantized and dequantized by the backend's own functions, as transformers' layer calls them."""
    if config["backend"] == "quanto":
        from optimum.quanto import MaxOptimizer, qint2, qint4, quantize_weight

        qtype = qint4 if config["nbits"] == 4 else qint2
        scale, shift = MaxOptimizer()(tensor, qtype, 0, config["q_group_size"])
        return quantize_weight(tensor, qtype, 0, scale, shift, config["q_group_size"]).dequantize()
    from hqq.core.quantize import Quantizer

    packed, meta = Quantizer.quantize(tensor, axis=0, device=tensor.device, compute_dtype=tensor.dtype,
                                      nbits=config["nbits"], group_size=config["q_group_size"])
    meta["compute_dtype"] = tensor.dtype
    packed, meta = Quantizer.cuda(packed, meta=meta, device=tensor.device)
    return Quantizer.dequantize(packed, meta)


class IntDesignLayer(DynamicLayer):
    """The residual design of ``QuantizedLayer`` on full-precision storage: ``quantized`` holds the dequantized
    quantized part (the backend's round trip), ``residual`` the full-precision tokens since the last flush."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.config = config
        self.quantized: tuple[torch.Tensor, torch.Tensor] | None = None
        self.residual: tuple[torch.Tensor, torch.Tensor] | None = None
        self.flushed_input: tuple[torch.Tensor, torch.Tensor] | None = None
        """What the last quantization quantized (full precision), for the round-trip distance."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self.quantized is None or self.residual is None:
            self.lazy_initialization(key_states, value_states)
            self._quantize(key_states, value_states)
            return key_states, value_states
        keys = torch.cat([self.quantized[0], self.residual[0], key_states], dim=-2)
        values = torch.cat([self.quantized[1], self.residual[1], value_states], dim=-2)
        if self.residual[0].shape[-2] + key_states.shape[-2] >= self.config["residual_length"]:
            self._quantize(keys, values)
        else:
            self.residual = (torch.cat([self.residual[0], key_states], dim=-2), torch.cat([self.residual[1], value_states], dim=-2))
        return keys, values

    def _quantize(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.flushed_input = (keys, values)
        self.quantized = (round_trip(keys.contiguous(), self.config), round_trip(values.contiguous(), self.config))
        self.residual = (keys[..., :0, :], values[..., :0, :])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Every row's state moves with it (transformers defers the quantized part's move to its next dequantization:
        the same states)."""
        if self.quantized is None or self.residual is None:
            return
        order = beam_idx.to(self.quantized[0].device)
        self.quantized = (self.quantized[0].index_select(0, order), self.quantized[1].index_select(0, order))
        self.residual = (self.residual[0].index_select(0, order), self.residual[1].index_select(0, order))

    def get_seq_length(self) -> int:
        if self.quantized is None or self.residual is None:
            return 0
        return self.quantized[0].shape[-2] + self.residual[0].shape[-2]


def design_cache(model: Model, config: dict[str, Any]) -> Any:
    """A cache of ``IntDesignLayer`` for every layer ``QuantizedCache`` would quantize."""
    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[IntDesignLayer(config) for _ in range(layers)])


def stored_dequantized(part: Any, nbits: int) -> torch.Tensor:
    """A stored quantized tensor dequantized by kvconform from its packed bits and its per-group scale and zero
    point, as the backend documents the layout (``TypeError`` for any other layout)."""
    mask, per_byte = 2**nbits - 1, 8 // nbits
    if isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], dict):  # HQQ: (packed, meta)
        packed, meta = part
        rows = [(packed >> (nbits * (per_byte - 1 - i))) & mask for i in range(per_byte)]
        levels = torch.cat(rows).float()  # bit plane i holds row block i: [q_group_size, numel / q_group_size]
        return ((levels - meta["zero"].float()) * meta["scale"].float()).reshape(meta["shape"])
    data, scale, shift = getattr(part, "_data", None), getattr(part, "_scale", None), getattr(part, "_shift", None)
    bits = getattr(data, "_data", None)
    if not (isinstance(bits, torch.Tensor) and isinstance(data, torch.Tensor) and isinstance(scale, torch.Tensor)
            and isinstance(shift, torch.Tensor) and shift.dtype.is_floating_point):
        raise TypeError(f"{type(part).__name__}: unknown quantized layout (kvconform reads quanto's PackedTensor and "
                        "HQQ's (packed, meta) pairs)")
    groups = torch.cat([(bits >> (nbits * i)) & mask for i in range(per_byte)])[: data.shape[0]]  # quanto: row blocks
    return (scale.float() * groups.float() - shift.float()).reshape(part.shape)


def compare_with_design(cache: Any, design: Any, config: dict[str, Any]) -> IntQuantizedRecord:
    """Every quantized layer of ``cache`` against the matching ``design_cache`` layer after the same inputs; the
    first layer off the design is the finding (later layers read its output)."""
    record = IntQuantizedRecord(quantized_tokens=0, residual_tokens=0, worst_delta=0.0, worst_scale=0.0,
                                relative_limit=0.0, round_trip_delta=0.0)
    for index, (layer, reference) in enumerate(zip(cache.layers, design.layers, strict=False)):
        if getattr(layer, "_quantized_keys", None) is None or reference.quantized is None:
            continue
        problem = _residual_problem(layer, reference, config)
        stored = (layer._quantized_keys, layer._quantized_values)
        for name, part, expected, original in zip(("keys", "values"), stored, reference.quantized, reference.flushed_input or (),
                                                   strict=False):
            got = stored_dequantized(part, config["nbits"])
            if got.shape != expected.shape:
                problem = problem or f"{list(got.shape)} {name} stored quantized, the design {list(expected.shape)}"
                continue
            record.relative_limit = 4 * torch.finfo(expected.dtype).eps
            delta = torch.nan_to_num((got - expected.float()).abs(), nan=float("inf"))
            scale = float(expected.float().abs().max())
            record.worst_scale = max(record.worst_scale, scale)
            record.round_trip_delta = max(record.round_trip_delta, float((expected.float() - original.float()).abs().max()))
            worst = float(delta.max())
            if worst > record.relative_limit * scale and problem is None:
                position = int(delta.amax(dim=tuple(d for d in range(delta.dim()) if d != delta.dim() - 2)).argmax())
                problem = (f"position {position} ({name}): the stored packed values with their scale and zero point dequantize "
                           f"{worst:.3g} away from the design's quantized part (limit {record.relative_limit * scale:.2g})")
            record.worst_delta = max(record.worst_delta, worst)
        record.quantized_tokens = reference.quantized[0].shape[-2]
        record.residual_tokens = reference.residual[0].shape[-2] if reference.residual is not None else 0
        if problem is not None and record.problem is None:
            record.problem = f"layer {index}, {problem}" if problem.startswith("position") else f"layer {index}: {problem}"
    return record


def _residual_problem(layer: Any, reference: IntDesignLayer, config: dict[str, Any]) -> str | None:
    """How the real layer's full-precision residual differs from the design's, or ``None``."""
    residual = [tensor if isinstance(tensor, torch.Tensor) and tensor.dim() == 4 else None for tensor in (layer.keys, layer.values)]
    held = [0 if tensor is None else tensor.shape[-2] for tensor in residual]
    want = reference.residual if reference.residual is not None else None
    tokens = 0 if want is None else want[0].shape[-2]
    if held != [tokens, tokens]:
        return f"the full-precision residual holds {held[0]} tokens, the design {tokens} (residual_length {config['residual_length']})"
    if tokens and want is not None and not all(got is not None and torch.equal(got, expected)
                                               for got, expected in zip(residual, want, strict=True)):
        return "the full-precision residual differs from the design's"
    return None
