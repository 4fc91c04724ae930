"""What differs between transformers releases, detected in one place (never by comparing version numbers).

Every API the harness uses that some 5.x release lacks or spells differently is probed here by its evidence: a
keyword in a signature, a method or class that exists. The rest of kvconform asks these functions, so a verdict
under any release is about the model, not about which release wrote the API.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

#: Cache keywords of a forward, newest first: ``cache`` (5.24+), ``past_key_values``, ``cache_params`` (SSMs
#: before 5.24).
CACHE_KEYWORDS = ("cache", "past_key_values", "cache_params")


def cache_keyword(model: Any) -> str:
    """The forward keyword this release's model expects for the cache (``cache`` from 5.24 on)."""
    keyword = taken_cache_keyword(model.forward)
    if keyword is None:
        raise TypeError(f"{type(model).__name__}.forward takes none of {', '.join(CACHE_KEYWORDS)}")
    return keyword


def taken_cache_keyword(forward: Callable[..., Any]) -> str | None:
    """The cache keyword of ``forward`` (:data:`CACHE_KEYWORDS`), or ``None`` where it takes no cache: a model that
    keeps its state in its own layers (RecurrentGemma up to 5.3: ``_setup_cache`` fills the layers' key_states and
    recurrent_states, modeling_recurrent_gemma.py:250-256 and :615-618 in 5.3.0; 5.4 takes ``past_key_values``)."""
    params = inspect.signature(forward).parameters
    return next((keyword for keyword in CACHE_KEYWORDS if keyword in params), None)


def cache_argument(function: Callable[..., Any]) -> str:
    """The cache keyword of a transformers helper (mask builders): ``cache`` from 5.24 on, ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(function).parameters else "past_key_values"


def embeds_keyword(forward: Callable[..., Any]) -> str:
    """The keyword a forward takes embeddings by: ``inputs_embeds``, or Bark's ``input_embeds`` before 5.2."""
    return "input_embeds" if "input_embeds" in inspect.signature(forward).parameters else "inputs_embeds"


def codec_cache_keyword(encode: Callable[..., Any]) -> str:
    """The keyword an audio encoder's own cache goes by in ``encode`` (a codec's, Mimi's) or ``forward`` (Voxtral
    Realtime's, beside the decoder's cache): ``encoder_cache`` from 5.24 on, ``encoder_past_key_values`` before; also
    the key ``generate()``'s model kwargs keep it under and the output attribute that returns it."""
    return "encoder_cache" if "encoder_cache" in inspect.signature(encode).parameters else "encoder_past_key_values"


def mask_builder_inputs(build: Callable[..., Any], embeds: Any, cache: Any, start: int) -> dict[str, Any]:
    """The embeddings, cache and position arguments of a mask builder (``create_masks_for_generate``) as this release
    names them: ``inputs_embeds`` (5.4+; ``input_embeds`` before) and the cache keyword of :func:`cache_argument`; up to
    5.3 also the required ``cache_position``, the positions ``start`` … of the embeddings, as generate() passed it."""
    params = inspect.signature(build).parameters
    given = {"inputs_embeds" if "inputs_embeds" in params else "input_embeds": embeds, cache_argument(build): cache}
    if "cache_position" in params:
        import torch

        given["cache_position"] = torch.arange(start, start + embeds.shape[1], device=embeds.device)
    return given


