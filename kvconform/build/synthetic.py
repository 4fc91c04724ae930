"""Tiny random-weight models of every causal-LM architecture of the installed transformers.

A default config is shrunk by overriding only fields it already has (at the top level and in every
sub-config), per-layer lists are cut to one layer of each distinct kind so hybrid patterns
survive, and the per-architecture fixes of ``architectures.yaml`` are applied on top.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING,
)

from kvconform.build.architecture_table import architecture_table, default_sub_configs, load_architecture_table
from kvconform.build.model_types import causal_lm_model_types
from kvconform.compat import cpu_kernel_overrides

VOCAB_SIZE = 256
MIN_LAYERS = 2
_KV_HEADS = 2

#: Generic sizes, applied to every (sub-)config field of that name whose default is a number.
SIZES: dict[str, int | float] = {
    **dict.fromkeys(
        ("hidden_size", "d_model", "n_embd", "emb_dim", "word_embed_proj_dim", "lru_width",
         "hidden_size_global", "adapter_in_dim", "adapter_out_dim", "adapter_input_size"),
        64,
    ),
    **dict.fromkeys(
        ("num_attention_heads", "n_head", "n_heads", "num_heads", "decoder_attention_heads",
         "encoder_attention_heads", "num_decoder_attention_heads", "num_encoder_attention_heads",
         "swa_num_attention_heads"),
        4,
    ),
    # Sparse-indexer heads keep their default (32-64): with 4 heads the ReLU-summed indexer scores tie
    # at exactly 0 and torch.topk breaks the ties differently for different sequence lengths.
    **dict.fromkeys(
        ("head_dim", "attention_head_size", "d_head", "dim_head", "swa_head_dim"),
        16,
    ),
    # Sparse indexers split their head into a content part and qk_rope_head_dim (16) rotary dims, half and
    # half by default: at 16 the content part would be empty and whole rows of ReLU scores tie at 0.
    "index_head_dim": 32,
    # The full-attention layers' head width, where a config states it as a field (gemma4 and gemma4_unified up to
    # 5.14: global_head_dim 512 beside head_dim 256, configuration_gemma4.py:183 in 5.14.1); later releases fold it
    # into a per_layer_config override that the shrink scales by the same ratio to 16 × 512/256 = 32.
    "global_head_dim": 32,
    "rotary_dim": 8,
    **dict.fromkeys(
        ("intermediate_size", "ffn_dim", "decoder_ffn_dim", "encoder_ffn_dim", "n_inner", "d_ff",
         "dim_ff", "feed_forward_size", "ffn_hidden_size", "dense_intermediate_size",
         "prefix_dense_intermediate_size", "intermediate_size_mlp", "dff", "mamba_d_ssm"),
        128,
    ),
    **dict.fromkeys(
        ("moe_intermediate_size", "shared_expert_intermediate_size", "shared_intermediate_size",
         "moe_shared_expert_intermediate_size", "shared_experts_intermediate_size",
         "expert_ffn_hidden_size"),
        64,
    ),
    **dict.fromkeys(
        ("vocab_size", "decoder_vocab_size", "output_vocab_size", "unpadded_vocab_size"), VOCAB_SIZE
    ),
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "context_length",
         "max_target_positions", "max_source_positions"),
        64,
    ),
    # Mixture of experts: 4 experts, top-2, one shared expert, the first layer dense.
    **dict.fromkeys(
        ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"), 4
    ),
    **dict.fromkeys(
        ("num_experts_per_tok", "moe_topk", "top_k_experts", "num_experts_per_token", "moe_k"), 2
    ),
    **dict.fromkeys(("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"), 1),
    "first_k_dense_replace": 1,
    "zero_expert_num": 2,
    "n_group": 2,
    "topk_group": 1,
    "num_expert_group": 2,
    # Multi-head latent attention and sparse (indexed) attention over 4 selected tokens.
    "q_lora_rank": 32,
    "kv_lora_rank": 24,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 16,
    "qk_head_dim": 32,
    "v_head_dim": 16,
    "o_lora_rank": 32,
    "index_topk": 4,
    # State-space / linear attention.
    **dict.fromkeys(("state_size", "mamba_d_state", "ssm_state_size"), 8),
    **dict.fromkeys(("linear_key_head_dim", "linear_value_head_dim", "linear_head_dim"), 16),
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_num_heads": 4,
    **dict.fromkeys(("mamba_n_heads", "mamba_num_heads"), 8),
    **dict.fromkeys(("mamba_d_head", "mamba_head_dim"), 16),
    **dict.fromkeys(("time_step_rank", "mamba_dt_rank"), 8),
    # Other low-rank and side widths.
    **dict.fromkeys(
        ("laurel_rank", "adapter_rank", "hidden_size_per_layer_input", "prompt_mid_dim",
         "input_embedding_size", "output_embedding_size", "hc_lowrank", "shape_embed_dim",
         "pronunciation_embed_dim"),
        16,
    ),
    **dict.fromkeys(
        ("vocab_size_per_layer_input", "encoder_hash_byte_group_vocab", "shape_vocab_size",
         "pronunciation_vocab_size"),
        VOCAB_SIZE,
    ),
    # Sliding / chunked attention: a window of 4 so a 9-token sequence crosses it.
    **dict.fromkeys(
        ("sliding_window", "attention_window_size", "sliding_window_size", "window_size",
         "attention_chunk_size", "local_attention_window_len", "keep_window_size"),
        4,
    ),
    # Larger than the default 0.02 so logits are not flat.
    **dict.fromkeys(("initializer_range", "init_std"), 0.15),
}

#: Key/value head counts: shrunk to 2 (GQA against 4 query heads) unless the default is 1 (MQA).
KV_HEAD_FIELDS = (
    "num_key_value_heads", "num_kv_heads", "kv_n_heads", "swa_num_key_value_heads", "num_global_key_value_heads",
)

#: Layer counts, whose value becomes the number of distinct per-layer kinds (at least 2).
LAYER_FIELDS = (
    "num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers",
    "num_decoder_layers", "encoder_layers", "num_encoder_layers",
)


def _check_model_type(model_type: str) -> None:
    """Raise a ValueError naming close matches if ``model_type`` is not a causal-LM type."""
    known = causal_lm_model_types()
    if model_type not in known:
        close = difflib.get_close_matches(model_type, known, n=5)
        matches = ", ".join(close) or "none"
        raise ValueError(f"unknown causal-LM model_type {model_type!r}; close matches: {matches}")


def _is_size(value: Any) -> bool:
    """A non-zero number (zero, None and booleans usually mean "disabled" and are kept)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0


