"""One fresh pass's K/V beside a decoded cache's, layer by layer: what the ``kv_parity`` comparisons read."""

from __future__ import annotations

from typing import Any

import torch

from kvconform.build.geometry import cache_geometry
from kvconform.build.models import Model
from kvconform.probe.cache_io import cache_layers, forward_keeping_cache, keep_logits, new_cache
from kvconform.probe.kv_compare import LayerPair


def fresh_kv_pairs(model: Model, keyword: str, kind: str, cache: Any, full: torch.Tensor, held: bool = False,
                   **inputs: Any) -> list[LayerPair]:
    """Each decoded layer's K/V beside the K/V of one fresh pass over the whole sequence ``full`` (``None``: no K/V
    tensors); ``inputs``: what else the decode fed (positions); ``held``: each layer is compared over the last positions
    it and the fresh pass both hold, however many (a sliding layer that records its past for crops holds more than its
    window until the next crop: ``DynamicSlidingWindowLayer.activate_past_recording``), not those its type must keep.

    For dynamic caches (``kind``) the fresh pass writes into a config-less ``DynamicCache`` (plain layers that keep
    every token, written once), so the reference cannot share a fault of the layer classes under test;
    each decoded layer is compared with the positions its type must keep (``geometry``). Models whose
    layers need their configured cache, and static cells (whose sliding layers roll), use a fresh
    cache of the cell's own kind, written in one multi-token update.
    """
    from transformers import DynamicCache

    total = full.shape[1]
    reference_cache = None
    if kind == "dynamic":
        try:
            reference_cache, _ = forward_keeping_cache(model, keyword, DynamicCache(), input_ids=full, **inputs, **keep_logits(model, 1))
        except Exception:  # noqa: BLE001 - e.g. linear-attention layers need their configured cache
            reference_cache = None
    if reference_cache is None:
        reference_cache, _ = forward_keeping_cache(model, keyword, new_cache(model, kind, total), input_ids=full, **inputs,
                                                   **keep_logits(model, 1))
    layers = cache_geometry(model.config).layers
    pairs: list[LayerPair] = []
    for index, (decoded, reference) in enumerate(zip(cache_layers(cache), cache_layers(reference_cache), strict=False)):
        keys, ref_keys = getattr(decoded, "keys", None), getattr(reference, "keys", None)
        if not (isinstance(keys, torch.Tensor) and isinstance(ref_keys, torch.Tensor)):
            pairs.append(None)
            continue
        values, ref_values = decoded.values, reference.values
        if held:  # the last positions both hold (a fresh pass through the model's configured cache keeps its window)
            n = min(keys.shape[-2], ref_keys.shape[-2])
            keys, values, ref_keys, ref_values = (t[..., t.shape[-2] - n :, :] for t in (keys, values, ref_keys, ref_values))
        elif kind == "dynamic" and index < len(layers) and layers[index].keeps_kv and ref_keys.shape[-2] == total:
            keep = layers[index].stored_length(total, None)
            ref_keys, ref_values = ref_keys[..., total - keep :, :], ref_values[..., total - keep :, :]
        pairs.append((keys, values, ref_keys, ref_values))
    return pairs
