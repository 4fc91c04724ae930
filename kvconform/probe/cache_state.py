"""Every tensor a cache holds, by layer and kind (keys, values, conv and recurrent states), and two caches compared.

Multi-token cached forwards (a chunked prefill, a copied prefix extended by several tokens) must leave a cache
equal to one prefill of the same tokens: the K/V of attention layers and the conv and recurrent states of SSM and
linear-attention layers alike. A hybrid whose attention layers agree while one recurrent state does not is the
fault these comparisons exist to name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvconform.compat import state_tensors
from kvconform.probe.cache_io import cache_layers, cross_layers
from kvconform.probe.kv_compare import KV_ABSOLUTE_LIMIT

#: Layer attributes holding states other than K/V, and what a message calls them.
STATE_ATTRIBUTES = {"conv_states": "conv state", "recurrent_states": "recurrent state"}
#: Cache attributes (not layers) holding per-layer states, a list or a dict by layer index: MiniMaxCache keeps its
#: lightning-attention states in ``linear_cache``, xLSTMCache its (C, n, m) states in ``rnn_state``.
CACHE_STATES = {"linear_cache": "linear-attention state", "rnn_state": "recurrent state"}

Key = tuple[int, str]
"""``(layer index, tensor name)``, e.g. ``(1, "conv state 0")``."""


#: The relative limit of a whole cache tensor (K/V, conv or recurrent state) against one prefill's, on the tensor's
#: own max |value|: conv and recurrent states have no head-dimension layout for kv_parity's per-dimension scale.
STATE_RELATIVE_LIMIT = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1e-1}

def cache_tensors(cache: Any) -> dict[Key, tuple[str, torch.Tensor]]:
    """Every tensor of ``cache`` keyed by layer and name, with its layer's class name."""
    found: dict[Key, tuple[str, torch.Tensor]] = {}
    for index, layer in enumerate(cache_layers(cache)):
        name = type(layer).__name__
        for attribute in ("keys", "values"):
            tensor = getattr(layer, attribute, None)
            if isinstance(tensor, torch.Tensor) and tensor.dim() >= 3:
                found[(index, attribute)] = (name, tensor)
        for attribute, label in STATE_ATTRIBUTES.items():
            for state, tensor in enumerate(state_tensors(getattr(layer, attribute, None))):
                if isinstance(tensor, torch.Tensor):
                    found[(index, f"{label} {state}")] = (name, tensor)
    for index, layer in enumerate(cross_layers(cache)):  # an encoder-decoder cache's other half
        for attribute in ("keys", "values"):
            tensor = getattr(layer, attribute, None)
            if isinstance(tensor, torch.Tensor) and tensor.dim() >= 3:
                found[(index, f"cross-attention {attribute}")] = (type(layer).__name__, tensor)
    for attribute, label in CACHE_STATES.items():
        held = getattr(cache, attribute, None)
        entries = held.items() if isinstance(held, dict) else enumerate(held if isinstance(held, list) else [])
        for index, entry in entries:
            for state, tensor in enumerate(state_tensors(entry)):
                if isinstance(tensor, torch.Tensor):
                    found[(int(index), f"{label} {state}")] = (type(cache).__name__, tensor)
    return found


def snapshot(cache: Any) -> dict[Key, tuple[str, torch.Tensor]]:
    """A copy of every tensor of ``cache`` (later forwards update states in place)."""
    return {key: (name, tensor.detach().clone()) for key, (name, tensor) in cache_tensors(cache).items()}


@dataclass(frozen=True)
class StateDelta:
    """One cache tensor against the same tensor of a reference cache."""

    layer: int
    layer_class: str
    tensor: str
    delta: float
    limit: float
    problem: str | None = None
    """Set when the tensor cannot be compared (missing on one side, another shape)."""

    @property
    def kv(self) -> bool:
        return self.tensor.endswith(("keys", "values"))

    def describe(self) -> str:
        where = f"layer {self.layer} ({self.layer_class}) {self.tensor}"
        return f"{where}: {self.problem}" if self.problem else f"{where} |Δ| {self.delta:.3g} > limit {self.limit:.3g}"


@dataclass(frozen=True)
class StateComparison:
    """A cache against a reference cache of the same tokens: how many tensors were compared, which differ."""

    compared: int
    kv_compared: int
    differing: tuple[StateDelta, ...]
    worst_ratio: float

    @property
    def states_compared(self) -> int:
        return self.compared - self.kv_compared

    def summary(self) -> str:
        """What was compared and, where any differ, the first and whether K/V or states."""
        scope = f"{self.compared} cache tensors ({self.kv_compared} K/V, {self.states_compared} conv/recurrent state)"
        if not self.differing:
            return f"all {scope} equal one prefill's (worst {self.worst_ratio:.2g} of the limit)"
        kinds = sorted({"K/V" if d.kv else "conv/recurrent state" for d in self.differing})
        layers = sorted({d.layer for d in self.differing})
        text = f"{len(self.differing)} of {scope} differ ({' and '.join(kinds)}; layers {layers}), first {self.differing[0].describe()}"
        if not any(d.kv for d in self.differing) and self.kv_compared:
            text += "; every K/V tensor agrees: the conv/recurrent state is what differs"
        return text


def compare_states(cache: dict[Key, tuple[str, torch.Tensor]], reference: dict[Key, tuple[str, torch.Tensor]],
                   dtype: torch.dtype) -> StateComparison:
    """Every tensor of ``cache`` against ``reference``'s within ``1e-6 + rtol × max|reference|`` (``STATE_RELATIVE_LIMIT``
    of ``dtype``), in layer order."""
    rtol = STATE_RELATIVE_LIMIT.get(dtype, STATE_RELATIVE_LIMIT[torch.float32])
    differing, worst, kv = [], 0.0, 0
    for key in sorted(set(cache) | set(reference)):
        layer, tensor = key
        name = (cache.get(key) or reference[key])[0]
        kv += tensor.endswith(("keys", "values"))
        if key not in cache or key not in reference:
            side = "the multi-token run" if key not in cache else "one prefill"
            differing.append(StateDelta(layer, name, tensor, 0.0, 0.0, f"missing in {side}'s cache"))
            continue
        got, want = cache[key][1], reference[key][1]
        if got.shape != want.shape:
            differing.append(StateDelta(layer, name, tensor, 0.0, 0.0, f"shape {list(got.shape)} != one prefill's {list(want.shape)}"))
            continue
        delta = float(torch.nan_to_num((got.float() - want.float()).abs(), nan=float("inf")).max()) if got.numel() else 0.0
        limit = KV_ABSOLUTE_LIMIT + rtol * (float(want.float().abs().max()) if want.numel() else 0.0)
        worst = max(worst, delta / limit)
        if delta > limit:
            differing.append(StateDelta(layer, name, tensor, delta, limit))
    return StateComparison(len(set(cache) | set(reference)), kv, tuple(differing), worst)
