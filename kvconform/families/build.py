"""Tiny random-weight models of the family types: the causal sweep's shrink, plus vision and audio towers.

The generic shrink of ``kvconform.build.synthetic`` (hidden 64, 2 layers, 4 heads, 2 KV heads, vocab 256 …)
applies to every sub-config; towers also get small images and patches so a prompt holds a handful of
image tokens, and T5-style ``d_kv`` and multimodal rotary sections follow the shrunk head size.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Mapping
from functools import cache
from typing import Any

import torch
from transformers import AutoConfig, PreTrainedConfig, PreTrainedModel

from kvconform.build.synthetic import (
    SIZES,
    ZERO_INIT_STD,
    break_zero_init,
    default_config,
    merge_overrides,
    shrink_values,
    uninitialized_as_zeros,
)
from kvconform.families import AUDIO_LANGUAGE, CAUSAL_LM, SEQ2SEQ, SPEECH_SEQ2SEQ, TEXT_TO_AUDIO, VISION_LANGUAGE
from kvconform.families.registry import (
    audio_language_names,
    family_model_types,
    family_overrides,
    forward_defaults,
    generation_overrides,
    image_encoder_decoder_types,
    published_as,
    text_to_audio_names,
)
from kvconform.transformers_memo import auto_mapping

#: Tower sizes, applied to every (sub-)config field of that name whose default is a positive int.
TOWER_SIZES = {
    "image_size": 32,  # with patch 8: a 4 × 4 grid of patches
    "patch_size": 8,
    "depth": 2,  # Qwen-VL-style vision blocks
    "embed_dim": 64,
    "d_kv": 16,  # T5-style per-head width (d_model 64 / 4 heads)
    "vision_layers": 2,
    # Tower output widths that must equal the text model's hidden size.
    "out_hidden_size": SIZES["hidden_size"],
    "text_hidden_size": SIZES["hidden_size"],
    "projection_dim": SIZES["hidden_size"],
    # Gemma-3-style pooling of the patch grid to this many tokens: 4 × 4 patches pooled to 2 × 2.
    "mm_tokens_per_image": 4,
}
#: An encoder-decoder's encoder shrunk unlike its decoder (3 layers and 2 heads against 2 and 4), where the config
#: sizes them apart: a cache geometry read from the encoder's fields, or cross-attention K/V shaped by the encoder's
#: heads, then differs from the decoder's own. T5-style configs name the encoder's layer count ``num_layers``.
ENCODER_SIZES = {"encoder_layers": 3, "num_encoder_layers": 3, "encoder_attention_heads": 2, "num_encoder_attention_heads": 2}
T5_ENCODER_LAYERS = ("num_layers", "num_decoder_layers")
#: The same for an encoder given as a sub-config of its own (T5Gemma's ``encoder``, T5Gemma 2's ``encoder.text_config``,
#: beside a ``decoder`` sub-config; Canary's and Dia's ``encoder_config`` beside ``decoder_config``; the composite
#: encoder-decoders' ``encoder`` and ``decoder``, a BERT, ViT or Wav2Vec2 encoder): 3 layers, 2 heads and (where both
#: stacks have the field) 1 KV head against the decoder's 2, 4 and 2 (2 heads divide hidden 64, 1 KV head divides 2
#: heads; cross-attention reads the encoder's hidden size). Only where both stacks set the layer and head counts;
#: per-layer lists (``layer_types``) repeat their pattern to the new depth.
NESTED_ENCODER_SIZES = {"num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1}
#: The (encoder, decoder) sub-config fields of the configs that nest both stacks.
NESTED_HALVES = (("encoder", "decoder"), ("encoder_config", "decoder_config"))


def _unequal_nested_halves(values: dict[str, Any]) -> None:
    """``NESTED_ENCODER_SIZES`` in place on the encoder sub-config of a config with encoder and decoder ones."""
    for encoder_key, decoder_key in NESTED_HALVES:
        encoder, decoder = values.get(encoder_key), values.get(decoder_key)
        if isinstance(encoder, dict) and isinstance(decoder, dict):
            _shrink_nested_encoder(encoder, decoder)


def _shrink_nested_encoder(encoder: dict[str, Any], decoder: dict[str, Any]) -> None:
    nested = encoder.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else encoder
    sizes = {key: size for key, size in NESTED_ENCODER_SIZES.items() if _is_positive(text.get(key)) and _is_positive(decoder.get(key))}
    if not {"num_hidden_layers", "num_attention_heads"} <= set(sizes):
        return
    depth = int(text["num_hidden_layers"])
    for key, value in list(text.items()):
        if isinstance(value, list) and len(value) == depth > 0:
            text[key] = [value[i % depth] for i in range(sizes["num_hidden_layers"])]
    text.update(sizes)


def _unequal_halves(values: dict[str, Any]) -> None:
    """``ENCODER_SIZES`` in place on a top-level encoder-decoder config, for fields that have a decoder counterpart,
    and ``NESTED_ENCODER_SIZES`` on an encoder sub-config."""
    _unequal_nested_halves(values)
    for key, size in ENCODER_SIZES.items():
        decoder = key.replace("encoder", "decoder")
        if _is_positive(values.get(key)) and _is_positive(values.get(decoder)):
            values[key] = size
    layers, decoder_layers = T5_ENCODER_LAYERS
    if _is_positive(values.get(layers)) and _is_positive(values.get(decoder_layers)):
        values[layers] = ENCODER_SIZES["encoder_layers"]
    if _is_positive(values.get("num_hidden_layers")) and values.get("encoder_layers") == ENCODER_SIZES["encoder_layers"]:
        # A field of its own up to 5.3 (an alias of encoder_layers later), equal to encoder_layers in published configs:
        # LED sizes its encoder's attention_window list by it (configuration_led.py:150 in 5.0.0).
        values["num_hidden_layers"] = ENCODER_SIZES["encoder_layers"]


#: Multimodal rotary sections the modeling code uses when the config gives none (Qwen2-VL: 16, 24, 24 of 64).
DEFAULT_MROPE_SECTION = (16, 24, 24)
HEAD_DIM = SIZES["head_dim"]


def _shrink_towers(values: dict[str, Any]) -> None:
    """``TOWER_SIZES`` in place, at every level of nested sub-configs.

    Windowed vision attention (Qwen2.5-VL) gets windows of 2 × 2 merged patches, so the 4 × 4 grid holds
    several windows, and one of its two blocks attends globally.
    """
    if "spatial_merge_size" in values and _is_positive(values.get("window_size")):
        values["window_size"] = TOWER_SIZES["patch_size"] * int(values["spatial_merge_size"]) * 2
    if isinstance(values.get("fullatt_block_indexes"), list):
        values["fullatt_block_indexes"] = [TOWER_SIZES["depth"] - 1]
    if isinstance(values.get("deepstack_visual_indexes"), list) and values["deepstack_visual_indexes"]:
        # Published checkpoints take deepstack features from blocks of their tower (Qwen3-VL: [8, 16, 24] of 27 blocks,
        # Granite-Docling [3, 7, 10]); left at those, the 2-block shrunk tower (depth / num_hidden_layers 2) yields none,
        # a layout no checkpoint has (generate()'s beam expansion indexes the first feature: generation/utils.py
        # _expand_multimodal_outputs). One per block of the shrunk tower:
        values["deepstack_visual_indexes"] = list(range(int(TOWER_SIZES["depth"])))
    for key, value in list(values.items()):
        if isinstance(value, dict):
            _shrink_towers(value)
        elif key in TOWER_SIZES and _is_positive(value):
            values[key] = TOWER_SIZES[key]
        elif key in TOWER_SIZES and isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
            values[key] = [TOWER_SIZES[key]] * 2


def _is_positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _scaled_section(section: list[int], total: int) -> list[int]:
    """``section`` rescaled to sum to ``total`` (each part at least 1)."""
    scaled = [max(1, round(part * total / sum(section))) for part in section]
    scaled[-1] += total - sum(scaled)
    return scaled


def _fit_mrope(values: dict[str, Any]) -> None:
    """Multimodal rotary sections resized to the shrunk rotary half-width, in every flat ``rope_parameters``.

    Qwen-VL-style models split the rotary half-width into (temporal, height, width) sections that must sum
    to it, and fall back to sections sized for head_dim 128 when the config names none; models without
    multimodal rotary positions ignore the field.
    """
    for sub in [values, *(v for v in values.values() if isinstance(v, dict))]:
        rope = sub.get("rope_parameters")
        if not isinstance(rope, dict) or not {"rope_type", "rope_theta"} & set(rope) or "vision_config" in sub:
            continue
        head_dim = sub.get("head_dim") or HEAD_DIM
        rotary = int(head_dim * float(rope.get("partial_rotary_factor") or sub.get("partial_rotary_factor") or 1.0))
        rope["mrope_section"] = _scaled_section(list(rope.get("mrope_section") or DEFAULT_MROPE_SECTION), rotary // 2)


def _scale_grid(merged: dict[str, Any]) -> None:
    """Anyres grids (``image_grid_pinpoints``) scaled with the tower: each side whole tiles of the shrunk tower's image.

    A checkpoint's grid is whole tiles of its tower's image_size (llava-hf/llava-v1.6-mistral-7b-hf: 336,
    ibm-granite/granite-vision-4.1-4b: 384), and the model reads the tile count as side // image_size
    (``get_anyres_image_grid_shape``). The tile is the grid's own (the gcd of its sides): a default config may pair it with
    a tower of another size (Granite4Vision: a 336-pixel grid and CLIP's default 224, so 336 scaled by 32 / 224 would be
    1.5 tiles).
    """
    tower = (merged.get("vision_config") or {}).get("image_size")
    grid = merged.get("image_grid_pinpoints")
    if not isinstance(tower, int) or not isinstance(grid, list) or not grid:
        return
    tile = math.gcd(*(int(side) for pair in grid for side in pair))
    if tile and tile != tower:
        merged["image_grid_pinpoints"] = [[max(tower, round(side * tower / tile)) for side in pair] for pair in grid]


#: First id of the VQ image codes in a Chameleon-style vocabulary map (codes fill ids from here on).
FIRST_CODE_ID = 128


def _code_names(values: dict[str, Any]) -> None:
    """A ``vocabulary_map`` given only its ``<image>`` entry gets one name per VQ code, as Chameleon's tokenizer names
    them (``IMGIMG`` + the code's digits as letters A-J + ``Z``, read back by modeling_chameleon.py:733-738)."""
    mapping, vq = values.get("vocabulary_map"), values.get("vq_config")
    if not isinstance(mapping, dict) or not isinstance(vq, dict) or any(k.startswith("IMGIMG") for k in mapping):
        return
    letters = {str(d): chr(ord("A") + d) for d in range(10)}
    for code in range(int(vq["num_embeddings"])):
        mapping["IMGIMG" + "".join(letters[c] for c in str(code)) + "Z"] = FIRST_CODE_ID + code


def _shrunk_values(model_type: str, family: str) -> dict[str, Any]:
    """The fields of ``model_type``'s default config that the family shrink and ``families.yaml``'s overrides change."""
    fixes = family_overrides(model_type)
    default = default_config(model_type, fixes)
    full = default.to_dict()
    merged = copy.deepcopy({**full, **shrink_values(full)})  # shrink_values returns sub-configs whole
    _shrink_towers(merged)
    if family == VISION_LANGUAGE:
        _fit_mrope(merged)
        _scale_grid(merged)
    if family in (SEQ2SEQ, SPEECH_SEQ2SEQ):
        _unequal_halves(merged)
    else:  # an encoder and a decoder nested in another family's config (Dia's text encoder, T5Gemma 2's image-text one)
        _unequal_nested_halves(merged)
    # Only what changed goes back in (sub-configs whole), as the causal shrink does.
    values = {key: value for key, value in merged.items() if value != full.get(key)}
    merge_overrides(values, fixes)
    _code_names({**full, **values})
    return values


def shrink_family_config(model_type: str, family: str, overrides: Mapping[str, Any] | None = None) -> PreTrainedConfig:
    """The default config of ``model_type`` shrunk for ``family``, then ``families.yaml``'s and the caller's overrides.

    A type ``families.yaml`` lists under ``published_as`` is built as its checkpoints are published: the shrunk config
    as the named sub-config of the other type's shrunk config (Mistral-Small-4: a ``mistral4`` text_config inside
    ``mistral3``); the caller's overrides address that outer config.
    """
    known = family_model_types(family)
    if model_type not in known:
        raise ValueError(f"{model_type!r} is not a {family} model type of the installed transformers")
    values = _shrunk_values(model_type, family)
    outer = published_as(model_type)
    if outer is not None:
        inner = AutoConfig.for_model(model_type, **values)
        values = _shrunk_values(outer.model_type, family)
        values[outer.sub_config] = inner.to_dict()
        model_type = outer.model_type
    merge_overrides(values, overrides or {})
    return AutoConfig.for_model(model_type, **values)


@cache
def _auto_class_over(name: str, family: str) -> Any:
    """An auto class over a family's mapping (transformers 5.24 has none for audio-text-to-text, and spreads
    text-to-audio over the text-to-waveform, text-to-spectrogram and speech-seq2seq ones)."""
    from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping

    names = audio_language_names() if family == AUDIO_LANGUAGE else text_to_audio_names()
    config_names = OrderedDict(auto_mapping("configuration_auto", "CONFIG_MAPPING_NAMES"))  # every 5.x release
    return type(name, (_BaseAutoModelClass,), {"_model_mapping": _LazyAutoMapping(config_names, OrderedDict(names))})


def auto_class(family: str, model_type: str | None = None) -> Any:
    """The auto class users load a checkpoint of ``family`` (and ``model_type``) with."""
    import transformers

    if family == AUDIO_LANGUAGE:
        return _auto_class_over("AutoModelForAudioTextToText", family)
    if family == TEXT_TO_AUDIO:
        return _auto_class_over("AutoModelForTextToAudio", family)
    if family == SEQ2SEQ and model_type in image_encoder_decoder_types():
        return transformers.AutoModelForImageTextToText
    return {
        CAUSAL_LM: transformers.AutoModelForCausalLM,
        VISION_LANGUAGE: transformers.AutoModelForImageTextToText,
        SEQ2SEQ: transformers.AutoModelForSeq2SeqLM,
        SPEECH_SEQ2SEQ: transformers.AutoModelForSpeechSeq2Seq,
    }[family]


def build_family(config: PreTrainedConfig, family: str, seed: int) -> PreTrainedModel:
    """A float32 eval-mode model of ``family`` with random weights drawn from ``seed`` (no all-zero weights)."""
    torch.manual_seed(seed)
    with uninitialized_as_zeros():
        model = auto_class(family, config.model_type).from_config(config, dtype=torch.float32)
    break_zero_init(model, seed)
    overrides = generation_overrides(config.model_type)
    for key, value in overrides.items():  # as a checkpoint's generation_config.json sets them
        setattr(model.generation_config, key, value)
    if overrides:  # a published generation_config.json is not one derived from the model config: its fields load back
        model.generation_config._from_model_config = False  # (GenerationConfig.__init__ drops them otherwise, :500-506)
    _seed_codebooks(model, seed)
    keep_forward_defaults(model)
    return model.float().eval()


def _seed_codebooks(model: PreTrainedModel, seed: int) -> None:
    """Seeded noise for a codec's all-zero vector-quantizer codebooks.

    Mimi keeps its codebooks as buffers (``MimiEuclideanCodebook.embed_sum``, learned in trained checkpoints such as
    kyutai/mimi), zeros in a random build (modeling_mimi.py:1140): every distance ties, so every frame of any waveform
    encodes to code 0 in every codebook and a cell streaming codes beside its text (Kyutai speech-to-text) would feed the
    same frame at every position. Noise of the scale ``break_zero_init`` gives zero weights.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            codebook = getattr(module, "embed_sum", None)
            if isinstance(codebook, torch.Tensor) and codebook.is_floating_point() and not codebook.any():
                codebook.copy_(torch.randn(codebook.shape, generator=generator) * ZERO_INIT_STD)
                if hasattr(module, "_embed"):
                    module._embed = None  # its cached embed = embed_sum / cluster_usage


def keep_forward_defaults(model: PreTrainedModel) -> None:
    """Give every forward of ``model`` its type's ``forward_defaults`` (a pre-hook; a keyword the caller passes wins)."""
    defaults = forward_defaults(model.config.model_type)
    if not defaults or getattr(model, "_kvconform_forward_defaults", False):
        return

    def before(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return args, {**defaults, **kwargs}

    model.register_forward_pre_hook(before, with_kwargs=True)
    model._kvconform_forward_defaults = True
