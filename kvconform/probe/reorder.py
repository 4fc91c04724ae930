"""What beam search relies on between steps, checked directly: ``reorder_cache(beam_idx)`` moves every
row's cached state with it.

A prefilled cache of B rows is reordered by a permutation that moves every row and then decoded; a
second cache of the same kind, prefilled with the rows already in that order, is decoded with the same
tokens. Rows are independent, so both must give the same logits at the dtype's tolerance. It runs on the
static and quantized cells, whose beam search is not compared token by token (docs/cache-paths.md).

A quantized cache is compared instead with a copy of the same prefilled cache whose per-row tensors were
moved by hand (``index_select`` on the batch axis): a fresh prefill in another row order computes each row
at another place of the batch's matmuls, which rounds differently on some CPU kernels, and a float8 value at
a rounding boundary then lands one step (6 %) away: a difference of the kernels, not of ``reorder_cache``.
State a model keeps outside its cache is caught by the static cells' fresh-prefill comparison.

A family cell (an image, audio features or an encoder output per row) is compared with its prefilled cache's rows moved
by hand too, in both halves of an encoder-decoder cache: a prefill in another row order would need every per-row input
reordered with it, and the same decode inputs on both sides leave ``reorder_cache`` the only difference.

An integer-quantized cache (quanto, HQQ) is compared with its residual design (``int_design``), prefilled with the
same rows and reordered the same way: HQQ's groups span batch rows, so no per-row tensor can be moved by hand,
and transformers defers the quantized part's move to the next update, which the decode then crosses with flushes.

Before the rotation, the prefilled cache is reordered by the identity: every tensor its layers hold must stay
bit-identical (with 2 rows, a reorder that swaps the rows whatever ``beam_idx`` says passes the rotation).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from kvconform.build.support import int_cache_config
from kvconform.matrix import INT_QUANTIZED
from kvconform.probe.cache_api import ApiRecord, first_change, layer_tensors
from kvconform.probe.cache_io import cache_layers, cross_layers, seq_length
from kvconform.probe.forwards import Forwards
from kvconform.probe.variants import PathNotApplicable, PathRecord, row_delta, summarize


def _decode(forwards: Forwards, cache: Any, tokens: torch.Tensor) -> tuple[list[torch.Tensor], list[int | None], Any]:
    logits, lengths = [], []
    for position in range(tokens.shape[1]):
        cache, output = forwards.extend(tokens[:, position : position + 1], cache)
        logits.append(output.logits[:, -1, :])
        lengths.append(seq_length(cache))
    return logits, lengths, cache


@torch.inference_mode()
def run_reorder(forwards: Forwards, plan: Any, sequence: torch.Tensor) -> PathRecord:
    """Prefill ``sequence``'s prompt, ``reorder_cache`` by a row rotation, decode; compare with the rotated prefill (or, where
    the forwards carry per-row media or encoder output, with the prefilled cache's rows moved by hand: both halves of an
    encoder-decoder cache, which generate()'s ``EncoderDecoderCache.reorder_cache`` reorders both)."""
    model = forwards.model
    batch, prompt_length, total = forwards.cache_batch(sequence), plan.prompt_length, sequence.shape[1]
    if batch < 2:
        raise PathNotApplicable(f"batch_size {batch}: reordering needs at least 2 rows")
    order = torch.roll(torch.arange(batch, device=sequence.device), 1)
    cache, _ = forwards.cached(sequence[:, :prompt_length], forwards.new_cache(plan.cache, total), keep=1)
    by_hand: Any = None
    if plan.cache in INT_QUANTIZED:  # per-row inputs or not: no per-row tensor of its groups can be moved by hand
        from kvconform.probe.int_design import design_cache

        by_hand, _ = forwards.cached(sequence[:, :prompt_length], design_cache(model, int_cache_config(model.config, plan.cache)), keep=1)
        by_hand.reorder_cache(order)
    elif plan.cache == "quantized" or forwards.row_inputs:
        by_hand = _rows_moved(copy.deepcopy(cache), order)
    api, before, identity = ApiRecord(), layer_tensors(cache), torch.arange(batch, device=sequence.device)
    cache.reorder_cache(identity)
    change = first_change(before, _without_deferred_identity(layer_tensors(cache), before, identity))
    if change:
        api.problems.append(f"reorder_cache(identity {list(range(batch))}) changed the prefilled cache: {change}")
    cache.reorder_cache(order)
    if forwards.row_inputs and plan.cache not in INT_QUANTIZED:  # the reference is the same cache moved by hand: which tensor differs
        moved = first_change(layer_tensors(by_hand), layer_tensors(cache))
        if moved:
            api.problems.append(f"reorder_cache({order.tolist()}) left the cache unlike its rows moved by hand: {moved}")
    reordered = sequence[forwards.id_rows(order)]
    logits, lengths, cache = _decode(forwards, cache, reordered[:, prompt_length:])
    if by_hand is None:
        by_hand, _ = forwards.cached(reordered[:, :prompt_length], forwards.new_cache(plan.cache, total), keep=1)
    expected, _, _ = _decode(forwards, by_hand, reordered[:, prompt_length:])
    deltas = [row_delta(got, want) for got, want in zip(logits, expected, strict=False)]
    scale = max(float(torch.nan_to_num(want.float()).abs().max()) for want in expected)
    description = (f"a prefilled {plan.cache} cache reordered by the identity (bit-identical) and by rows {order.tolist()} "
                   "(reorder_cache), then decoded")
    record = summarize("reorder", deltas, scale, description, lengths, prompt_length + 1, cache)
    record.api = api
    record.reference = ("the same prefilled quantized cache with its rows moved by hand" if plan.cache == "quantized"
                        else "its residual design, prefilled and reordered alike" if plan.cache in INT_QUANTIZED
                        else f"the same prefilled {plan.cache} cache with its rows moved by hand (every half)" if forwards.row_inputs
                        else f"the same {plan.cache} cache prefilled in that row order")
    return record