@functools.cache
def mla_caches_latents(model_type: str) -> bool:
    """Whether this release's multi-head latent attention of ``model_type`` caches the compressed latent and the shared
    rotary key (5.15+: the attention class defines ``expand_kv``, which rebuilds K/V from them, and its forward calls the
    cache's ``update`` before ``expand_kv``) rather than K/V expanded to every query head (5.0-5.14: ``kv_b_proj``
    output and the rotary key, concatenated before ``update``; the sparse-attention types of 5.15-5.17, deepseek_v32,
    glm_moe_dsa, axk2, hy_v4, glm5_next, call ``expand_kv`` first and cache its output, modeling_axk2.py:619-623 in
    5.17.0, where 5.18 updates first, :617-620 in 5.18.0)."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    name = model_type_to_module_name(model_type)
    try:
        module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    except ImportError:  # no modeling module of that name: the newest design
        return True
    classes = [value for value in vars(module).values() if isinstance(value, type) and callable(getattr(value, "expand_kv", None))]
    return any(_updates_before_expanding(cls) for cls in classes)


def _updates_before_expanding(cls: type) -> bool:
    """Whether ``cls.forward`` hands the cache the latents (its ``.update(`` call comes before ``expand_kv(``); a
    forward whose source cannot be read counts as the newest design."""
    try:
        source = inspect.getsource(getattr(cls, "forward"))  # noqa: B009 - any class; mypy knows no forward on type
    except (OSError, TypeError):
        return True
    update, expand = source.find(".update("), source.find("expand_kv(")
    return expand < 0 or 0 <= update < expand


@functools.cache
def assisted_needs_generate_cache() -> bool:
    """Whether this release's assisted decoding refuses to run without a cache ``generate()`` prepared: from 5.14
    ``_assisted_decoding`` raises RuntimeError "Assisted decoding requires a cache" when its model kwargs hold none
    (generation/utils.py:3644 in 5.14.1, :3982 in 5.24.0), as for a model whose ``_supports_default_dynamic_cache()``
    is False. Before, it runs on the cache the model's own input preparation builds (LFM2's Lfm2HybridConvCache up to
    5.4, modeling_lfm2.py:647 in 5.0.0; MiniMax's MiniMaxCache) and rolls the drafts back with that cache's ``crop``
    (generation/utils.py:3749 in 5.0.0). Read from the method's source; one that cannot be read counts as the newest."""
    source = _assisted_decoding_source()
    return source is None or 'requires a cache")' in source.lower()


def crop_counts_removed_tokens(cache: Any) -> bool:
    """Whether ``cache.crop(n)`` takes the tokens to remove (5.15+: ``crop(tokens_to_remove)``, 0 a no-op,
    cache_utils.py:165-184 in 5.15.1) or, before, the length to keep (``crop(max_length)``: ``crop(0)`` empties the
    cache, cache_utils.py:140-148 in 5.0.0; ``EncoderDecoderCache.crop(maximum_length)``). A negative ``n`` removes
    ``-n`` tokens under both. Read from the method's first parameter. It also tells where assisted decoding crops after
    every verification forward, rejected tokens or not (5.15+, generation/utils.py:3803 in 5.15.1): 5.14 records the
    past too but crops only after a rejected draft (:3815-3816 in 5.14.1), and under its ``crop(max_length)``
    ``DynamicIndexedLayer`` empties its indexer keys at ``crop(0)`` (cache_utils.py:329-331 in 5.14.1)."""
    try:
        first = next(iter(inspect.signature(cache.crop).parameters))
    except (AttributeError, TypeError, ValueError, StopIteration):
        return True
    return "length" not in first


@functools.cache
def assisted_crops_by_count() -> bool:
    """Whether this release's assisted decoding rolls the model's cache back with ``crop(-tokens)`` (5.14+,
    generation/utils.py:3816 in 5.14.1) or with the length to keep (``crop(new_cur_len - 1)``, :3749 in 5.0.0, :3752 in
    5.13.1). Read from the method's source; one that cannot be read counts as the newest."""
    source = _assisted_decoding_source()
    return source is None or ".crop(new_cur_len" not in source


def _assisted_decoding_source() -> str | None:
    """The source of this release's ``GenerationMixin._assisted_decoding``, or None where it cannot be read."""
    from transformers.generation.utils import GenerationMixin

    try:
        return inspect.getsource(GenerationMixin._assisted_decoding)
    except (OSError, TypeError, AttributeError):
        return None


def crop_off(cache: Any, tokens: int) -> str:
    """Remove the last ``tokens`` tokens of ``cache`` with the call this release's assisted decoding makes, and name
    it: ``crop(-tokens)`` from 5.14, ``crop(length - tokens)`` before (``assisted_crops_by_count``), under which a
    layer that holds no more than that returns early, as an encoder-decoder's unwritten layer does."""
    if assisted_crops_by_count():
        cache.crop(-tokens)
        return f"crop(-{tokens})"
    keep = int(cache.get_seq_length()) - tokens
    cache.crop(keep)
    return f"crop({keep})"


def not_croppable_layers(cache: Any) -> list[str] | None:
    """The layer classes transformers would not crop in ``cache``, or None where it crops the whole cache. From 5.17 a
    cache says so itself (``is_croppable``, cache_utils.py:1680-1682 in 5.17.0: every layer's; a static layer's False,
    :31). Before, assisted decoding calls ``crop`` on any cache (generation/utils.py:3749 in 5.0.0), and a layer
    without the method (``StaticLayer`` up to 5.16) cannot take it; a sliding layer past its window refuses it itself
    (ValueError, cache_utils.py:244-248 in 5.0.0)."""
    layers = getattr(cache, "layers", [])
    flag = getattr(cache, "is_croppable", None)
    if flag is not None:
        return None if flag else sorted({type(layer).__name__ for layer in layers if not getattr(layer, "is_croppable", False)})
    if not callable(getattr(cache, "crop", None)):
        return [type(cache).__name__]
    missing = sorted({type(layer).__name__ for layer in layers if not callable(getattr(layer, "crop", None))})
    return missing or None


def record_past(cache: Any, tokens: int) -> bool:
    """Start recording the past as assisted decoding does where the release has it (``activate_past_recording``,
    5.14+, so conv and recurrent states can be cropped); before it, assisted decoding crops without recording.
    From 5.25 linear-attention layers keep the recurrent states of the last ``recurrent_states_to_keep`` tokens, which
    assisted decoding sets to the most it may crop (the drafts per burst, generation/utils.py:4002 in 5.25.0): here
    ``tokens``. Returns whether recording started."""
    start = getattr(cache, "activate_past_recording", None)
    if start is None:
        return False
    parameters = inspect.signature(start).parameters.values()  # 5.25's Cache forwards **kwargs to its layers
    if any(p.name == "recurrent_states_to_keep" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        start(recurrent_states_to_keep=tokens)
    else:
        start()
    return True


def all_linear(cache: Any) -> bool:
    """Whether every layer of ``cache`` is a linear-attention (recurrent) layer.

    ``Cache.is_linear`` says so from 5.13; 5.5-5.12 have the linear-attention layer classes without it, so there the
    layers are read the way ``is_linear`` reads them (a ``LinearAttentionCacheLayerMixin`` that is not also an attention
    ``CacheLayerMixin``, as 5.5's ``LinearAttentionAndFullAttentionLayer`` is). Releases before those classes have none.
    """
    flags = getattr(cache, "is_linear", None)
    if flags is None:
        flags = _linear_layer_flags(getattr(cache, "layers", None) or [])
    return bool(flags) and all(flags)


def _linear_layer_flags(layers: list[Any]) -> list[bool]:
    """``Cache.is_linear`` for a release whose ``Cache`` lacks the property but has the layer classes (5.5-5.12)."""
    try:
        from transformers.cache_utils import CacheLayerMixin, LinearAttentionCacheLayerMixin
    except ImportError:  # before the linear-attention layer classes
        return []
    return [isinstance(layer, LinearAttentionCacheLayerMixin) and not isinstance(layer, CacheLayerMixin) for layer in layers]


#: Config switches that ask for CUDA-only kernels, with the value that runs the model's own torch code. Older
#: releases' jamba configs default ``use_mamba_kernels`` to True and its forward then refuses to run on CPU.
CPU_KERNEL_SWITCHES = {"use_mamba_kernels": False}


def cpu_kernel_overrides(values: dict[str, Any]) -> dict[str, Any]:
    """The switches of :data:`CPU_KERNEL_SWITCHES` that a config dict has, set to their CPU value."""
    return {key: value for key, value in CPU_KERNEL_SWITCHES.items() if key in values}


#: Parallel per-layer lists of caches written before the per-layer classes (5.0's jamba
#: ``HybridMambaAttentionDynamicCache``): K/V, then the recurrent states beside them.
LAYER_LISTS = ("key_cache", "value_cache")
STATE_LISTS = {"conv_states": "conv", "ssm_states": "ssm"}


def layer_lists(cache: Any) -> list[tuple[Any, Any, dict[str, Any], dict[str, Any]]] | None:
    """``(keys, values, conv states, recurrent states)`` per layer of a cache that keeps parallel lists instead of
    layer objects (keys and values ``None`` where a layer stores none), or ``None`` for any other cache."""
    keys, values = (getattr(cache, name, None) for name in LAYER_LISTS)
    if not (isinstance(keys, list) and isinstance(values, list) and len(keys) == len(values)):
        return None
    states = {name: getattr(cache, name, None) for name in STATE_LISTS}

    def state(name: str, index: int) -> dict[str, Any]:
        found = states[name]
        return {STATE_LISTS[name]: found[index]} if isinstance(found, list) and index < len(found) else {}

    def stored(tensor: Any) -> Any:  # an empty layer holds a [B, 0] placeholder (its own test: ``shape[-1] == 0``)
        return tensor if getattr(tensor, "ndim", 0) == 4 and tensor.shape[-1] else None

    return [(stored(k), stored(v), state("conv_states", i), state("ssm_states", i))
            for i, (k, v) in enumerate(zip(keys, values, strict=True))]


def state_tensors(states: Any) -> list[Any]:
    """The tensors of a layer's recurrent-state attribute: a dict of them (5.14+), one tensor or a list (jamba's
    hybrid layers in 5.5-5.13), or nothing."""
    if isinstance(states, dict):
        return list(states.values())
    if isinstance(states, (list, tuple)):
        return list(states)
    return [] if states is None else [states]


def layer_mask_sizes(layer: Any, query_length: int) -> tuple[int, int]:
    """A cache layer's ``get_mask_sizes`` for a query of ``query_length`` tokens: it takes the length from 5.10 on,
    the query's ``cache_position`` tensor before (whose length is all it reads)."""
    first = next(iter(inspect.signature(layer.get_mask_sizes).parameters))
    if first == "cache_position":
        import torch

        start = int(layer.get_seq_length())
        return layer.get_mask_sizes(torch.arange(start, start + query_length))
    return layer.get_mask_sizes(query_length)


def image_processor_backends(model_type: str) -> dict[str, str] | None:
    """The image processor class names per backend (``pil``, ``torchvision``) transformers maps for ``model_type``;
    None where the release maps none. The table is ``auto_mappings``'s from 5.6, ``image_processing_auto``'s before;
    up to 5.3 an entry is a (slow, fast) pair: the slow class is the PIL/numpy one, the fast one needs torchvision."""
    # image_processing_auto adds the types it maps by hand (MISSING_IMAGE_PROCESSOR_MAPPING_NAMES: Inkling, PaliGemma,
    # the Qwen-VL family, ...) to the auto_mappings table when it is first imported; before that they read as unmapped.
    from transformers.models.auto import image_processing_auto

    try:
        from transformers.models.auto.auto_mappings import IMAGE_PROCESSOR_MAPPING_NAMES
    except ImportError:
        IMAGE_PROCESSOR_MAPPING_NAMES = image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES
    return _backends(IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type))


def video_processor_backends(model_type: str) -> dict[str, str] | None:
    """The video processor class names per backend transformers maps for ``model_type`` (as ``image_processor_backends``;
    before 5.6 an entry is one class name, a torchvision processor)."""
    try:
        from transformers.models.auto.auto_mappings import VIDEO_PROCESSOR_MAPPING_NAMES
    except ImportError:
        from transformers.models.auto.video_processing_auto import VIDEO_PROCESSOR_MAPPING_NAMES
    return _backends(VIDEO_PROCESSOR_MAPPING_NAMES.get(model_type), single="torchvision")


def _backends(entry: Any, single: str = "pil") -> dict[str, str] | None:
    """A mapping entry as backend -> class name: a dict as it is, a (slow, fast) pair as pil / torchvision, one name as
    ``single``'s."""
    if isinstance(entry, (tuple, list)):
        entry = {"pil": entry[0], "torchvision": entry[1] if len(entry) > 1 else None}
    elif isinstance(entry, str):
        entry = {single: entry}
    return dict(entry) if entry else None


def generation_positions(model: Any, start: int, length: int) -> dict[str, Any]:
    """``cache_position`` as ``generate()`` passed it to ``prepare_inputs_for_generation`` (positions ``start`` …
    ``start + length - 1``), where the forward takes one (5.0-5.3: mamba's input preparation reads it to tell
    decoding from prefill, and drops the attention mask on decode steps); nothing elsewhere."""
    if "cache_position" not in inspect.signature(model.forward).parameters:
        return {}
    import torch

    return {"cache_position": torch.arange(start, start + length)}


#: The decoder inputs of an encoder-decoder forward (:func:`feed_cache_position` leaves such calls alone).
DECODER_INPUTS = ("decoder_input_ids", "decoder_inputs_embeds")

#: The attribute where :func:`feed_cache_position` keeps the tokens a cache without ``get_seq_length`` has seen.
SEEN = "_kvconform_seen"


def feed_cache_position(model: Any) -> bool:
    """Give ``model`` the ``cache_position`` that ``generate()`` fed, where its forward takes one (5.0-5.3).

    Those releases' mamba, falcon_mamba and mamba2 forwards raise when a cache is passed without it (generate's
    ``prepare_inputs_for_generation`` always passed it); the others compute the same positions themselves. A
    forward pre-hook fills it, only when a cache is passed and the caller gave none, with the next positions
    ``arange(seen, seen + length)``: ``seen`` is the cache's ``get_seq_length()``, or, for caches without one
    (5.0's ``MambaCache``), the tokens fed to it, kept on the cache object (so a copied cache keeps its count).
    A call with decoder inputs (an encoder-decoder's) is left alone: its ``input_ids``, where given, are the encoder's
    (Florence-2's outer forward takes both), and its decoder numbers the tokens its cache takes itself.
    Returns whether the hook was installed (once).
    """
    if "cache_position" not in inspect.signature(model.forward).parameters or getattr(model, "_kvconform_positions", False):
        return False
    import torch

    def passed_cache(kwargs: dict[str, Any]) -> Any:
        return next((kwargs[k] for k in CACHE_KEYWORDS if kwargs.get(k) is not None), None)

    def query(kwargs: dict[str, Any]) -> Any:
        if any(kwargs.get(name) is not None for name in DECODER_INPUTS):  # an encoder-decoder numbers its decoder itself
            return None
        return kwargs.get("input_ids") if kwargs.get("input_ids") is not None else kwargs.get("inputs_embeds")

    def before(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        cache, tokens = passed_cache(kwargs), query(kwargs)
        if cache is None or tokens is None or kwargs.get("cache_position") is not None:
            return args, kwargs
        length = getattr(cache, "get_seq_length", None)
        start = int(length()) if length is not None else getattr(cache, SEEN, None)
        if start is not None:
            kwargs["cache_position"] = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        return args, kwargs

    def after(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        tokens, position, passed = query(kwargs), kwargs.get("cache_position"), passed_cache(kwargs)
        cache = next((getattr(output, k, None) for k in CACHE_KEYWORDS if getattr(output, k, None) is not None), None)
        if cache is None or tokens is None or hasattr(cache, "get_seq_length"):
            return
        if passed is None:
            setattr(cache, SEEN, tokens.shape[1])
        else:
            setattr(cache, SEEN, int(position[-1]) + 1 if position is not None else getattr(cache, SEEN, 0) + tokens.shape[1])

    model.register_forward_pre_hook(before, with_kwargs=True)
    model.register_forward_hook(after, with_kwargs=True)
    model._kvconform_positions = True
    return True
