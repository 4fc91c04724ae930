"""Compare a decoded cache with the K/V a single fresh pass stores.

``kv_parity`` measures every layer and position on every full-precision cell (the ``kv_parity`` check);
``locate_divergence``, when parity fails, finds the first layer and sequence position whose cached K or V
differs and says how (length mismatch, zero column, shifted, stale, values differ). Both use one limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Relative K/V difference (to the largest reference value of the layer's keys or values) that counts as a
#: divergence; measured healthy worst over the default matrix in docs/tolerances.md (K/V parity). The half
#: precision limits hold on every CPU kernel: the real SmolLM2 under AVX2 kernels (ATEN_CPU_CAPABILITY=avx2
#: ONEDNN_MAX_CPU_ISA=AVX2) stores values at layer 15, position 1 that a fresh pass computes 0.06 × max|V| away in
#: bfloat16 (0.009 in float16), where AVX-512 gives 0.016 (0.0027).
KV_RELATIVE_LIMIT = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1e-1}
#: Absolute floor of the K/V limit (a layer whose reference is all zeros).
KV_ABSOLUTE_LIMIT = 1e-6


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
    """The worst position of one layer's keys or values against the fresh pass."""

    layer: int
    position: int
    tensor: str
    delta: float
    limit: float
    scale: float
    """max |fresh-pass value| of this layer's keys or values (the limit is ``atol + rtol × scale``)."""
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
    """Δ ÷ limit of every layer's keys and values at every position (compared as in ``locate_divergence``)."""
    stored = valid_length if preallocated else None
    worst: KVDelta | None = None
    failing: list[KVDelta] = []
    layers, rtol = 0, 0.0
    for layer, pair in enumerate(pairs):
        if pair is None:
            continue
        layers += 1
        keys, values, ref_keys, ref_values = pair
        rtol = KV_RELATIVE_LIMIT.get(keys.dtype, 5e-2)
        layer_worst: KVDelta | None = None
        for name, decoded, reference in (("keys", keys, ref_keys), ("values", values, ref_values)):
            got, want = _columns(decoded, stored), _columns(reference, stored)
            if got.shape != want.shape:
                problem = f"layer {layer} ({name}): decoded {tuple(got.shape)} vs fresh pass {tuple(want.shape)}"
                return KVParity(layers, rtol, None, tuple(failing), problem)
            if not got.numel():
                continue
            per_position = torch.nan_to_num((got - want).abs(), nan=float("inf")).amax(dim=(0, 1, 3))
            index, limit, offset = int(per_position.argmax()), _limit(want, decoded.dtype), valid_length - got.shape[-2]
            over = (per_position > limit).nonzero().flatten()
            found = KVDelta(layer, offset + index, name, float(per_position[index]), limit, float(want.abs().max()),
                            offset + int(over[0]) if len(over) else None)
            if layer_worst is None or found.ratio > layer_worst.ratio:
                layer_worst = found
        if layer_worst is None:
            continue
        if worst is None or layer_worst.ratio > worst.ratio:
            worst = layer_worst
        if layer_worst.ratio > 1:
            failing.append(layer_worst)
    return KVParity(layers, rtol, worst, tuple(failing))


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


def _limit(reference: torch.Tensor, dtype: torch.dtype) -> float:
    """``atol + rtol(dtype) × max|reference|`` of one layer's keys or values."""
    scale = float(reference.abs().max()) if reference.numel() else 0.0
    return KV_ABSOLUTE_LIMIT + KV_RELATIVE_LIMIT.get(dtype, 5e-2) * scale


def _bad_positions(got: torch.Tensor, want: torch.Tensor, limit: float) -> torch.Tensor:
    return ((got - want).abs().amax(dim=(0, 1, 3)) > limit).nonzero().flatten()


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
    limit = _limit(want, decoded.dtype)
    bad = _bad_positions(got, want, limit)
    if not len(bad):
        return None
    index = int(bad[0])
    stored = got.shape[-2]
    kind = _classify(got, want, index, limit)
    if other is not None and kind.startswith("values differ"):
        other_got, other_want = _columns(other[0], compared), _columns(other[1], compared)
        if other_got.shape == other_want.shape and index not in _bad_positions(other_got, other_want, _limit(other_want, other[0].dtype)):
            kind = "keys differ while values agree: the token was encoded at the wrong (rotary) position"
    delta = float((got[..., index, :] - want[..., index, :]).abs().max())
    detail = f"max |Δ| {delta:.3g} > {limit:.3g} ({len(bad)} of {stored} stored positions differ)"
    return Divergence(layer, valid_length - stored + index, name, kind, detail)


def _close(a: torch.Tensor, b: torch.Tensor, limit: float) -> bool:
    return bool((a - b).abs().max() <= limit)


def _classify(got: torch.Tensor, want: torch.Tensor, index: int, limit: float) -> str:
    """How the first bad column went wrong, judged from its neighbours."""
    column, last = got[..., index, :], want.shape[-2] - 1
    appears_later = index < last and _close(got[..., index + 1, :], want[..., index, :], limit)
    if not bool(column.abs().max() > 0):
        if appears_later:
            return "written one position late: the token's slot is zero and its K/V sits in the next slot"
        return "zero column stored in place of the token's K/V"
    if appears_later:
        return "written one position late: the token's K/V sits in the next slot"
    if index > 0 and _close(column, got[..., index - 1, :], limit):
        return "stale: the slot repeats the column before it instead of the token's K/V"
    if index < last and _close(column, want[..., index + 1, :], limit):
        return "shifted: holds the next position's K/V (written one position early)"
    return "values differ (positions or projections disagree)"