def _rows_moved(cache: Any, order: torch.Tensor) -> Any:
    """``cache`` with every per-row tensor of its layers, in both halves of an encoder-decoder cache (2-D or more, batch
    first; also inside tuples such as the fp8 layer's ``(values, scale)`` and dicts such as a linear-attention layer's
    states) indexed by ``order``. Each memory region gets one new buffer with its rows moved, and a tensor that is a
    view of a region (a reference sliding window layer's ``keys`` inside its ``all_keys``) becomes the same view of the
    new buffer, so views stay views; nothing is written into the old storage, which a faulty copy may share."""
    batch = len(order)

    def tensors(value: Any) -> list[torch.Tensor]:
        if isinstance(value, torch.Tensor):
            return [value] if value.dim() >= 2 and value.shape[0] == batch else []
        if isinstance(value, (tuple, list)):
            return [t for item in value for t in tensors(item)]
        if isinstance(value, dict):  # a linear-attention layer's conv and recurrent states, by state index
            return [t for item in value.values() for t in tensors(item)]
        return []

    def span(tensor: torch.Tensor) -> tuple[int, int]:
        extent = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
        return tensor.data_ptr(), tensor.data_ptr() + extent * tensor.element_size()

    layers = [*cache_layers(cache), *cross_layers(cache)]
    found = [t for layer in layers for value in vars(layer).values() for t in tensors(value)]
    replacement: dict[int, torch.Tensor] = {}
    bases: list[tuple[torch.Tensor, torch.Tensor, tuple[int, int]]] = []  # (old region, its new buffer, its span)
    for tensor in sorted(found, key=lambda t: t.numel(), reverse=True):
        start, _ = span(tensor)
        base = next(((old, new) for old, new, (low, high) in bases if low <= start < high), None)
        if base is None:
            moved = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device)
            moved.copy_(tensor.index_select(0, order.to(tensor.device)))
            bases.append((tensor, moved, span(tensor)))
            replacement[id(tensor)] = moved
        elif id(tensor) not in replacement:  # the same view of the new buffer
            old, new = base
            offset = new.storage_offset() + (tensor.storage_offset() - old.storage_offset())
            replacement[id(tensor)] = new.as_strided(tensor.shape, tensor.stride(), offset)

    def rebuilt(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return replacement.get(id(value), value)
        if isinstance(value, (tuple, list)):
            return type(value)(rebuilt(item) for item in value)
        if isinstance(value, dict):
            return {key: rebuilt(item) for key, item in value.items()}
        return value

    for layer in layers:
        for name, value in vars(layer).items():
            setattr(layer, name, rebuilt(value))
    return cache


def _without_deferred_identity(after: list[dict[str, torch.Tensor]], before: list[dict[str, torch.Tensor]],
                               identity: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """``after`` without a ``_pending_beam_idx`` the reorder added that holds the identity: an integer-quantized layer
    defers the move of its quantized part to its next dequantization (``QuantizedLayer.reorder_cache``)."""
    return [{name: tensor for name, tensor in new.items()
             if not (name == "_pending_beam_idx" and name not in old and torch.equal(tensor.to(identity.device), identity))}
            for new, old in zip(after, before, strict=False)]
