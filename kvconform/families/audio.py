"""Audio inputs as the model's own feature extractor makes them, on a seeded-noise waveform sized to the tower.

The feature extractor class is the one transformers maps for the model type, constructed with its defaults
(no download) except the feature width, which follows the shrunk tower (its mel bins). The waveform lasts as
long as the tower's positions ask for (Whisper-style towers: exactly ``2 * max_source_positions`` frames), else
``AUDIO_SECONDS``; there are as many audio placeholders in the prompt as the tower makes features of it.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from kvconform.build.models import Model
from kvconform.families.inputs import MediaInputs, count_features, encoder_config
from kvconform.families.registry import audio_window_field
from kvconform.transformers_memo import auto_mapping

#: Length of the synthetic waveform when the tower does not fix it.
AUDIO_SECONDS = 0.4
#: Names the tower's feature width goes by, in its sub-config.
WIDTH_FIELDS = ("num_mel_bins", "input_dim", "feature_size", "n_mels")
#: Names a model's forward gives the feature extractor's ``attention_mask`` (the text mask has that name).
MASK_NAMES = ("feature_attention_mask", "input_features_mask", "audio_attention_mask", "input_values_mask")


def feature_extractor_class(model_type: str) -> type:
    """The feature extractor class transformers maps for ``model_type`` (its import error if a library is missing)."""
    from transformers.models.auto.feature_extraction_auto import feature_extractor_class_from_name

    # feature_extraction_auto defines it on every 5.x release (from 5.6 on re-exported from auto_mappings).
    name = auto_mapping("feature_extraction_auto", "FEATURE_EXTRACTOR_MAPPING_NAMES").get(model_type)
    if name is None:
        raise ValueError(f"transformers maps no feature extractor for {model_type!r}")
    cls = feature_extractor_class_from_name(name)
    if cls is None:
        raise ValueError(f"feature extractor {name} of {model_type!r} cannot be imported")
    return cls


def audio_token_id(config: Any) -> int:
    for name in ("audio_token_id", "audio_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    raise ValueError(f"{type(config).__name__} names no audio_token_id / audio_token_index")


def _nested_int(values: dict[str, Any], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` set to an int in ``values``, else in its sub-configs (breadth first)."""
    queue = [values]
    while queue:
        current = queue.pop(0)
        found = next((current[n] for n in names if isinstance(current.get(n), int) and not isinstance(current[n], bool)), None)
        if found is not None:
            return int(found)
        queue += [v for v in current.values() if isinstance(v, dict)]
    return None


