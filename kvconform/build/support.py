"""Which cache paths and attention implementations a model supports, decided by transformers' own rules.

- static / quantized caches: what ``generate(cache_implementation=...)`` would build. A model class for
  which ``GenerationMixin._supports_default_dynamic_cache()`` is False gets no ``Cache`` from generate
  (the argument is ignored); otherwise ``StaticCache(config=…)`` / ``QuantizedCache(backend="fp8", config=…)``
  must accept the config (they raise for layer kinds they have no layer class for, and the quantized
  cache only takes full-attention stacks); generate refuses the quantized cache for encoder-decoders.
- attention: sdpa where the class declares ``_supports_sdpa``, flex_attention where it declares
  ``_supports_flex_attn`` (opt-in: it compiles once per model and worker) and where compiled flex_attention
  agrees with the math reference on the running CPU (``flex_check``); eager everywhere. An eager model is
  made as users do: ``set_attn_implementation("eager")``, or ``from_config(…, attn_implementation="eager")``
  for classes that cannot switch after construction.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from kvconform.build.geometry import cache_geometry
from kvconform.build.model_types import model_class
from kvconform.build.models import Model
from kvconform.build.quanto_kernel import share_quanto_build
from kvconform.compat import CACHE_KEYWORDS, assisted_needs_generate_cache, feed_cache_position, taken_cache_keyword
from kvconform.matrix import INT_QUANTIZED, QUANTIZED, ModelSpec, missing_backend

#: A cache length for trial construction (the layers are allocated lazily).
_TRIAL_LENGTH = 8

#: The ``QuantizedCache`` backend that needs no extra package (float8 values with a per-tensor scale).
QUANTIZED_BACKEND = "fp8"
#: Full-precision tokens an integer-quantized layer keeps before they are quantized: small, so the 8-step decode
#: flushes its residual twice (at steps 3 and 6 after a prefill).
RESIDUAL_LENGTH = 3
#: The axis the integer backends quantize keys and values along (``axis_key`` / ``axis_value``, transformers' default,
#: the one the residual design reproduces: ``probe.int_design``).
AXIS = 0
#: The integer backends' group size, where the head dims allow it (it must divide them, so that a quanto group
#: never spans two tokens and every length is a whole number of groups).
GROUP_SIZE = 16


def int_cache_config(config: Any, kind: str) -> dict[str, Any]:
    """The ``cache_config`` of an integer-quantized cell, every key QuantizedCache documents for these backends: backend,
    nbits, residual_length, q_group_size, axis_key, axis_value. Every quanto path passes here first, so quanto's CPU
    kernel is built once per machine (``quanto_kernel``), not per environment."""
    backend, nbits = INT_QUANTIZED[kind]
    if backend == "quanto":
        share_quanto_build()
    dims = [dim for layer in cache_geometry(config).kv_layers for dim in (layer.k_head_dim, layer.v_head_dim)]
    return {"backend": backend, "nbits": nbits, "residual_length": RESIDUAL_LENGTH,
            "q_group_size": math.gcd(GROUP_SIZE, *dims) if dims else GROUP_SIZE, "axis_key": AXIS, "axis_value": AXIS}


def quantized_cache(config: Any, kind: str) -> Any:
    """transformers' ``QuantizedCache`` for the cache kind ``kind`` (fp8, or an integer backend with its settings)."""
    from transformers import QuantizedCache

    if kind == QUANTIZED:
        return QuantizedCache(backend=QUANTIZED_BACKEND, config=config)
    return QuantizedCache(config=config, **int_cache_config(config, kind))


def attention_support(cls: Any, attn: str) -> str | None:
    """Why ``cls`` cannot run ``attn`` attention, or ``None``."""
    if attn == "sdpa" and not cls._supports_sdpa:
        return f"{cls.__name__} does not support sdpa (_supports_sdpa is False); its eager cells run its attention"
    if attn == "flex_attention" and not cls._supports_flex_attn:
        return f"{cls.__name__} does not support flex_attention (_supports_flex_attn is False)"
    return None


def has_fp8_backend() -> bool:
    """Whether the installed transformers builds ``QuantizedCache(backend="fp8")`` (5.24 does, 5.20 does not)."""
    from transformers import cache_utils

    return hasattr(cache_utils, "Fp8QuantizedLayer")


def cache_support(cls: Any, config: Any, cache: str) -> str | None:
    """Why ``generate()`` would not run ``cls`` with a ``cache`` cache, or ``None``."""
    if cache == "dynamic":
        return None
    if callable(getattr(cls, "sample_actions", None)):
        return (f"{cls.__name__}.sample_actions builds its prefix cache itself (model.vlm(..., use_cache=True): a "
                f"DynamicCache, {cls.__module__.rsplit('.', 1)[-1]}.py) and takes no cache or cache_implementation argument: "
                f"no {cache} cache runs it")
    if not cls._supports_default_dynamic_cache():
        return (f"{cls.__name__} keeps its own state outside transformers' Cache classes: generate() ignores "
                f"cache_implementation={cache!r} (_supports_default_dynamic_cache is False)")
    text = config.get_text_config(decoder=True)
    if cache == "quantized" and not has_fp8_backend():
        import transformers

        return (f"transformers {transformers.__version__} has no QuantizedCache backend {QUANTIZED_BACKEND!r} "
                "(it came in a later release; the quanto and hqq kinds need the quantized extra)")
    if cache != "static" and getattr(text, "is_encoder_decoder", False):
        return "generate() refuses the quantized cache for encoder-decoder configs"
    missing = missing_backend(cache)
    if missing:
        return missing
    from transformers import StaticCache

    try:
        if cache == "static":
            StaticCache(config=config, max_cache_len=_TRIAL_LENGTH)
        else:
            quantized_cache(config, cache)
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        backend = INT_QUANTIZED[cache][0] if cache in INT_QUANTIZED else QUANTIZED_BACKEND
        kind = "StaticCache" if cache == "static" else f"QuantizedCache(backend={backend!r})"
        return f"transformers builds no {kind} for this config: {type(exc).__name__}: {str(exc)[:200]}"
    return None


