"""The cache API's edge calls, on copies of a prefilled or decoded cache: ``crop(0)``, ``crop`` past the stored
length, ``crop`` after a sliding window rolled, ``reorder_cache`` with the identity.

transformers 5.24 documents (cache_utils.py ``Cache.crop``, ``DynamicLayer.crop``, ``DynamicSlidingWindowLayer.crop``):

- ``crop(0)`` removes no token; layers that keep less than every token (sliding, linear attention) may drop
  what the next forward does not need, back to their working size: ``get_seq_length()`` is unchanged and every
  stored K/V is a suffix of what it was;
- a positive argument (the legacy "crop to this length") is refused with an error (``ValueError`` for dynamic
  layers, ``RuntimeError`` for static and recording layers); with more than the stored length it must leave the
  cache as it was, refused or not;
- a sliding layer that rolled past its window without recording the past (``activate_past_recording``) refuses
  any crop with a ``RuntimeError``, as a linear-attention layer that does not record does;
- ``reorder_cache`` moves rows by ``index_select``: the identity leaves every tensor bit-identical.

A documented refusal passes (its words are kept as a note); a call that changes what it must not, or a cache that
decodes the next token differently from the uncached reference afterwards, is a problem.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from kvconform.compat import crop_counts_removed_tokens, crop_off, not_croppable_layers
from kvconform.probe.cache_io import cache_layers, cross_layers, seq_length
from kvconform.probe.forwards import Forwards

#: How the tensors of an encoder-decoder cache's cross-attention half are named (``families.CROSS_HALF``).
CROSS = "cross-attention"
#: Tokens past the stored length handed to ``crop`` (the legacy "crop to length L + 5": nothing to remove).
BEYOND = 5
#: The errors transformers documents for a crop it refuses (cache_utils.py, the layers' ``crop``).
REFUSALS = (ValueError, RuntimeError)


@dataclass
class ApiRecord:
    """What the edge calls did: problems (faults), notes (documented refusals) and the next token's |Δlogit|."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    deltas: dict[str, float] = field(default_factory=dict)
    """``what was decoded`` -> max |Δlogit| against the uncached reference."""


