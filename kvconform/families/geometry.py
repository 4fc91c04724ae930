"""Cache geometry of the encoder-decoder halves, from config evidence.

Self-attention (decoder): one layer per decoder layer, ``[B, H_kv, S, head_dim]`` growing by one per
step. Cross-attention: the same heads and head size (or the decoder's own ``cross_*`` fields where its
cross-attention has heads of its own: Dia), holding the encoder's length from the prefill on.
Decoder fields win over shared ones (``decoder_layers`` over ``num_hidden_layers``, which BART maps to
the encoder); T5 gives its per-head width as ``d_kv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvconform.build.geometry import FULL, CacheGeometry, LayerGeometry, cache_geometry
from kvconform.families import CROSS_HALF, SELF_HALF


def _get(config: Any, *names: str) -> tuple[Any, str | None]:
    """The first of ``names`` the config sets, skipping a name its class aliases to an encoder field (Whisper maps
    ``num_key_value_heads`` to ``encoder_attention_heads``: the decoder's own heads are another field)."""
    aliases = getattr(type(config), "attribute_map", {}) or {}
    for name in names:
        if str(aliases.get(name, "")).startswith("encoder"):
            continue
        value = getattr(config, name, None)
        if value is not None and not isinstance(value, bool):
            return value, name
    return None, None


def _decoder_config(config: Any) -> Any:
    """The decoder's sub-config of a composite config, else the flat config itself.

    Not ``get_text_config(decoder=True)``: on flat encoder-decoder configs (BART, Whisper) it copies the
    config and moves ``decoder_layers`` to ``num_hidden_layers`` (which BART maps to ``encoder_layers``),
    and the deleted ``decoder_layers`` then reads the class default (whisper: 4 for a 2-layer decoder).
    """
    for name in ("decoder", "decoder_config", "text_config", "generator"):
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            return sub
    return config


@dataclass(frozen=True)
class DecoderHeads:
    """Layer count, KV heads and head size of the decoder, with the fields they came from."""

    layers: int
    kv_heads: int
    head_dim: int
    evidence: str


#: The decoder fields of a cross-attention with heads of its own, read before the shared ones for the cross half: Dia's
#: ``DiaCrossAttention`` takes ``cross_num_attention_heads``, ``cross_num_key_value_heads`` and ``cross_head_dim``
#: (modeling_dia.py:330-333), unlike its self-attention (DiaDecoderConfig defaults: 4 KV heads in self-attention, 16
#: across, configuration_dia.py:66-70).
CROSS_FIELDS: dict[str, tuple[str, ...]] = {"heads": ("cross_num_attention_heads",), "kv": ("cross_num_key_value_heads",), "head_dim": ("cross_head_dim",)}


def decoder_heads(config: Any, cross: bool = False) -> DecoderHeads:
    """The decoder's layers, KV heads and head size; ``cross``: those of its cross-attention."""
    decoder = _decoder_config(config)
    own: dict[str, tuple[str, ...]] = CROSS_FIELDS if cross else {}
    layers, layers_from = _get(decoder, "decoder_layers", "num_decoder_layers", "decoder_num_hidden_layers", "num_hidden_layers", "num_layers")
    heads, heads_from = _get(decoder, *own.get("heads", ()), "decoder_attention_heads", "num_decoder_attention_heads",
                             "decoder_num_attention_heads", "num_attention_heads", "num_heads")
    kv, kv_from = _get(decoder, *own.get("kv", ()), "decoder_num_key_value_heads", "num_key_value_heads")
    if kv is None:
        kv, kv_from = heads, f"{heads_from} (no KV-head field: MHA)"
    head_dim, dim_from = _get(decoder, *own.get("head_dim", ()), "d_kv", "head_dim")
    if head_dim is None:
        width, width_from = _get(decoder, "d_model", "hidden_size")
        head_dim, dim_from = int(width) // int(heads), f"{width_from} / {heads_from}"
    evidence = f"{layers_from}={layers}, H_kv={kv} from {kv_from}, head_dim={head_dim} from {dim_from}"
    return DecoderHeads(int(layers), int(kv), int(head_dim), evidence)


@dataclass(frozen=True)
class CrossLayerGeometry(LayerGeometry):
    """A cross-attention layer: it stores the encoder's length whatever the decoder has seen."""

    encoder_length: int = 0

    def stored_length(self, seen: int, max_cache_len: int | None, prompt: int = 0) -> int:
        return self.encoder_length


def self_attention_geometry(config: Any) -> tuple[CacheGeometry, str]:
    """The decoder self-attention half and a one-line explanation.

    A decoder sub-config is read by the causal rules (``layer_types``, sliding windows, KV heads); a flat
    encoder-decoder config by its ``decoder_*`` fields.
    """
    heads = decoder_heads(config)
    decoder = _decoder_config(config)
    if decoder is not config:
        geometry = cache_geometry(decoder)
        kinds = sorted({layer.reason for layer in geometry.layers})
        return geometry, f"{SELF_HALF}: {heads.evidence}; layer kinds: {'; '.join(kinds)}"
    layers = tuple(
        LayerGeometry(i, FULL, f"{SELF_HALF} layer {i}", heads.kv_heads, heads.head_dim, heads.head_dim)
        for i in range(heads.layers)
    )
    return CacheGeometry(layers, heads.kv_heads), f"{SELF_HALF}: {heads.evidence}"


def cross_attention_geometry(config: Any, encoder_length: int) -> tuple[CacheGeometry, str]:
    """The cross-attention half: the decoder's (cross-attention) heads over ``encoder_length`` positions, in every
    decoder layer."""
    heads = decoder_heads(config, cross=True)
    layers = tuple(
        CrossLayerGeometry(i, FULL, f"{CROSS_HALF} layer {i}", heads.kv_heads, heads.head_dim, heads.head_dim,
                           encoder_length=encoder_length)
        for i in range(heads.layers)
    )
    return CacheGeometry(layers, heads.kv_heads), f"{CROSS_HALF}: {heads.evidence}, S = encoder length {encoder_length}"
