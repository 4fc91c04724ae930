"""What a model's config says its KV cache must look like — every shape rule lives here.

Rules are keyed by evidence in the config (``layer_types``, ``sliding_window``, ``kv_lora_rank``,
``multi_query`` …), never by ``model_type``. ``H_kv`` is the KV-head count after GQA/MQA, not the
query-head count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvconform.build.architecture_table import cache_layout_facts
from kvconform.compat import mla_caches_latents

#: Layer types that keep K/V per token, and how many tokens they keep. A reference sliding window (R-SWA) keeps the
#: prompt whole and a window of the tokens decoded after it (UnlimitedOcrDynamicReferenceSlidingWindowLayer).
FULL, SLIDING, REFERENCE_SLIDING, NO_KV = "full", "sliding", "reference_sliding", "no_kv"
_LAYER_TYPE_KIND = {
    "full_attention": FULL,
    "attention": FULL,
    "global_attention": FULL,
    "indexed_attention": FULL,
    "hybrid": FULL,
    "sliding_attention": SLIDING,
    "chunked_attention": SLIDING,
    "local_attention": SLIDING,
    "hybrid_sliding": SLIDING,
    # Compressed attention keeps its raw recent tokens in a sliding window; compressed entries live elsewhere.
    "heavily_compressed_attention": SLIDING,
    "compressed_sparse_attention": SLIDING,
    "reference_sliding_attention": REFERENCE_SLIDING,
}
#: Layer types that keep no per-token K/V (recurrent/conv state, or none at all).
_NO_KV_TYPES = {"linear_attention", "conv", "mamba", "mamba2", "ssm", "recurrent", "moe", "mlp", "dummy", "rwkv"}


@dataclass(frozen=True)
class LayerGeometry:
    """The cache one decoder layer must keep."""

    index: int
    kind: str
    """``full``, ``sliding`` or ``no_kv``."""
    reason: str
    """The config evidence for ``kind`` (e.g. ``layer_types[3]='linear_attention'``)."""
    kv_heads: int = 0
    k_head_dim: int = 0
    v_head_dim: int = 0
    window: int | None = None

    @property
    def keeps_kv(self) -> bool:
        return self.kind != NO_KV

    def stored_length(self, seen: int, max_cache_len: int | None, prompt: int = 0) -> int:
        """Tokens this layer must hold after ``seen`` tokens of which the first ``prompt`` were the prefill (static caches:
        ``max_cache_len``)."""
        if self.kind == NO_KV:
            return 0
        if self.kind == REFERENCE_SLIDING and self.window is not None:
            # The prompt whole, then the window over the decoded tokens: a dynamic layer keeps the last window-1 decoded
            # tokens (its DynamicSlidingWindowLayer part); a static one preallocates min(window, max_cache_len) window
            # slots and, before them, the prompt's in what max_cache_len leaves
            # (UnlimitedOcrStaticReferenceSlidingWindowLayer.__init__ and _allocate_key_value_buffers).
            if max_cache_len is not None:
                window = min(self.window, max_cache_len)
                return min(prompt, max_cache_len - window) + window
            return prompt + min(seen - prompt, self.window - 1)
        if max_cache_len is not None:
            return max_cache_len if self.window is None else min(self.window, max_cache_len)
        if self.window is None:
            return seen
        # A query attends to itself plus the previous window-1 keys: that is all the cache needs.
        return min(seen, self.window - 1)

    def expected_shapes(self, batch: int, seen: int, max_cache_len: int | None,
                        prompt: int = 0) -> tuple[tuple[int, ...], tuple[int, ...]]:
        length = self.stored_length(seen, max_cache_len, prompt)
        return (batch, self.kv_heads, length, self.k_head_dim), (batch, self.kv_heads, length, self.v_head_dim)

    def expected_bytes(self, batch: int, seen: int, max_cache_len: int | None, bytes_per_value: float, prompt: int = 0) -> int:
        """The seeds' formula for one layer: (d_k + d_v) × H_kv × S_layer × B × bytes."""
        length = self.stored_length(seen, max_cache_len, prompt)
        return int((self.k_head_dim + self.v_head_dim) * self.kv_heads * length * batch * bytes_per_value)


@dataclass(frozen=True)
class CacheGeometry:
    """Per-layer expectations plus the config figures they came from."""

    layers: tuple[LayerGeometry, ...]
    query_heads: int

    @property
    def kv_layers(self) -> tuple[LayerGeometry, ...]:
        return tuple(layer for layer in self.layers if layer.keeps_kv)

    def expected_bytes(self, batch: int, seen: int, max_cache_len: int | None, bytes_per_value: float, prompt: int = 0) -> int:
        return sum(layer.expected_bytes(batch, seen, max_cache_len, bytes_per_value, prompt) for layer in self.layers)


def _get(config: Any, *names: str) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return None


def _latent_mla(config: Any) -> bool:
    """An MLA config (``kv_lora_rank`` set) whose release caches the latent; before 5.15 MLA caches K/V per query head."""
    return bool(getattr(config, "kv_lora_rank", None)) and mla_caches_latents(getattr(config, "model_type", ""))


