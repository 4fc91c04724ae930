"""Locate where a decoded cache departs from the K/V a single fresh pass stores.

Used only when parity fails: finds the first layer and sequence position whose cached K or V
differs, and says how (length mismatch, zero column, shifted, stale, values differ).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Relative K/V difference (to the layer's largest reference value) that counts as a divergence.
KV_RELATIVE_LIMIT = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


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
    return KV_RELATIVE_LIMIT.get(dtype, 5e-2) * float(reference.abs().max().clamp(min=1e-6))


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
