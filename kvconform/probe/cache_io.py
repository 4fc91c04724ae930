"""How to call a transformers model with a cache: keyword, fresh caches, prompts, layer access."""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.build.support import QUANTIZED_BACKEND, int_cache_config, quantized_cache
from kvconform.compat import CACHE_KEYWORDS, cache_keyword, generation_positions, layer_lists
from kvconform.matrix import INT_QUANTIZED, QUANTIZED_KINDS


def keep_logits(model: Model, count: int) -> dict[str, int]:
    """``logits_to_keep=count`` where the model's forward takes it (the test ``generate()`` makes), else nothing.

    Without it every position's logits are computed (262,144 per position for Gemma 3); callers read the last
    ``count`` positions either way (``logits[:, -count:]``), so a model that ignores the keyword is read the same.
    """
    return {"logits_to_keep": count} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def input_device(model: Model) -> torch.device:
    """Where inputs go: accelerate's execution device for offloaded models, else the first real parameter's."""
    device = getattr(getattr(model, "_hf_hook", None), "execution_device", None)
    if device is not None:
        return torch.device(device)
    return next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))


def compute_dtype(model: Model) -> torch.dtype:
    """The dtype the text decoder computes (and caches) in: its input embeddings'. ``from_pretrained(dtype=float16)``
    keeps ``_keep_in_fp32_modules`` in float32, and such a module can come first in ``parameters()`` (BLIP-2's
    ``query_tokens``: a model's own parameters precede its submodules'). A model that declares its embeddings such a
    module (Ergo keeps ``embed_tokens`` and the residual stream in float32, its attention and MLP branches in the loaded
    dtype: ``modeling_ergo.py:502-516, 551, 464`` in 5.25.0) computes its K/V in the dtype of its parameters not kept:
    the first of those."""
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        embeddings = None
    weight = getattr(embeddings, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.is_floating_point():
        kept = _kept_in_float32(model)
        if kept is None or not any(kept.search(n) for n, p in model.named_parameters() if p is weight):
            return weight.dtype
        return next((p.dtype for n, p in model.named_parameters() if p.is_floating_point() and not kept.search(n)), weight.dtype)
    return next(model.parameters()).dtype


def _kept_in_float32(model: Model) -> re.Pattern[str] | None:
    """The parameter names in the modules a model declares kept in float32 (``_keep_in_fp32_modules``,
    ``_keep_in_fp32_modules_strict``), matched as ``from_pretrained`` matches them: a search for any of the names, ``*``
    standing for anything (``build_glob_alternation``, ``core_model_loading.py:49-78`` in 5.25.0); ``None``: none declared."""
    declared = sorted({name for attribute in ("_keep_in_fp32_modules", "_keep_in_fp32_modules_strict")
                       for name in (getattr(model, attribute, None) or ())})
    if not declared:
        return None
    return re.compile("|".join(".*".join(re.escape(part) for part in name.split("*")) for name in declared))


def returned_cache(output: Any, passed: Any = None) -> Any:
    """The cache object a forward returned, under either name; models that update in place return none."""
    for keyword in CACHE_KEYWORDS:
        cache = getattr(output, keyword, None)
        if cache is not None:
            return cache
    return passed


def generation_cache(model: Model, input_ids: torch.Tensor | None) -> Any:
    """The cache ``generate()``'s first step takes from the model's own input preparation, for a model generate() builds
    none for (``_supports_default_dynamic_cache()`` False: up to 5.4 the hybrid Mamba models' ``prepare_inputs_for_generation``
    makes their ``HybridMambaAttentionDynamicCache``, which their forward needs and does not build); else ``None``."""
    supports = getattr(type(model), "_supports_default_dynamic_cache", None)
    if input_ids is None or supports is None or supports():
        return None
    try:
        prepared = model.prepare_inputs_for_generation(input_ids, use_cache=True, is_first_iteration=True,
                                                       **generation_positions(model, 0, input_ids.shape[1]))
    except (TypeError, ValueError, AttributeError):  # input preparation that needs generate()'s own state
        return None
    cache = next((prepared[k] for k in CACHE_KEYWORDS if prepared.get(k) is not None), None)
    # 5.0's MambaCache has no get_seq_length: generate() fed it with the prefill positions of its own input preparation
    # (arange(conv_kernel), modeling_mamba.py:757-762 in 5.0.0), which the forward makes the same way when it builds the cache
    return cache if hasattr(cache, "get_seq_length") else None


def forward_keeping_cache(model: Model, keyword: str, cache: Any, **inputs: Any) -> tuple[Any, Any]:
    """A ``use_cache`` forward and the cache to feed back next.

    Without a cache given, the model starts from the cache generate() would give it (:func:`generation_cache`), or
    builds its own. A model that returns no cache object (recurrent_gemma keeps its state inside the layers) gets an
    explicit ``DynamicCache(config=...)``, which it then updates; without one every later step would restart from an
    empty state.
    """
    cache = cache if cache is not None else generation_cache(model, inputs.get("input_ids"))
    output = model(use_cache=True, **inputs, **({keyword: cache} if cache is not None else {}))
    returned = returned_cache(output, cache)
    if returned is None:
        from transformers import DynamicCache

        returned = DynamicCache(config=model.config)
        output = model(use_cache=True, **inputs, **{keyword: returned})
        returned = returned_cache(output, returned)
    return returned, output


def zero_pad_ids(model: Model) -> list[int]:
    """The ``padding_idx`` of the input embedding where its row is all zero, as ``_init_weights`` leaves a random build's
    (a trained checkpoint's is not). Fed with a build's zero biases, that token's keys are exactly zero, which static
    caches of 5.0-5.3 do not count as stored (``StaticLayer.get_seq_length`` counts non-zero keys, cache_utils.py:357
    in 5.0.0): a miscount from the build, not the model, so the greedy decode never feeds it."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    row, weight = getattr(embeddings, "padding_idx", None), getattr(embeddings, "weight", None)
    if row is None or not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight[row].any():
        return []
    return [row]


def greedy(logits: torch.Tensor, excluded: Collection[int]) -> torch.Tensor:
    """The next token per row, ``[B, 1]``: the highest logit among the ids not ``excluded`` (the causal decode's zero pad
    row, a family's special ids)."""
    ids = [i for i in excluded if i < logits.shape[-1]]
    if not ids:
        return logits.argmax(dim=-1, keepdim=True)
    masked = logits.clone()
    masked[..., ids] = float("-inf")
    return masked.argmax(dim=-1, keepdim=True)


def make_prompt(batch_size: int, prompt_length: int, seed: int, vocab_size: int, device: torch.device) -> torch.Tensor:
    """Seeded random prompts, a different one per batch row."""
    generator = torch.Generator().manual_seed(seed)
    high = max(4, min(vocab_size, 32000))
    ids = torch.randint(3, high, (batch_size, prompt_length), generator=generator)
    return ids.to(device)


def whole_pass(model: Model, prompt_length: int) -> dict[str, Any]:
    """Forward arguments of the reference: ONE pass over a whole sequence whose first ``prompt_length`` tokens are the prompt.

    A pass without a cache, except where the model's own cache layers are told where the prompt ends
    (``set_prefill_length``): a reference sliding window (R-SWA, UnlimitedOcr) lets every decoded token attend to the
    prompt and the last ``sliding_window`` tokens, which a pass without a cache cannot know: it takes every token for the
    prompt (``create_reference_sliding_window_causal_mask``: prefill_length inf, modeling_unlimited_ocr.py:1676-1683).
    Such a model gets an empty cache of its own layers with the prompt's length declared, as its generate() declares it
    before the prefill (``UnlimitedOcrGenerationMixin._prefill``): the one pass then masks as the decode steps attend, and
    reads no K/V but its own.
    """
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except (KeyError, TypeError, ValueError, AttributeError):  # layer types no DynamicCache builds: nothing declared there
        return {"use_cache": False}
    if not declare_prompt(cache, prompt_length):
        return {"use_cache": False}
    return {"use_cache": True, cache_keyword(model): cache}


def declare_prompt(cache: Any, prompt_length: int) -> bool:
    """Tell ``cache``'s layers that keep the prompt apart (``set_prefill_length``: a reference sliding window) where the
    prompt ends, as the model's generate() does before its prefill; a cache path that prefills more or fewer tokens than
    the prompt (crop, a reused prefix) would otherwise make them the prompt. Returns whether any layer was told."""
    declared = [layer for layer in cache_layers(cache) if callable(getattr(layer, "set_prefill_length", None))]
    for layer in declared:
        layer.set_prefill_length(prompt_length)
    return bool(declared)


def new_cache(model: Model, kind: str, max_len: int) -> Any:
    """A fresh cache of ``kind``; ``None`` lets the model build its own default (dynamic) cache."""
    if kind == "dynamic":
        return None
    if kind == "static":
        from transformers import StaticCache

        return StaticCache(config=model.config, max_cache_len=max_len)
    if kind in QUANTIZED_KINDS:
        return quantized_cache(model.config, kind)
    raise ValueError(f"unknown cache kind {kind!r}")


def cache_layers(cache: Any) -> list[Any]:
    """The per-layer objects of a transformers ``Cache`` (the self-attention half of an encoder-decoder
    cache); legacy tuples and the parallel lists of older releases' hybrid caches are wrapped; a custom cache
    without layers (e.g. xLSTM state) has none."""
    cache = getattr(cache, "self_attention_cache", cache)
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return list(layers)
    if isinstance(cache, (tuple, list)) and all(isinstance(entry, (tuple, list)) for entry in cache):
        return [_LegacyLayer(*entry[:2]) for entry in cache]
    lists = layer_lists(cache)
    return [_LegacyLayer(*entry) for entry in lists] if lists is not None else []


def cross_layers(cache: Any) -> list[Any]:
    """The cross-attention half's layer objects of an encoder-decoder cache (empty if the cache has no such half)."""
    half = getattr(cache, "cross_attention_cache", None)
    return list(getattr(half, "layers", None) or [])


@dataclass
class _LegacyLayer:
    keys: torch.Tensor | None
    values: torch.Tensor | None
    conv_states: dict[str, Any] = field(default_factory=dict)
    recurrent_states: dict[str, Any] = field(default_factory=dict)


def seq_length(cache: Any) -> int | None:
    """Tokens the cache says it has seen; ``None`` for caches that keep only a recurrent state."""
    try:
        return int(cache.get_seq_length())
    except (AttributeError, ValueError, TypeError, NotImplementedError):
        return None


def cache_implementation(cache: str, config: Any = None) -> dict[str, Any]:
    """The ``generate()`` arguments that make it build the cell's cache kind (``config``: the model's, for the
    integer backends' group size)."""
    if cache == "dynamic":
        return {}
    if cache == "quantized":
        return {"cache_implementation": "quantized", "cache_config": {"backend": QUANTIZED_BACKEND}}
    if cache in INT_QUANTIZED:
        return {"cache_implementation": "quantized", "cache_config": int_cache_config(config, cache)}
    return {"cache_implementation": cache}


def fixed_length_config(model: Model, new_tokens: int, use_cache: bool = True, **extra: Any) -> Any:
    """The model's own generation config (decoder start token and the like) with greedy, fixed-length settings:
    exactly ``new_tokens`` new tokens, pad id 0; ``extra`` settings on top. ``min_new_tokens`` is what keeps EOS from
    ending it: generate() fills an ``eos_token_id`` of None from the model's own config (defaults_only merge)."""
    from transformers import GenerationConfig

    config = copy.deepcopy(model.generation_config) if model.generation_config is not None else GenerationConfig()
    settings = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False, "num_beams": 1,
                "use_cache": use_cache, "eos_token_id": None, "pad_token_id": 0}
    config.update(**{**settings, **extra})
    return config