def crop_support(cls: Any) -> str | None:
    """Why ``generate()``'s assisted decoding (which rolls the cache back with ``crop``) refuses ``cls``, or ``None``.
    Whether the built cache can crop (``is_croppable``) is known only after a prefill (crop.py). A model that keeps its
    own cache is refused only where assisted decoding needs a cache generate() prepared (``assisted_needs_generate_cache``);
    before, it runs on the model's own cache (LFM2 up to 5.4), whose ``crop`` then decides."""
    if getattr(cls, "_is_stateful", False):
        return f"generate() refuses assisted decoding for {cls.__name__} (_is_stateful: 'assisted generation is not supported with stateful models')"
    if not cls._supports_default_dynamic_cache() and assisted_needs_generate_cache():
        return f"{own_cache(cls)} and assisted decoding raises 'Assisted decoding requires a cache'"
    return None


def own_cache(cls: Any) -> str | None:
    """Why ``generate()`` builds ``cls`` no ``Cache`` (it keeps its own: ``_supports_default_dynamic_cache()`` False), or
    ``None``; the crop path crops the cache generate() builds, so it does not apply then on any release."""
    if cls._supports_default_dynamic_cache():
        return None
    return f"{cls.__name__} keeps its own cache (_supports_default_dynamic_cache is False), so generate() builds none"


#: The paths ``--list-models`` counts, beside the dynamic cache every model runs.
LISTED_PATHS = ("static", "quantized", "sdpa", "eager", "flex_attention", "crop")


def spec_paths(spec: ModelSpec) -> dict[str, str | None]:
    """For a synthetic entry: why each of ``LISTED_PATHS`` does not run (``None``: it runs), by the rules the runner applies."""
    from kvconform.build.synthetic import shrink_config

    if spec.model_type is None:
        raise ValueError(f"{spec.id}: a checkpoint's paths are decided when it is loaded")
    cls = model_class(spec.model_type)
    config = shrink_config(spec.location, spec.config)
    return {"static": cache_support(cls, config, "static"), "quantized": cache_support(cls, config, "quantized"),
            "sdpa": attention_support(cls, "sdpa"), "eager": None,
            "flex_attention": attention_support(cls, "flex_attention"), "crop": crop_support(cls) or own_cache(cls)}


def state_support(cls: Any) -> str | None:
    """Why ``cls`` has no cache to test, or ``None``: its forward takes no cache argument (it keeps its state in its
    own layers, outside transformers' Cache classes, as RecurrentGemma does up to 5.3)."""
    if taken_cache_keyword(cls.forward) is None:
        return (f"{cls.__name__}.forward takes no cache argument (none of {', '.join(CACHE_KEYWORDS)}): it keeps its "
                "state in its own layers, outside transformers' Cache classes")
    return None


def cell_support(model: Model, cache: str, attn: str) -> str | None:
    """Why a cell with ``cache`` and ``attn`` cannot run on ``model``, or ``None``."""
    reason = (state_support(type(model)) or attention_support(type(model), attn)
              or cache_support(type(model), model.config, cache))
    if reason is None and attn == "flex_attention" and model.device.type == "cpu":
        from kvconform.build.flex_check import flex_disagreement

        reason = flex_disagreement(model.dtype)
    return reason


def attention_model(master: Model, attn: str) -> tuple[Model, bool]:
    """``master`` running ``attn`` attention, and whether it had to be rebuilt (a second load)."""
    if master.config._attn_implementation == attn:
        return master, False
    model = copy.deepcopy(master)
    model.set_attn_implementation(attn)
    if model.config._attn_implementation == attn:
        return model, False
    from transformers import AutoModelForCausalLM

    dtype = getattr(master.config, "dtype", None) or torch.float32
    rebuilt = AutoModelForCausalLM.from_config(copy.deepcopy(master.config), attn_implementation=attn, dtype=dtype)
    rebuilt.load_state_dict(master.state_dict())
    rebuilt.to(next(master.parameters()).device)
    feed_cache_position(rebuilt)  # as model_in_dtype does (5.0-5.3's mamba forwards need it)
    if rebuilt.config._attn_implementation != attn:
        raise RuntimeError(f"{type(master).__name__}: built with attn_implementation={attn!r}, runs {rebuilt.config._attn_implementation!r}")
    return rebuilt.eval(), True
