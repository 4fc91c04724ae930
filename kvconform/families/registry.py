"""Which installed model types each family sweep covers, and what is left out with its reason."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from kvconform.families import AUDIO_LANGUAGE, CAUSAL_LM, SEQ2SEQ, SPEECH_SEQ2SEQ, TEXT_TO_AUDIO, VISION_LANGUAGE
from kvconform.strict_yaml import load_yaml
from kvconform.transformers_memo import auto_mapping, remembered


@lru_cache(maxsize=1)
def family_table() -> dict[str, Any]:
    """The parsed ``families.yaml`` (shrink overrides and measured exclusions per family)."""
    text = resources.files("kvconform.families").joinpath("families.yaml").read_text()
    return load_yaml(text) or {}


def family_overrides(model_type: str) -> dict[str, Any]:
    return copy.deepcopy((family_table().get("overrides") or {}).get(model_type, {}))


def generation_overrides(model_type: str) -> dict[str, Any]:
    """Generation-config fields a type's checkpoints publish beside their config (``generation_config`` in families.yaml)."""
    return copy.deepcopy((family_table().get("generation_config") or {}).get(model_type, {}))


def image_processor_overrides(model_type: str) -> dict[str, Any]:
    """Constructor arguments of a type's image processor beyond the scaling to the shrunk tower (families.yaml)."""
    return copy.deepcopy((family_table().get("image_processor") or {}).get(model_type, {}))


@dataclass(frozen=True)
class PublishedAs:
    """Where a type's published checkpoints put it: the ``sub_config`` of a ``model_type`` config (families.yaml)."""

    model_type: str
    sub_config: str
    source: str


def published_as(model_type: str) -> PublishedAs | None:
    """The composite config ``model_type``'s checkpoints are published in (``published_as`` in families.yaml), if any."""
    entry = _type_entry("published_as", model_type)
    return PublishedAs(**entry) if entry else None


@dataclass(frozen=True)
class PublishedIn:
    """The class a type's published checkpoints hold the model in, and the attribute the model is (families.yaml)."""

    class_name: str
    attribute: str
    source: str


def published_in(model_type: str) -> PublishedIn | None:
    """The class ``model_type``'s checkpoints are published as (``published_in`` in families.yaml), if not the model's."""
    entry = _type_entry("published_in", model_type)
    return PublishedIn(**entry) if entry else None


def _type_entry(section: str, model_type: str) -> dict[str, Any] | None:
    """``model_type``'s entry in a per-type section of families.yaml, if any."""
    return (family_table().get(section) or {}).get(model_type)


def prefix_lm_types() -> frozenset[str]:
    """Vision-language types whose prompt is a bidirectional prefix marked by ``token_type_ids`` (families.yaml)."""
    return frozenset(family_table().get("prefix_lm") or {})


def image_placeholders(model_type: str) -> dict[str, Any]:
    """The ids a type's processor writes for one image where its config names none (``image_placeholders``), else {}."""
    return dict((family_table().get("image_placeholders") or {}).get(model_type) or {})


def image_layout(model_type: str) -> dict[str, Any]:
    """The ids a type's processor writes around an image that its config does not name (``image_layout``), else {}."""
    return dict((family_table().get("image_layout") or {}).get(model_type) or {})


def decoder_prompt(model_type: str) -> dict[str, str]:
    """How the type's own generate() rewrites a vision-language prompt (``families.yaml``'s ``decoder_prompt``), else {}."""
    return dict((family_table().get("decoder_prompt") or {}).get(model_type) or {})


def audio_window_field(model_type: str) -> str:
    """The audio tower's field that holds its positions per Whisper-style window (``audio_window`` in families.yaml),
    else ``max_source_positions``."""
    return str((family_table().get("audio_window") or {}).get(model_type) or "max_source_positions")


def forward_defaults(model_type: str) -> dict[str, Any]:
    """Forward keywords every call of a type's cells carries (``forward_defaults`` in families.yaml), else {}."""
    return dict((family_table().get("forward_defaults") or {}).get(model_type) or {})


def _mapping(family: str) -> Mapping[str, str]:
    if family == AUDIO_LANGUAGE:
        return audio_language_names()
    if family == TEXT_TO_AUDIO:
        return text_to_audio_names()
    return _names({
        CAUSAL_LM: "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
        VISION_LANGUAGE: "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
        SEQ2SEQ: "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        SPEECH_SEQ2SEQ: "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    }[family])


@cache
def _names(mapping: str) -> dict[str, str]:
    """One of ``modeling_auto``'s ``*_MAPPING_NAMES`` (model type -> class name), from the memo."""
    return auto_mapping("modeling_auto", mapping)


@cache
def audio_language_names() -> dict[str, str]:
    """Decoder-only audio-language models (model type -> class) of the seq2seq and speech-seq2seq mappings.

    transformers 5.24 has no audio-text-to-text auto mapping: models that decode text with a causal LM over
    audio features (Qwen2-Audio, Voxtral, Granite Speech, ...) are listed under the encoder-decoder auto classes
    although their config is not an encoder-decoder's.
    """
    names = {**_names("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"), **_names("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES")}
    return {t: c for t, c in sorted(names.items()) if _is_encoder_decoder(t) is False}


