"""Streaming speech-to-text (Kyutai): every text position carries one frame of codec codes beside its text id.

Not a prompt with audio placeholders: the forward takes ``input_ids [B, S, 1 + K]``, column 0 the text id and columns
1..K the K codebooks of one frame of the Mimi codec's codes, and sums their embeddings (``KyutaiSpeechToTextEmbeddings``).
The cell drives it as its ``generate()`` does:

- the audio: one seeded-noise waveform per row through the model's own feature extractor (its class with defaults:
  ``input_values`` and ``padding_mask``), encoded by the model's codec with the streaming caches ``generate()`` builds
  for it (``_prepare_model_inputs``, modeling_kyutai_speech_to_text.py:722-800) in one window of the whole audio
  (``audio_window_size`` unset: the encoded length, :736-739; the encode at :826-835);
- every forward: position ``p`` carries frame ``p - 1`` and position 0 ``audio_bos_token_id`` in every codebook
  (``prepare_inputs_for_generation``, :845-858), its position counted from the cache (``get_seq_length``, :822-824);
- the text: ``bos_token_id`` first (what ``generate()`` starts from without ``input_ids``), then seeded text ids;
- the reference: ONE uncached pass over the whole ``[B, S, 1 + K]`` sequence.

The cache is the text model's own (a causal LM's: one position per text position), so the core checks read it from the
config; the cache paths feed ids through the same forwards, which attach each position's frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvconform.build.geometry import cache_geometry
from kvconform.build.models import Model
from kvconform.compat import cache_keyword, codec_cache_keyword
from kvconform.families.audio import feature_extractor_class, synthetic_waveforms
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.inputs import special_token_ids, text_ids
from kvconform.probe.cache_io import keep_logits, new_cache, seq_length
from kvconform.probe.decode import ProbePlan
from kvconform.probe.forwards import Forwards, fed_back
from kvconform.probe.generate_inputs import GenerateInputs

#: Frames of audio beyond the decode's last position: the cache paths feed no more positions than the decode.
SPARE_FRAMES = 1


def is_streaming_codes_model(model: Model) -> bool:
    """Whether ``model`` streams codec frames beside its text ids (Kyutai speech-to-text)."""
    config = model.config
    return hasattr(model, "codec_model") and isinstance(getattr(config, "num_codebooks", None), int) \
        and isinstance(getattr(config, "audio_bos_token_id", None), int) and hasattr(config, "frame_size")


@dataclass
class StreamedAudio:
    """A waveform as the feature extractor makes it, and the codec frames ``generate()`` encodes of it."""

    features: dict[str, torch.Tensor]
    """What the feature extractor returns (``input_values [B, 1, samples]``, ``padding_mask``): generate()'s arguments."""
    frames: torch.Tensor
    """``[B, N, K]``: frame ``n`` of every codebook."""
    recipe: str


def _encode(model: Model, input_values: torch.Tensor, bos: torch.Tensor) -> torch.Tensor:
    """The codec frames ``[B, N, K]`` of ``input_values``, through the streaming caches ``generate()`` builds for the codec
    (modeling_kyutai_speech_to_text.py:722-800) and its encode of the first window (:826-835)."""
    kwargs: dict[str, Any] = {"input_values": input_values, "audio_window_size": None}
    _, _, kwargs = model._prepare_model_inputs(inputs=None, bos_token_id=bos, model_kwargs=kwargs)
    window = int(kwargs["audio_window_size"])
    frame = int(model.config.frame_size)
    keyword = codec_cache_keyword(model.codec_model.encode)
    with torch.no_grad():
        output = model.codec_model.encode(input_values[..., :window * frame], padding_cache=kwargs["padding_cache"],
                                          **{keyword: kwargs.get(keyword)})
    return output.audio_codes.transpose(1, 2)