def _sizing(cls: type, config: Any) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(constructor overrides, window attributes, how the waveform was sized) for the shrunk tower of ``config``.

    A Whisper-style extractor pads every waveform to its window of ``chunk_length * sampling_rate`` samples
    (``n_samples``, ``nb_max_frames`` computed once in its ``__init__``); the window is set to the tower's length.
    """
    tower = encoder_config(config)
    defaults = cls().to_dict()
    kwargs: dict[str, Any] = {}
    width = _nested_int(tower.to_dict(), WIDTH_FIELDS)
    if width is not None and int(defaults.get("feature_size") or 1) > 1:  # mel features: as many bins as the tower reads
        kwargs["feature_size"] = int(width)
    rate = int(defaults["sampling_rate"])
    field = audio_window_field(config.model_type)
    source = getattr(tower, field, None)
    if isinstance(source, int) and "n_samples" in defaults:  # Whisper-style: a window of exactly the tower's frames
        samples = 2 * source * int(defaults["hop_length"])
        window = {"chunk_length": samples / rate, "n_samples": samples, "nb_max_frames": samples // int(defaults["hop_length"])}
        return kwargs, window, f"{samples} samples at {rate} Hz (its window: 2 x {field} {source} frames)"
    return kwargs, {}, f"{round(AUDIO_SECONDS * rate)} samples at {rate} Hz"


def synthetic_waveforms(batch: int, samples: int, seed: int) -> list[np.ndarray]:
    """``batch`` seeded-noise mono waveforms in [-0.5, 0.5) (float32)."""
    rng = np.random.default_rng(seed + 5)
    return [(rng.random(samples, dtype=np.float32) - 0.5) for _ in range(batch)]


def _processor_frame_multiple(model_type: str) -> int:
    """The frame multiple the model's processor pads the features to (its ``subsampling_factor`` default), else 1.

    Nemotron 3.5 Transcribe's processor pads the spectrogram to whole audio tokens after its feature extractor
    (``processing_nemotron3_5_transcribe.py:314``); the model rejects other lengths.
    """
    from transformers.models.auto.processing_auto import processor_class_from_name

    name = auto_mapping("processing_auto", "PROCESSOR_MAPPING_NAMES").get(model_type)
    cls = processor_class_from_name(name) if name else None
    factor = inspect.signature(cls.__init__).parameters.get("subsampling_factor") if cls is not None else None
    return int(factor.default) if factor is not None and isinstance(factor.default, int) else 1


def _pad_frames(out: Any, multiple: int) -> None:
    """Features ``[B, frames, width]`` and their mask padded on the right to a multiple of ``multiple`` frames."""
    padding = -out["input_features"].shape[1] % multiple
    if padding:
        out["input_features"] = torch.nn.functional.pad(out["input_features"], (0, 0, 0, padding))
        out["attention_mask"] = torch.nn.functional.pad(out["attention_mask"], (0, padding))


def _accepted(model: Model) -> set[str]:
    names = set(inspect.signature(model.forward).parameters)
    for owner in (model, getattr(model, "model", None)):
        getter = getattr(owner, "get_audio_features", None)
        names |= set(inspect.signature(getter).parameters) if getter is not None else set()
    return names


def _count_audio_features(model: Model, tensors: dict[str, torch.Tensor]) -> int:
    """The features the tower makes (one audio token each): its ``get_audio_features``, else the output lengths its
    forward computes from the feature mask (Qwen2-Audio: ``audio_tower._get_feat_extract_output_lengths``, which its
    processor also uses to expand the audio token)."""
    if any(hasattr(owner, "get_audio_features") for owner in (model, getattr(model, "model", None))):
        return count_features(model, tensors, "get_audio_features")
    tower = getattr(model, "audio_tower", None) or getattr(getattr(model, "model", None), "audio_tower", None)
    mask = next((tensors[name] for name in MASK_NAMES if name in tensors), None)
    if tower is None or mask is None or not hasattr(tower, "_get_feat_extract_output_lengths"):
        raise ValueError(f"{type(model).__name__} has no get_audio_features and no audio tower output lengths to count")
    lengths = tower._get_feat_extract_output_lengths(mask.sum(-1))
    return int((lengths[-1] if isinstance(lengths, tuple) else lengths).sum())


def audio_inputs(model: Model, batch: int, seed: int) -> MediaInputs:
    """One synthetic waveform per row as the model's feature extractor makes it, and its number of audio tokens."""
    config = model.config
    cls = feature_extractor_class(config.model_type)
    kwargs, window, sized = _sizing(cls, config)
    extractor = cls(**kwargs)
    for name, value in window.items():
        setattr(extractor, name, value)
    samples = int(window.get("n_samples") or round(AUDIO_SECONDS * extractor.sampling_rate))
    waves = synthetic_waveforms(batch, samples, seed)
    out = extractor(waves, sampling_rate=extractor.sampling_rate, return_tensors="pt", return_attention_mask=True)
    multiple = _processor_frame_multiple(config.model_type)
    if multiple > 1:
        _pad_frames(out, multiple)
        sized += f", features padded to a multiple of {multiple} frames as its processor does"
    accepted = _accepted(model)
    mask = out.pop("attention_mask", None)
    rename = next((name for name in MASK_NAMES if name in accepted), None)
    if mask is not None and rename is not None and rename not in out:
        out[rename] = mask
    tensors = {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k in accepted}
    if not tensors:
        raise ValueError(f"{cls.__name__} makes {sorted(out)}, none of which {type(model).__name__}.forward takes")
    device, dtype = next(p.device for p in model.parameters()), next(model.parameters()).dtype
    tensors = {k: (v.to(dtype) if v.is_floating_point() else v).to(device) for k, v in tensors.items()}
    count = _count_audio_features(model, tensors)
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in tensors.items())
    built = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    recipe = f"{cls.__name__}({built}) on seeded noise of {sized}: {shapes}"
    return MediaInputs(tensors, audio_token_id(config), count // batch, recipe)