def kv_heads(config: Any, sliding: bool = False, full: bool = False) -> tuple[int, str]:
    """KV heads after GQA/MQA, with the evidence used (sliding layers read ``swa_num_key_value_heads`` if set;
    full-attention layers ``num_global_key_value_heads`` where ``attention_k_eq_v`` turns it on, as gemma4's
    attention does up to 5.14, modeling_gemma4.py:1195-1198 in 5.14.1; later releases state it in ``per_layer_config``)."""
    query = int(_get(config, "num_attention_heads", "n_head", "num_heads"))
    if sliding and _get(config, "swa_num_key_value_heads"):
        return int(config.swa_num_key_value_heads), "swa_num_key_value_heads (sliding layer)"
    if full and getattr(config, "attention_k_eq_v", False) and _get(config, "num_global_key_value_heads"):
        return int(config.num_global_key_value_heads), "num_global_key_value_heads (full-attention layer, attention_k_eq_v)"
    if getattr(config, "kv_lora_rank", None):
        if _latent_mla(config):
            return 1, "MLA latent cache (kv_lora_rank set): one shared latent 'head'"
        return query, "MLA with K/V expanded per query head (kv_lora_rank set; this release's attention has no expand_kv)"
    if getattr(config, "new_decoder_architecture", None) and _get(config, "num_kv_heads"):
        return int(config.num_kv_heads), "num_kv_heads (new_decoder_architecture)"
    if getattr(config, "multi_query", None) is True:
        return 1, "multi_query=True (MQA)"
    value = _get(config, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if value is not None:
        return int(value), "num_key_value_heads"
    return query, "num_attention_heads (no KV-head field: MHA)"


def uses_rope(config: Any, index: int) -> tuple[bool, str]:
    """Whether layer ``index`` applies rotary embeddings, with the evidence: ``no_rope_layers`` marks each layer
    1 (RoPE) or 0 (NoPE), the convention of smollm3, llama4 and mistral_large4's configs."""
    flags = getattr(config, "no_rope_layers", None)
    if isinstance(flags, list) and index < len(flags) and not flags[index]:
        return False, f"no_rope_layers[{index}]=0 (NoPE layer)"
    return True, "rotary"


def head_dims(config: Any, sliding: bool = False, rotary: bool = True, full: bool = False) -> tuple[int, int, str]:
    """(K head dim, V head dim, evidence): MLA latents have K and V of different widths, and a NoPE layer's
    rotary slot is empty; sliding layers read ``swa_head_dim`` if set, full-attention layers ``global_head_dim``
    (gemma4 up to 5.14: ``self.head_dim = config.global_head_dim if not self.is_sliding``, modeling_gemma4.py:1194
    in 5.14.1; later releases state it in ``per_layer_config``)."""
    if sliding and _get(config, "swa_head_dim"):
        return int(config.swa_head_dim), int(config.swa_head_dim), "swa_head_dim (sliding layer)"
    if full and _get(config, "global_head_dim"):
        return int(config.global_head_dim), int(config.global_head_dim), "global_head_dim (full-attention layer)"
    rank = getattr(config, "kv_lora_rank", None)
    if rank and not _latent_mla(config):
        nope, rope, value = (int(_get(config, name) or 0) for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
        return nope + rope, value, "MLA expanded per head: K = qk_nope_head_dim + qk_rope_head_dim, V = v_head_dim"
    if rank:
        if not rotary:  # the layer projects no rotary key and caches a slot of width 0 (modeling_mistral_large4.py:348)
            return int(rank), 0, "MLA latent: K slot = kv_lora_rank (compressed KV), V slot empty (NoPE layer: no rotary key)"
        rope = int(_get(config, "qk_rope_head_dim") or 0)
        return int(rank), rope, "MLA latent: K slot = kv_lora_rank (compressed KV), V slot = qk_rope_head_dim (shared rotary key)"
    head_dim = _get(config, "head_dim")
    if head_dim:
        return int(head_dim), int(head_dim), "head_dim"
    # Zamba states its head width as attention_head_dim (default 2 * hidden_size // num_attention_heads,
    # modeling_zamba.py:229 reads it); releases before 5.5 do not alias head_dim to it (configuration_zamba.py:56
    # in 5.5.4 adds the attribute_map entry).
    head_dim = _get(config, "attention_head_dim")
    if head_dim:
        return int(head_dim), int(head_dim), "attention_head_dim"
    hidden = int(_get(config, "hidden_size", "n_embd", "d_model"))
    heads = int(_get(config, "num_attention_heads", "n_head", "num_heads"))
    return hidden // heads, hidden // heads, "hidden_size / num_attention_heads"


def config_layer_types(config: Any) -> list[str] | None:
    """``layer_types``, or the older ``layers_block_type`` (recurrent_gemma before transformers 5.24), whose
    'attention' blocks attend within ``attention_window_size`` when the config sets one."""
    layer_types = getattr(config, "layer_types", None)
    blocks = getattr(config, "layers_block_type", None)
    if layer_types is not None or not isinstance(blocks, list):
        return layer_types
    windowed = getattr(config, "attention_window_size", None) is not None
    return ["sliding_attention" if windowed and name == "attention" else name for name in blocks]


def _layer_kind(config: Any, layer_config: Any, index: int) -> tuple[str, str, int | None]:
    layer_types = config_layer_types(config)
    sharing = getattr(config, "kv_sharing_modes", None)
    if sharing is not None and sharing[index] == "reuse":
        return NO_KV, f"kv_sharing_modes[{index}]='reuse' (reads another layer's K/V)", None
    shared = int(getattr(config, "num_kv_shared_layers", 0) or 0)
    if sharing is None and shared and index >= int(config.num_hidden_layers) - shared:
        return NO_KV, f"one of the last num_kv_shared_layers={shared} layers (reads an earlier layer's K/V)", None
    if index in (getattr(config, "cross_attention_layers", None) or ()):
        return NO_KV, f"cross_attention_layers lists {index} (attends to encoder states, keeps no token K/V)", None
    if layer_types is None and _get(layer_config, "num_attention_heads") is None:
        return NO_KV, "no num_attention_heads in the config: a recurrent/SSM state, no K/V", None
    window = _get(layer_config, "sliding_window", "attention_chunk_size")
    if layer_types is not None:
        name = layer_types[index]
        if name in _NO_KV_TYPES:
            return NO_KV, f"layer_types[{index}]={name!r}", None
        kind = _LAYER_TYPE_KIND.get(name, FULL)
        if kind in (SLIDING, REFERENCE_SLIDING):
            window = _get(layer_config, "attention_chunk_size") if name == "chunked_attention" else _get(layer_config, "sliding_window")
            return kind, f"layer_types[{index}]={name!r}, window {window}", int(window)
        return FULL, f"layer_types[{index}]={name!r}", None
    if window is not None:
        return SLIDING, f"sliding_window={window}", int(window)
    return FULL, "full attention (no layer_types, no sliding_window)", None


def _text_config(config: Any) -> Any:
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


def _layer_configs(text: Any) -> list[Any]:
    return list(getattr(text, "per_layer_config", None) or [text] * int(text.num_hidden_layers))


def _cache_order(text: Any, count: int) -> list[int]:
    """Config layer index of each cache slot: looped recurrent blocks keep one cache per loop, the copies
    for loops 1, 2, … appended after the model's own layers (as DoryModel.forward appends them)."""
    loops = getattr(text, "n_recurrent_loops", None)
    if not loops or getattr(text, "recurrent_kv_cache_mode", None) != "per_loop":
        return list(range(count))
    first, recurrent = int(text.n_input_layers), int(text.n_recurrent_layers)
    return list(range(count)) + [first + i for _ in range(int(loops) - 1) for i in range(recurrent)]


def _declared_layout(text: Any) -> dict[str, Any]:
    """Cache-layout facts a model hard-codes instead of stating in its config (``architectures.yaml``)."""
    return cache_layout_facts().get(getattr(text, "model_type", ""), {})


def cache_geometry(config: Any) -> CacheGeometry:
    """Expected cache layout for a (text/decoder) config, one entry per cache layer."""
    text = _text_config(config)
    layer_configs = _layer_configs(text)
    layers = []
    for slot, index in enumerate(_cache_order(text, len(layer_configs))):
        layer_config = layer_configs[index]
        kind, reason, window = _layer_kind(text, layer_config, index)
        if slot != index:
            reason += f"; loop copy of layer {index} (recurrent_kv_cache_mode=per_loop)"
        if kind == NO_KV:
            layers.append(LayerGeometry(index=slot, kind=kind, reason=reason))
            continue
        heads, _ = kv_heads(layer_config, sliding=kind == SLIDING, full=kind == FULL)
        heads *= _declared_layout(text).get(f"{kind}_kv_heads_multiplier", 1)
        rotary, rope_reason = uses_rope(text, index)
        if not rotary and getattr(layer_config, "kv_lora_rank", None):  # the only layout a NoPE layer changes
            reason += f"; {rope_reason}"
        k_dim, v_dim, _ = head_dims(layer_config, sliding=kind == SLIDING, rotary=rotary, full=kind == FULL)
        layers.append(LayerGeometry(slot, kind, reason, heads, k_dim, v_dim, window))
    query = int(_get(layer_configs[0], "num_attention_heads", "n_head", "num_heads") or 0)
    return CacheGeometry(layers=tuple(layers), query_heads=query)


def explain(config: Any) -> str:
    """One line naming where H_kv and head_dim come from (for failure messages)."""
    text = _text_config(config)
    layer_config = _layer_configs(text)[0]
    if _get(layer_config, "num_attention_heads", "n_head", "num_heads") is None:
        return "no attention heads in the config"
    heads, head_reason = kv_heads(layer_config)
    k_dim, v_dim, dim_reason = head_dims(layer_config)
    return f"H_kv={heads} from {head_reason}; K/V head dims {k_dim}/{v_dim} from {dim_reason} (first layer)"