def _shrunk_size(key: str, value: Any, values: Mapping[str, Any]) -> Any:
    """The generic size for ``key``; key/value heads keep MQA and follow latent attention."""
    if key not in KV_HEAD_FIELDS:
        return SIZES[key]
    if _is_size(values.get("kv_lora_rank")):  # latent attention expands K/V to every query head
        return SIZES["num_attention_heads"]
    return 1 if value == 1 else _KV_HEADS


def _shrink_sizes(values: Mapping[str, Any]) -> dict[str, Any]:
    """Generic sizes for the fields ``values`` has, also inside per-layer lists of sizes."""
    out: dict[str, Any] = {}
    for key in (*SIZES, *KV_HEAD_FIELDS):
        value = values.get(key)
        if _is_size(value):
            out[key] = _shrunk_size(key, value, values)
        elif isinstance(value, list) and value and all(_is_size(v) for v in value):
            out[key] = [_shrunk_size(key, v, values) for v in value]
    return out


def _shrink_token_ids(values: Mapping[str, Any]) -> dict[str, Any]:
    """Token ids beyond the shrunk vocabulary, moved to distinct ids at its top."""
    out: dict[str, Any] = {}
    free = iter(range(VOCAB_SIZE - 1, 0, -1))
    for key, value in values.items():
        if not key.endswith(("_token_id", "_token_index")):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= VOCAB_SIZE:
            out[key] = next(free)
        elif isinstance(value, list) and any(isinstance(v, int) and v >= VOCAB_SIZE for v in value):
            out[key] = [v if v < VOCAB_SIZE else next(free) for v in value]
    return out


def _scale_layer_entry(
    entry: Mapping[str, Any], values: Mapping[str, Any], shrunk: Mapping[str, Any]
) -> dict[str, Any]:
    """A ``per_layer_config`` entry with sizes scaled like their global counterparts."""
    out = dict(entry)
    for key, value in entry.items():
        if _is_size(value) and _is_size(shrunk.get(key)) and _is_size(values.get(key)):
            out[key] = max(1, round(shrunk[key] * value / values[key]))
    return out


def _is_index_list(key: str, value: Any, n_layers: int) -> bool:
    """Layer indices such as ``moe_layers`` or ``full_attn_idxs`` (increasing, < ``n_layers``)."""
    return (
        ("layer" in key or "idx" in key) and isinstance(value, list)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
        and all(0 <= a < b for a, b in zip(value, value[1:], strict=False)) and all(x < n_layers for x in value)
    )


