"""Compare a decoded cache with the K/V a single fresh pass stores.

``kv_parity`` measures every layer and position on every full-precision cell (the ``kv_parity`` check);
``locate_divergence``, when parity fails, finds the first layer and sequence position whose cached K or V
differs and says how (length mismatch, zero column, shifted, stale, values differ). Both use one limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: The K/V limit of each stored element, in rounding steps of the dtype (``torch.finfo(dtype).eps``) of that
#: element's own scale: the largest |fresh-pass value| of its KV head and head dimension (over the batch and the
#: positions, keys and values apart): a stored coordinate carries the rounding of its own magnitude, so each head
#: dimension is judged on its own scale, not on the layer's largest (on Gemma 3 the dims a one-position rotary offset
#: moves are ~15× smaller than the layer's max |K|, which hid that offset in bfloat16). The step counts hold the
#: healthy worst of the default matrix and the real checkpoints, AVX-512 and AVX2 kernels, at ≤ 0.5 of the limit:
#: docs/tolerances.md (K/V parity).
KV_ROUNDING_STEPS = {torch.float32: 2000, torch.float16: 64, torch.bfloat16: 48}
#: Steps for other dtypes (the dtype's own eps still sets the size).
DEFAULT_KV_STEPS = 64
#: Absolute floor of the K/V limit (a head dimension whose reference is all zeros).
KV_ABSOLUTE_LIMIT = 1e-6


def kv_rtol(dtype: torch.dtype) -> float:
    """The relative K/V limit of ``dtype``: its rounding steps × its eps."""
    steps = KV_ROUNDING_STEPS.get(dtype, DEFAULT_KV_STEPS)
    return steps * (torch.finfo(dtype).eps if dtype.is_floating_point else torch.finfo(torch.bfloat16).eps)


@dataclass(frozen=True)
class Divergence:
    """The first place a decoded cache differs from a fresh pass's cache."""

    layer: int
    position: int | None
    tensor: str
    kind: str
    detail: str

    def describe(self) -> str:
        where = f"layer {self.layer}" + (f", position {self.position}" if self.position is not None else "")
        text = f"first K/V divergence at {where} ({self.tensor}): {self.kind} — {self.detail}"
        if self.layer > 0 and self.kind.startswith("values differ"):
            text += f"; layers 0-{self.layer - 1} store correct K/V, so layer {self.layer - 1} attended to the wrong tokens (mask or window)"
        return text


LayerPair = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None


@dataclass(frozen=True)
class KVDelta:
    """The worst element of one layer's keys or values against the fresh pass (worst |Δ| ÷ its limit)."""

    layer: int
    position: int
    tensor: str
    delta: float
    limit: float
    scale: float
    """max |fresh-pass value| of this element's KV head and head dimension (the limit is ``atol + rtol × scale``)."""
    head: int
    dim: int
    first: int | None = None
    """The first position over the limit (``None``: none is)."""

    @property
    def ratio(self) -> float:
        return self.delta / self.limit


@dataclass(frozen=True)
class KVParity:
    """Every K/V layer of a decoded cache against one fresh pass over the final sequence."""

    kv_layers: int
    rtol: float
    worst: KVDelta | None
    """The largest Δ ÷ limit over layers, keys and values (``None``: no layer keeps K/V, or a shape problem)."""
    failing: tuple[KVDelta, ...] = ()
    """Each layer's worst tensor where it exceeds its limit, in layer order."""
    problem: str | None = None
    """A layer whose stored shape differs from the fresh pass's, or the fresh pass's own error."""


def kv_parity(pairs: list[LayerPair], valid_length: int, preallocated: bool = False) -> KVParity:
    """Δ ÷ limit of every layer's keys and values at every element (compared as in ``locate_divergence``)."""
    stored = valid_length if preallocated else None
    worst: KVDelta | None = None
    failing: list[KVDelta] = []
    layers, rtol = 0, 0.0
    for layer, pair in enumerate(pairs):
        if pair is None:
            continue
        layers += 1
        keys, values, ref_keys, ref_values = pair
        rtol = kv_rtol(keys.dtype)
        layer_worst: KVDelta | None = None
        for name, decoded, reference in (("keys", keys, ref_keys), ("values", values, ref_values)):
            got, want = _columns(decoded, stored), _columns(reference, stored)
            if got.shape != want.shape:
                problem = f"layer {layer} ({name}): decoded {tuple(got.shape)} vs fresh pass {tuple(want.shape)}"
                return KVParity(layers, rtol, None, tuple(failing), problem)
            if not got.numel():
                continue
            found = _worst_element(layer, name, got, want, _scales(want), rtol, valid_length - got.shape[-2])
            if layer_worst is None or found.ratio > layer_worst.ratio:
                layer_worst = found
        if layer_worst is None:
            continue
        if worst is None or layer_worst.ratio > worst.ratio:
            worst = layer_worst
        if layer_worst.ratio > 1:
            failing.append(layer_worst)
    return KVParity(layers, rtol, worst, tuple(failing))