@cache
def text_to_audio_names() -> dict[str, str]:
    """The text-to-audio types (model type -> class): the text-to-waveform and text-to-spectrogram mappings (the
    ``text-to-audio`` pipeline's), plus the types ``families.yaml`` names from other mappings (``also_text_to_audio``:
    Dia, a text-to-speech model transformers 5.24 lists under the speech-seq2seq auto class)."""
    names = {**_names("MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES"), **_names("MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES")}
    speech = _names("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES")
    names.update({t: speech[t] for t in family_table().get("also_text_to_audio") or {} if t in speech})
    return dict(sorted(names.items()))


def family_model_types(family: str) -> list[str]:
    """Sorted model types the installed transformers maps for ``family`` (the auto class of the family); the
    seq2seq sweep also runs the image-text-to-text encoder-decoders (``image_encoder_decoder_types``)."""
    extra = image_encoder_decoder_types() if family == SEQ2SEQ else frozenset()
    return sorted(set(_mapping(family)) | extra)


@cache
def image_encoder_decoder_types() -> frozenset[str]:
    """Image-text-to-text types whose config is an encoder-decoder's (Florence-2, Pix2Struct, ...) and that no text
    mapping lists: the image goes to the encoder, text is decoded with a cross-attention cache, as in seq2seq."""
    others = set(_mapping(CAUSAL_LM)) | set(_mapping(SEQ2SEQ))
    return frozenset(t for t in _mapping(VISION_LANGUAGE) if t not in others and _is_encoder_decoder(t))


@cache
def _is_encoder_decoder(model_type: str) -> bool | None:
    """Whether the type's default config is an encoder-decoder; built quietly (a default config's warnings, e.g.
    cohere_compass's "no RoPE parameters", are not the run's)."""
    # configuration_auto defines it before 5.6 and re-exports it from auto_mappings from 5.6 on.
    config_names = auto_mapping("configuration_auto", "CONFIG_MAPPING_NAMES")
    return remembered("is-encoder-decoder", config_names.get(model_type, model_type),
                      lambda: _default_config_is_encoder_decoder(model_type))


def _default_config_is_encoder_decoder(model_type: str) -> bool | None:
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        from kvconform.build.synthetic import default_config

        return bool(getattr(default_config(model_type, {}), "is_encoder_decoder", False))
    except Exception:  # noqa: BLE001 - a default config that does not build is reported by the cell itself
        return None
    finally:
        logging.set_verbosity(verbosity)


def _structural_reason(family: str, model_type: str) -> str | None:
    """Why ``model_type`` belongs to another sweep, from the mappings and its default config (not measured runs)."""
    causal, seq2seq = set(_mapping(CAUSAL_LM)), set(_mapping(SEQ2SEQ))
    if family == VISION_LANGUAGE:
        if model_type in causal:
            return "also a causal-LM type: the causal-lm sweep runs it (text prompt)"
        if model_type in seq2seq:
            return "an encoder-decoder: the seq2seq sweep runs it"
        if model_type in image_encoder_decoder_types():
            there = ((family_table().get("excluded") or {}).get(SEQ2SEQ) or {}).get(model_type)
            if there:
                return f"an encoder-decoder over the image, left out of the seq2seq sweep: {there}"
            return ("an encoder-decoder over the image (config.is_encoder_decoder is True): the seq2seq sweep runs it, "
                    "the image its encoder input and the cross-attention cache checked")
        return None
    if family in (AUDIO_LANGUAGE, TEXT_TO_AUDIO):
        return None
    if family == SPEECH_SEQ2SEQ and model_type in (family_table().get("also_text_to_audio") or {}):
        return "text-to-speech: the text-to-audio sweep runs it (codebook-channel decoder ids)"
    if _is_encoder_decoder(model_type) is False:
        return ("decoder-only (config.is_encoder_decoder is False): an audio-language model with no cross-attention "
                "cache; the audio-text-to-text sweep runs it")
    if family == SPEECH_SEQ2SEQ and model_type in seq2seq:
        return "also in the seq2seq mapping: the seq2seq sweep runs it"
    return None


def sweep_types(family: str) -> tuple[list[str], dict[str, str]]:
    """(model types the sweep runs, left-out type -> reason) for a family sweep of the installed transformers."""
    measured = dict((family_table().get("excluded") or {}).get(family) or {})
    run, left_out = [], {}
    for model_type in family_model_types(family):
        reason = _structural_reason(family, model_type) or measured.get(model_type)
        if reason:
            left_out[model_type] = reason
        else:
            run.append(model_type)
    return run, left_out


def family_of_config(config: Mapping[str, Any]) -> str:
    """The family a checkpoint's ``config.json`` belongs to (for ``--model``)."""
    model_type = str(config.get("model_type", ""))
    if model_type in sweep_types(TEXT_TO_AUDIO)[0]:
        return TEXT_TO_AUDIO
    if config.get("is_encoder_decoder"):
        return SPEECH_SEQ2SEQ if model_type in _mapping(SPEECH_SEQ2SEQ) and model_type not in _mapping(SEQ2SEQ) else SEQ2SEQ
    if model_type in _mapping(VISION_LANGUAGE) and model_type not in _mapping(CAUSAL_LM):
        return VISION_LANGUAGE
    if model_type in audio_language_names():
        return AUDIO_LANGUAGE
    return CAUSAL_LM