def _shrink_layers(values: Mapping[str, Any], shrunk: Mapping[str, Any]) -> dict[str, Any]:
    """Layer count and per-layer data cut to the first layer of each distinct kind (in order).

    A layer's kind is its entry in every per-layer list, its membership in every layer-index
    list and its ``per_layer_config`` overrides, so hybrid and heterogeneous stacks keep one layer
    of each kind (at least ``MIN_LAYERS``).
    """
    count_key = next((k for k in LAYER_FIELDS if _is_size(values.get(k))), None)
    if count_key is None:
        return {}
    n_layers = values[count_key]
    current = {**values, **shrunk}
    indexed = [k for k, v in current.items() if _is_index_list(k, v, n_layers)]
    per_layer = [
        k for k, v in current.items()
        if k not in indexed and isinstance(v, list) and len(v) == n_layers > 1
        and all(isinstance(x, (str, int, float, bool)) for x in v)
    ]
    layer_config = {int(k): v for k, v in (values.get("per_layer_config") or {}).items()}
    kinds: dict[tuple[Any, ...], int] = {}
    for i in range(n_layers):
        kind = (
            *(current[k][i] for k in per_layer), *(i in current[k] for k in indexed),
            repr(sorted(layer_config.get(i, {}).items())),
        )
        kinds.setdefault(kind, i)
    kept = list(kinds.values())
    kept += kept[-1:] * (MIN_LAYERS - len(kept))
    out: dict[str, Any] = {k: [current[k][i] for i in kept] for k in per_layer}
    out.update({k: [new for new, old in enumerate(kept) if old in current[k]] for k in indexed})
    out.update({k: len(kept) for k in LAYER_FIELDS if _is_size(values.get(k))})
    if layer_config:
        out["per_layer_config"] = {
            new: _scale_layer_entry(layer_config[old], values, shrunk)
            for new, old in enumerate(kept) if old in layer_config
        }
    return out


