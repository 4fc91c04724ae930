"""How to call a transformers model with a cache: keyword, fresh caches, prompts, layer access."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

#: A transformers model (a ``PreTrainedModel``): typed ``Any`` because its attributes are dynamic
#: (``nn.Module.__getattr__``) and its API is only partly annotated.
Model = Any

#: The ``QuantizedCache`` backend that needs no extra package (float8 values with a per-tensor scale).
QUANTIZED_BACKEND = "fp8"

#: Cache keywords, newest first: ``cache`` (5.24+), ``past_key_values``, ``cache_params`` (SSMs before 5.24).
CACHE_KEYWORDS = ("cache", "past_key_values", "cache_params")


def cache_keyword(model: Model) -> str:
    """The forward keyword the installed transformers expects for the cache (``cache`` in 5.24+)."""
    params = inspect.signature(model.forward).parameters
    for keyword in CACHE_KEYWORDS:
        if keyword in params:
            return keyword
    raise TypeError(f"{type(model).__name__}.forward takes none of {', '.join(CACHE_KEYWORDS)}")


def input_device(model: Model) -> torch.device:
    """Where inputs go: accelerate's execution device for offloaded models, else the first real parameter's."""
    device = getattr(getattr(model, "_hf_hook", None), "execution_device", None)
    if device is not None:
        return torch.device(device)
    return next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))


def returned_cache(output: Any, passed: Any = None) -> Any:
    """The cache object a forward returned, under either name; models that update in place return none."""
    for keyword in CACHE_KEYWORDS:
        cache = getattr(output, keyword, None)
        if cache is not None:
            return cache
    return passed


def forward_keeping_cache(model: Model, keyword: str, cache: Any, **inputs: Any) -> tuple[Any, Any]:
    """A ``use_cache`` forward and the cache to feed back next.

    A model that returns no cache object (recurrent_gemma keeps its state inside the layers) gets an
    explicit ``DynamicCache(config=...)``, which it then updates; without one every later step
    would restart from an empty state.
    """
    output = model(use_cache=True, **inputs, **({keyword: cache} if cache is not None else {}))
    returned = returned_cache(output, cache)
    if returned is None:
        from transformers import DynamicCache

        returned = DynamicCache(config=model.config)
        output = model(use_cache=True, **inputs, **{keyword: returned})
        returned = returned_cache(output, returned)
    return returned, output


def make_prompt(batch_size: int, prompt_length: int, seed: int, vocab_size: int, device: torch.device) -> torch.Tensor:
    """Seeded random prompts, a different one per batch row."""
    generator = torch.Generator().manual_seed(seed)
    high = max(4, min(vocab_size, 32000))
    ids = torch.randint(3, high, (batch_size, prompt_length), generator=generator)
    return ids.to(device)


def new_cache(model: Model, kind: str, max_len: int) -> Any:
    """A fresh cache of ``kind``; ``None`` lets the model build its own default (dynamic) cache."""
    if kind == "dynamic":
        return None
    if kind == "static":
        from transformers import StaticCache

        return StaticCache(config=model.config, max_cache_len=max_len)
    if kind == "quantized":
        from transformers import QuantizedCache

        return QuantizedCache(backend=QUANTIZED_BACKEND, config=model.config)
    raise ValueError(f"unknown cache kind {kind!r}")


def cache_layers(cache: Any) -> list[Any]:
    """The per-layer objects of a transformers ``Cache`` (the self-attention half of an encoder-decoder
    cache); legacy tuples are wrapped; a custom cache without layers (e.g. xLSTM state) has none."""
    cache = getattr(cache, "self_attention_cache", cache)
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return list(layers)
    if isinstance(cache, (tuple, list)) and all(isinstance(entry, (tuple, list)) for entry in cache):
        return [_LegacyLayer(*entry[:2]) for entry in cache]
    return []


@dataclass
class _LegacyLayer:
    keys: torch.Tensor
    values: torch.Tensor


def seq_length(cache: Any) -> int | None:
    """Tokens the cache says it has seen; ``None`` for caches that keep only a recurrent state."""
    try:
        return int(cache.get_seq_length())
    except (AttributeError, ValueError, TypeError, NotImplementedError):
        return None


@dataclass
class LayerState:
    """One cache layer after a step: K/V shapes and bytes, or the states it keeps instead."""

    index: int
    layer_class: str
    keys_shape: tuple[int, ...] | None
    values_shape: tuple[int, ...] | None
    dtype: str | None
    kv_bytes: int
    state_shapes: tuple[tuple[int, ...], ...] = ()
    scale_bytes: int = 0
    """Quantized layers: bytes of the quantization scales (included in ``kv_bytes``)."""
    residual_bytes: int = 0
    """Quantized layers: bytes of the full-precision part kept beside the quantized one (included in ``kv_bytes``)."""


def snapshot_layers(cache: Any) -> list[LayerState]:
    """Shapes, dtype and tensor bytes of every layer's K/V (or its non-K/V states)."""
    from kvconform.quantized import quantized_state

    states = []
    for index, layer in enumerate(cache_layers(cache)):
        quantized = quantized_state(index, layer)
        if quantized is not None:
            states.append(quantized)
            continue
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        kv = (keys, values) if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() >= 3 else None
        kv_bytes = sum(t.numel() * t.element_size() for t in kv) if kv else 0
        other = [
            tuple(t.shape)
            for name in ("conv_states", "recurrent_states")
            for t in (getattr(layer, name, None) or {}).values()
            if isinstance(t, torch.Tensor)
        ]
        states.append(
            LayerState(
                index=index,
                layer_class=type(layer).__name__,
                keys_shape=tuple(kv[0].shape) if kv else None,
                values_shape=tuple(kv[1].shape) if kv else None,
                dtype=str(kv[0].dtype).removeprefix("torch.") if kv else None,
                kv_bytes=kv_bytes,
                state_shapes=tuple(other),
            )
        )
    return states