def _worst_element(layer: int, name: str, got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor, rtol: float,
                   offset: int) -> KVDelta:
    """The element of ``got`` [B, H, S, D] farthest from ``want`` in units of its limit (``atol + rtol × scale``,
    ``scale`` [1, H, 1, D]), and the first position over it; positions count from ``offset``."""
    delta = torch.nan_to_num((got - want).abs(), nan=float("inf"))
    ratio = delta / (KV_ABSOLUTE_LIMIT + rtol * scale)
    per_position = ratio.amax(dim=(0, 1, 3))
    index = int(per_position.argmax())
    column = ratio[:, :, index, :]
    row, rest = divmod(int(column.argmax()), column.shape[1] * column.shape[2])
    head, dim = divmod(rest, column.shape[2])
    over = (per_position > 1).nonzero()
    element_scale = float(scale[0, head, 0, dim])
    return KVDelta(layer, offset + index, name, float(delta[row, head, index, dim]), KV_ABSOLUTE_LIMIT + rtol * element_scale,
                   element_scale, head, dim, offset + int(over[0]) if len(over) else None)


def locate_divergence(pairs: list[LayerPair], valid_length: int, preallocated: bool = False) -> Divergence | None:
    """First divergence over layers (in order), or ``None`` when every stored K/V agrees.

    ``valid_length`` tokens were seen; a ``preallocated`` (static) cache is compared over its first
    ``valid_length`` slots, any other over everything it stores, so extra columns show.
    """
    stored = valid_length if preallocated else None
    for layer, pair in enumerate(pairs):
        if pair is None:
            continue
        keys, values, ref_keys, ref_values = pair
        found = _compare_tensor(layer, "keys", keys, ref_keys, valid_length, stored, other=(values, ref_values))
        if found is None:
            found = _compare_tensor(layer, "values", values, ref_values, valid_length, stored)
        if found is not None:
            return found
    return None


def _columns(tensor: torch.Tensor, limit: int | None) -> torch.Tensor:
    """[B, H, S, D] -> its first ``limit`` stored columns (all when ``None``), as float32."""
    return (tensor if limit is None else tensor[..., :limit, :]).float()


def _scales(reference: torch.Tensor) -> torch.Tensor:
    """[1, H, 1, D]: max |reference| of each KV head's head dimension over the batch and the positions (NaN: 0)."""
    return torch.nan_to_num(reference.abs().amax(dim=(0, 2), keepdim=True), nan=0.0)


def _limits(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[1, H, 1, D]: ``atol + rtol(dtype) × scale`` of each head dimension of one layer's keys or values."""
    return KV_ABSOLUTE_LIMIT + kv_rtol(dtype) * _scales(reference)


def _bad_positions(got: torch.Tensor, want: torch.Tensor, limits: torch.Tensor) -> torch.Tensor:
    return ((got - want).abs() > limits).any(dim=3).any(dim=1).any(dim=0).nonzero().flatten()


def _compare_tensor(
    layer: int, name: str, decoded: torch.Tensor, reference: torch.Tensor, valid_length: int, compared: int | None,
    other: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Divergence | None:
    got, want = _columns(decoded, compared), _columns(reference, compared)
    if got.shape[:2] != want.shape[:2] or got.shape[-1] != want.shape[-1]:
        return Divergence(layer, None, name, "shape differs", f"decoded {tuple(got.shape)} vs fresh pass {tuple(want.shape)}")
    if got.shape[-2] != want.shape[-2]:
        kind = "missing column(s)" if got.shape[-2] < want.shape[-2] else "extra column(s)"
        return Divergence(
            layer, None, name, kind,
            f"decoded cache stores {got.shape[-2]} positions where the layer must keep {want.shape[-2]} (of a fresh pass)",
        )
    limits = _limits(want, decoded.dtype)
    bad = _bad_positions(got, want, limits)
    if not len(bad):
        return None
    index = int(bad[0])
    stored = got.shape[-2]
    kind = _classify(got, want, index, limits)
    if other is not None and kind.startswith("values differ"):
        other_got, other_want = _columns(other[0], compared), _columns(other[1], compared)
        if other_got.shape == other_want.shape and index not in _bad_positions(other_got, other_want, _limits(other_want, other[0].dtype)):
            kind = "keys differ while values agree: the token was encoded at the wrong (rotary) position"
    worst = _worst_element(layer, name, _column(got, index), _column(want, index), _scales(want), kv_rtol(decoded.dtype), 0)
    detail = (f"max |Δ| {worst.delta:.3g} > {worst.limit:.3g} at KV head {worst.head}, dim {worst.dim} "
              f"({len(bad)} of {stored} stored positions differ)")
    return Divergence(layer, valid_length - stored + index, name, kind, detail)


def _column(tensor: torch.Tensor, index: int) -> torch.Tensor:
    return tensor[..., index : index + 1, :]


def _close(a: torch.Tensor, b: torch.Tensor, limits: torch.Tensor) -> bool:
    return bool(((a - b).abs() <= limits).all())


def _classify(got: torch.Tensor, want: torch.Tensor, index: int, limits: torch.Tensor) -> str:
    """How the first bad column went wrong, judged from its neighbours (each head dimension within its own limit)."""
    column, last = _column(got, index), want.shape[-2] - 1
    appears_later = index < last and _close(_column(got, index + 1), _column(want, index), limits)
    if not bool(column.abs().max() > 0):
        if appears_later:
            return "written one position late: the token's slot is zero and its K/V sits in the next slot"
        return "zero column stored in place of the token's K/V"
    if appears_later:
        return "written one position late: the token's K/V sits in the next slot"
    if index > 0 and _close(column, _column(got, index - 1), limits):
        return "stale: the slot repeats the column before it instead of the token's K/V"
    if index < last and _close(column, _column(want, index + 1), limits):
        return "shifted: holds the next position's K/V (written one position early)"
    return "values differ (positions or projections disagree)"