def shrink_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Overrides for one (sub-)config given as a dict; sub-configs come back as whole dicts."""
    out = _shrink_sizes(values)
    out.update(_shrink_token_ids(values))
    out.update(_shrink_layers(values, out))
    out.update(cpu_kernel_overrides(dict(values)))
    for key, value in values.items():
        if isinstance(value, dict) and "model_type" in value:
            out[key] = {**value, **shrink_values(value)}
    return out


def merge_overrides(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``extra``; nested dicts merge, dotted keys address sub-configs."""
    for key, value in extra.items():
        head, _, rest = key.partition(".")
        if rest:
            value, key = {rest: value}, head
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = merge_overrides(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _sub_config(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A default sub-config as a dict: a config class by name, or a model_type with its init kwargs."""
    import transformers

    if "class" in spec:
        return getattr(transformers, spec["class"])().to_dict()
    return AutoConfig.for_model(spec["model_type"], **dict(spec.get("init") or {})).to_dict()


def default_config(model_type: str, fixes: Mapping[str, Any]) -> PreTrainedConfig:
    """The default config; a composite whose class requires its sub-configs (up to 5.9) or builds a broken default of
    one (5.0's phi4_multimodal, 5.0-5.3's pix2struct) is given, as a checkpoint gives it, the defaults later releases
    declare (``architectures.yaml`` ``default_sub_configs``); with the table's ``fixes`` where that fails validation."""
    subs = default_sub_configs().get(model_type)
    if subs is None:
        try:
            return AutoConfig.for_model(model_type)
        except (ValueError, StrictDataclassError):
            pass
    values = {name: _sub_config(spec) for name, spec in (subs or {}).items()}
    if values:
        try:
            return AutoConfig.for_model(model_type, **values)
        except (ValueError, StrictDataclassError):
            pass
    return AutoConfig.for_model(model_type, **values, **copy.deepcopy(dict(fixes)))


def shrink_config(model_type: str, overrides: Mapping[str, Any] | None = None) -> PreTrainedConfig:
    """The default config of ``model_type`` shrunk, then the table's and the caller's overrides."""
    _check_model_type(model_type)
    fixes = load_architecture_table()[0].get(model_type, {})
    default = default_config(model_type, fixes)
    values = shrink_values(default.to_dict())
    merge_overrides(values, fixes)
    merge_overrides(values, overrides or {})
    return AutoConfig.for_model(model_type, **_sub_configs_as_saved(default, values))


def _sub_configs_as_saved(default: PreTrainedConfig, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without the generic ``PreTrainedConfig`` fields that sub-config dicts hold at their defaults, as a
    saved ``config.json`` omits them (``to_diff_dict``): up to 5.19 ``DbrxFFNConfig`` rejects the generic fields
    (``return_dict``, ``id2label``, ...) its own ``to_dict`` writes (configuration_dbrx.py, ``Found unknown kwargs``)."""
    generic = set(PreTrainedConfig().to_dict()) - {"model_type"}
    for key in default.sub_configs:
        sub = getattr(default, key, None)
        if not isinstance(sub, PreTrainedConfig) or not isinstance(values.get(key), dict):
            continue
        try:
            class_defaults = type(sub)().to_dict()
        except Exception:  # noqa: BLE001 - a sub-config class without defaults keeps its whole dict
            continue
        values[key] = {
            name: value for name, value in values[key].items()
            if name not in generic or name not in class_defaults or class_defaults[name] != value
        }
    return values


def build_synthetic(config: PreTrainedConfig, seed: int) -> PreTrainedModel:
    """A float32 eval-mode causal LM with random weights drawn from ``seed``."""
    torch.manual_seed(seed)
    model_class: Any = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]  # a model class (the mapping is typed loosely)
    sub_config = (architecture_table().get("build_from_sub_config") or {}).get(config.model_type)
    if sub_config is None and _same_class(getattr(model_class, "config_class", None), config.sub_configs.get("text_config")):
        sub_config = "text_config"  # the swap from_pretrained makes in every release (from_config only from 5.8)
    with uninitialized_as_zeros():
        if sub_config is None:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        else:
            model = model_class._from_config(getattr(config, sub_config), dtype=torch.float32)
    break_zero_init(model, seed)
    return model.float().eval()


def _same_class(a: Any, b: Any) -> bool:
    """Both classes, and the same one by module and name (a test that re-imports transformers leaves two objects)."""
    return isinstance(a, type) and isinstance(b, type) and (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


#: Standard deviation of the noise given to parameters a model initialises to exactly zero: the scale of
#: the shrunk models' other weights, so that selections over such scales are not near-ties either.
ZERO_INIT_STD = SIZES["initializer_range"]


@contextmanager
def padding_rows_drawn(model: Any, seed: int) -> Iterator[int]:
    """For the duration, every all-zero ``padding_idx`` embedding row holds seeded noise of its embedding's own scale;
    then the zero rows come back. Yields how many rows were drawn. A random build's pad row is zero (``_init_weights``),
    and with its zero biases a padded position is then exactly zero in every layer, so a model that lets left padding
    leak into the real tokens (RecurrentGemma's temporal convolution, ``recurrent_gemma_left_padding_leaks_through_conv1d.py``)
    shows nothing; a model that honours its mask ignores whatever sits under it."""
    generator = torch.Generator().manual_seed(seed)
    drawn = []
    with torch.no_grad():
        for module in model.modules():
            row = module.padding_idx if isinstance(module, torch.nn.Embedding) else None
            weight = module.weight if row is not None else None
            if weight is not None and weight.is_floating_point() and weight.shape[0] > 1 and not weight[row].any():
                noise = torch.randn(weight.shape[1:], generator=generator) * float(weight.float().std())
                weight[row] = noise.to(weight.dtype).to(weight.device)
                drawn.append((weight, row))
    try:
        yield len(drawn)
    finally:
        with torch.no_grad():
            for weight, row in drawn:
                weight[row] = 0


@contextmanager
def uninitialized_as_zeros() -> Iterator[None]:
    """Build a model with ``torch.empty`` returning zeros, so a parameter no ``_init_weights`` reaches is all zero (and
    ``break_zero_init`` gives it seeded noise) instead of whatever memory it was given: Qwen3-Omni-MoE's talker experts
    (``Qwen3OmniMoeTalkerTextExperts``, allocated with ``torch.empty``; ``_init_weights`` initializes the thinker's experts
    only, modeling_qwen3_omni_moe.py:133-147 in 5.24) held values up to 4.6e19 on some builds, and logits that were not
    finite: a verdict that changed from run to run, from the build, not the cache."""
    empty = torch.empty
    torch.empty = torch.zeros  # type: ignore[assignment]  # the two overloads differ only in their typing
    try:
        yield
    finally:
        torch.empty = empty


def break_zero_init(model: PreTrainedModel, seed: int) -> list[str]:
    """Give all-zero weights (not biases) seeded noise, and name them.

    Zero-initialised gates, selection scales (doge's ``A``) or routers make every score of a
    selection equal, so top-k picks by tie-breaking, which differs between sequence lengths: a
    difference that comes from the build, not the cache. Trained checkpoints have no such ties.
    """
    generator = torch.Generator().manual_seed(seed)
    changed = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
                changed.append(name)
    return changed