def _tensors(value: Any, name: str) -> dict[str, torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return {name: value.detach().clone()}
    if isinstance(value, dict):
        return {k: t for key, item in value.items() for k, t in _tensors(item, f"{name}[{key!r}]").items()}
    if isinstance(value, (list, tuple)):
        return {k: t for i, item in enumerate(value) for k, t in _tensors(item, f"{name}[{i}]").items()}
    return {}


def layer_tensors(cache: Any) -> list[dict[str, torch.Tensor]]:
    """A copy of every tensor each cache layer holds (K/V, scales, conv and recurrent states, counters); an
    encoder-decoder layer's cross-attention tensors under ``cross-attention <name>``."""
    found = [_held(layer) for layer in cache_layers(cache)]
    for index, layer in enumerate(cross_layers(cache)):
        found += [{} for _ in range(index + 1 - len(found))]
        found[index].update({f"{CROSS} {name}": tensor for name, tensor in _held(layer).items()})
    return found


def _held(layer: Any) -> dict[str, torch.Tensor]:
    return {k: t for name, value in vars(layer).items() for k, t in _tensors(value, name).items()}


def first_change(before: list[dict[str, torch.Tensor]], after: list[dict[str, torch.Tensor]]) -> str | None:
    """``layer i (attribute): how`` for the first tensor that is not bit-identical, or ``None``."""
    for index, (old, new) in enumerate(zip(before, after, strict=False)):
        for name in sorted(old.keys() | new.keys()):
            a, b = old.get(name), new.get(name)
            if a is None or b is None:
                return f"layer {index} ({name}): {'added' if a is None else 'dropped'}"
            if a.shape != b.shape:
                return f"layer {index} ({name}): shape {list(a.shape)} -> {list(b.shape)}"
            if a.dtype != b.dtype or not torch.equal(_bits(a), _bits(b)):
                where = (a.float() != b.float()).nonzero()[:1].flatten().tolist() if a.dim() and a.dtype == b.dtype else []
                return f"layer {index} ({name}): values changed (first at index {where})"
    return None


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes: bit-identical means equal bytes (NaN included, any dtype, float8 too)."""
    return tensor.detach().reshape(-1).contiguous().view(torch.uint8)


def _suffix_problem(before: list[dict[str, torch.Tensor]], cache: Any) -> str | None:
    """Where a layer's K/V after ``crop(0)`` is not a bit-identical suffix of what it stored before."""
    for index, (old, layer) in enumerate(zip(before, cache_layers(cache), strict=False)):
        for name in ("keys", "values"):
            a, b = old.get(name), getattr(layer, name, None)
            if a is None or not isinstance(b, torch.Tensor) or a.dim() < 2:
                continue
            kept = b.shape[-2]
            if b.shape[:-2] != a.shape[:-2] or kept > a.shape[-2] or not torch.equal(_bits(a[..., a.shape[-2] - kept :, :]), _bits(b)):
                return f"layer {index} ({name}): {list(a.shape)} -> {list(b.shape)}, not the last {kept} positions it stored"
    return None


def _decode(forwards: Forwards, cache: Any, token: torch.Tensor, expected: torch.Tensor) -> float:
    _, output = forwards.extend(token, cache)
    delta = (output.logits[:, -1, :].float() - expected.float()).abs()
    return float(torch.nan_to_num(delta, nan=float("inf")).max())


def _refused(call: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:160]
    return f"{call} refused, as documented: {type(exc).__name__}: {text}"


@torch.inference_mode()
def edge_calls(forwards: Forwards, prefilled: Any, token: torch.Tensor, expected: torch.Tensor,
               identity: bool) -> ApiRecord:
    """On a copy of ``prefilled``: ``crop(0)``, ``crop(L + BEYOND)``, ``reorder_cache(identity)`` (when
    ``identity``), then decode ``token`` [B, 1] against ``expected`` [B, V]."""
    record = ApiRecord()
    cache = copy.deepcopy(prefilled)
    length = seq_length(cache)
    if crop_counts_removed_tokens(cache):
        before = layer_tensors(cache)
        cache.crop(0)
        if seq_length(cache) != length:
            record.problems.append(f"crop(0) changed get_seq_length() from {length} to {seq_length(cache)}")
        suffix = _suffix_problem(before, cache)
        if suffix:
            record.problems.append(f"crop(0) removed stored K/V: {suffix}")
    else:
        record.notes.append("crop(0) not tried: this release's crop takes the length to keep (crop(max_length)), "
                            "so crop(0) empties the cache as documented")
    if length is not None:
        before = layer_tensors(cache)
        call = f"crop({length + BEYOND}) ({BEYOND} more than the {length} stored)"
        try:
            cache.crop(length + BEYOND)
        except REFUSALS as exc:
            record.notes.append(_refused(call, exc))
        change = first_change(before, layer_tensors(cache))
        if change or seq_length(cache) != length:
            record.problems.append(f"{call} changed the cache (get_seq_length() {length} -> {seq_length(cache)}; "
                                   f"{change or 'tensors unchanged'})")
    if identity:
        before = layer_tensors(cache)
        batch = forwards.cache_batch(token)
        cache.reorder_cache(torch.arange(batch, device=token.device))
        change = first_change(before, layer_tensors(cache))
        if change:
            record.problems.append(f"reorder_cache(identity {list(range(batch))}) changed the cache: {change}")
    what = "the next token after crop(0), crop past the length" + (" and reorder_cache(identity)" if identity else "")
    record.deltas[what] = _decode(forwards, cache, token, expected)
    return record


@torch.inference_mode()
def crop_after_decode(forwards: Forwards, decoded: Any, tokens: int, token: torch.Tensor,
                      expected: torch.Tensor, record: ApiRecord) -> None:
    """On a copy of the main decode's cache (no past recorded; sliding layers rolled past their window):
    ``crop(-tokens)`` is either refused as documented, or leaves ``get_seq_length()`` L - tokens and decodes
    ``token`` (the one at that position) as the uncached reference does."""
    cache = copy.deepcopy(decoded)
    length = seq_length(cache)
    call = f"crop(-{tokens}) of the decoded cache (no past recorded)"
    if not_croppable_layers(cache) is not None:  # e.g. a static sliding layer past its window: documented as such
        record.notes.append(f"{call} not tried: transformers does not crop the decoded {type(cache).__name__}")
        return
    try:
        call = f"{crop_off(cache, tokens)} of the decoded cache (no past recorded)"
    except REFUSALS as exc:
        record.notes.append(_refused(call, exc))
        return
    if length is not None and seq_length(cache) != length - tokens:
        record.problems.append(f"{call} left get_seq_length() {seq_length(cache)}, expected {length - tokens}")
    record.deltas[f"the token after {call}"] = _decode(forwards, cache, token, expected)