def streamed_audio(model: Model, batch: int, frames: int, seed: int) -> StreamedAudio:
    """``frames`` frames of seeded noise per row, through the model's feature extractor (its class with defaults) and codec."""
    config = model.config
    cls = feature_extractor_class(config.model_type)
    extractor = cls()
    samples = frames * int(config.frame_size)
    waves = synthetic_waveforms(batch, samples, seed)
    out = extractor(waves, sampling_rate=extractor.sampling_rate, return_tensors="pt")
    device = next(p.device for p in model.parameters())
    features = {k: v.to(device) for k, v in out.items() if isinstance(v, torch.Tensor)}
    bos = torch.tensor(int(config.bos_token_id), device=device)
    codes = _encode(model, features["input_values"], bos)
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in features.items())
    recipe = (f"{cls.__name__}() on seeded noise of {samples} samples at {extractor.sampling_rate} Hz: {shapes}; "
              f"its codec's codes [B, {codes.shape[1]}, {codes.shape[2]}] (frame_size {config.frame_size})")
    return StreamedAudio(features, codes, recipe)


def with_frames(ids: torch.Tensor, first: int, frames: torch.Tensor, audio_bos: int) -> torch.Tensor:
    """``ids [B, S]`` at positions ``first``… as the forward takes them, ``[B, S, 1 + K]``: position ``p`` carries frame
    ``p - 1``, position 0 ``audio_bos`` in every codebook (modeling_kyutai_speech_to_text.py:848-858)."""
    positions = torch.arange(first, first + ids.shape[1], device=ids.device)
    codes = frames[:, (positions - 1).clamp(min=0)].clone()
    codes[:, positions == 0] = audio_bos
    return torch.cat([ids.unsqueeze(-1), codes.to(ids.dtype)], dim=-1)


def streaming_forwards(model: Model, prompt: torch.Tensor, frames: torch.Tensor) -> Forwards:
    """Forwards that attach each position's frame to its text id; a cached call's first position is the cache's length,
    as ``prepare_inputs_for_generation`` counts it."""
    keyword = cache_keyword(model)
    audio_bos = int(model.config.audio_bos_token_id)

    def kept(keep: int | None) -> dict[str, int]:
        return keep_logits(model, keep) if keep is not None else {}

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        inputs = with_frames(ids, 0, frames, audio_bos)
        return fed_back(model(input_ids=inputs, use_cache=True, **kept(keep), **({keyword: cache} if cache is not None else {})), cache)

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        inputs = with_frames(ids, seq_length(cache) or 0, frames, audio_bos)
        return fed_back(model(input_ids=inputs, use_cache=True, **kept(keep), **{keyword: cache}), cache)

    def reference(ids: torch.Tensor, keep: int | None) -> Any:
        return model(input_ids=with_frames(ids, 0, frames, audio_bos), use_cache=False, **kept(keep))

    def default_cache() -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=model.config)

    return Forwards(model=model, prompt=prompt, start=start, more=more, reference=reference,
                    make_cache=lambda kind, length: new_cache(model, kind, length), default_cache=default_cache,
                    row_inputs=True)


@dataclass
class StreamingRun:
    """The cell's decode run, how its inputs were made, and what its generate() paths are given."""

    run: FamilyRun
    recipe: str
    generate_inputs: GenerateInputs


def probe_streaming_codes(model: Model, plan: ProbePlan) -> StreamingRun:
    """Prefill the text prompt with its frames, decode ``plan.decode_steps`` text ids each with its position's frame,
    compare with one uncached pass; and what ``generate()`` is given: the feature extractor's output alone."""
    config = model.config
    device = next(p.device for p in model.parameters())
    frames_needed = plan.prompt_length + plan.decode_steps + SPARE_FRAMES
    audio = streamed_audio(model, plan.batch_size, frames_needed, plan.seed)
    forbidden = special_token_ids(config) | {int(config.pad_token_id)}
    text = text_ids(plan.batch_size, plan.prompt_length, plan.seed, int(config.vocab_size), forbidden).to(device)
    text[:, 0] = int(config.bos_token_id)
    run = drive(model, plan, Driver(streaming_forwards(model, text, audio.frames), forbidden, geometry=cache_geometry(config)))
    recipe = (f"{audio.recipe}; text input_ids [B, {plan.prompt_length}] (bos_token_id {config.bos_token_id} first), "
              f"each position p fed with frame p - 1 as input_ids [B, S, 1 + {audio.frames.shape[-1]}] "
              f"(audio_bos_token_id {config.audio_bos_token_id} at position 0)")
    given = GenerateInputs(dict(audio.features), 1, {"suppress_tokens": sorted(forbidden)})
    return StreamingRun(run, recipe, given)
