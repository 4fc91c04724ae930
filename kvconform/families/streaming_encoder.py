"""Streaming speech-to-text whose audio encoder keeps a cache of its own (Voxtral Realtime).

Not a prompt with audio placeholders: text position ``p`` gets the projected audio of its own time step added to its
embedding (modeling_voxtral_realtime.py:962-973), ``downsample_factor`` encoder positions of it, and every forward runs
the causal audio encoder on the new positions through the encoder's own self-attention cache. The cell drives it as its
``generate()`` does with whole-audio ``input_features``:

- the audio: one seeded-noise waveform per row through the model's own feature extractor (its class with defaults),
  ``audio_length_per_tok`` mel frames per text position; the convolution front end runs once over all of it
  (``_prepare_model_inputs``, :1118-1122) and each forward takes the slice of its positions,
  ``encoder_inputs_embeds[:, 4 * first:4 * (first + n)]`` with ``downsample_factor`` 4 (``prepare_inputs_for_generation``,
  :1098-1105);
- the caches: the decoder's, and the encoder cache and convolution padding cache each forward returns, fed to the next
  (``_update_model_kwargs_for_generation``, :1177-1184); the encoder's is built lazily by the encoder (a ``DynamicCache``
  of the audio config, :559-560), a ``StaticCache`` of ``audio_config.sliding_window`` positions beside a static decoder
  cache (``_prepare_cache_for_generation``, :1213-1220);
- every forward: ``num_delay_tokens`` the config's default (the processor passes its tokenizer's, processing_voxtral_
  realtime.py:210; the forward falls back to the config's, :975-981);
- the text: ``bos_token_id`` first, then seeded text ids;
- the reference: ONE uncached pass over the whole text and ``input_features`` cut to its positions (the front end and
  the encoder are causal: the mel frames past the last position change none before it).

A decoder cache a path copied or cropped has no encoder cache beside it (generate() keeps the encoder's in its model
kwargs; no API crops or copies it with the decoder's): its next forward runs the encoder cached over the positions the
decoder cache holds first, as a stream restarted there would.

Release-neutral (5.2 added the model; line numbers above are 5.24's): the audio tower and ``get_audio_features`` are
the model's own up to 5.9 and its ``VoxtralRealtimeModel``'s from 5.10, both ``model.base_model``; the cache keywords
and output fields are ``cache`` / ``encoder_cache`` from 5.24, ``past_key_values`` / ``encoder_past_key_values`` before,
found by signature (``compat.cache_keyword``, ``cache_argument``, ``codec_cache_keyword``, ``cache_io.returned_cache``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from kvconform.build.geometry import cache_geometry, explain
from kvconform.build.models import Model
from kvconform.compat import cache_argument, cache_keyword, codec_cache_keyword
from kvconform.families.audio import feature_extractor_class, synthetic_waveforms
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.inputs import special_token_ids, text_ids
from kvconform.probe.cache_io import cache_layers, keep_logits, new_cache, returned_cache, seq_length
from kvconform.probe.decode import OwnCache, ProbePlan
from kvconform.probe.forwards import Forwards
from kvconform.probe.generate_inputs import GenerateInputs

#: Text positions of audio beyond the decode's last position: generate() makes no more tokens than the audio has
#: positions (``_prepare_generated_length``, modeling_voxtral_realtime.py:1306-1310), so its paths keep one to spare.
SPARE_POSITIONS = 1
#: The name of the encoder's cache in the cell's records and messages.
ENCODER_CACHE = "audio encoder cache"


def is_streaming_encoder_model(model: Model) -> bool:
    """Whether ``model`` adds a streaming audio encoder's output to every text position (Voxtral Realtime)."""
    config = model.config
    return isinstance(getattr(config, "audio_length_per_tok", None), int) and isinstance(getattr(config, "downsample_factor", None), int) \
        and hasattr(model.base_model, "audio_tower")


@dataclass
class _EncoderState:
    """What generate() carries beside one decoder cache: the encoder's caches, and the text positions they hold."""

    decoder: Any
    length: int
    cache: Any
    padding: Any


class EncoderStream:
    """The audio as generate() feeds it, and the encoder caches each decoder cache was advanced with."""

    def __init__(self, model: Model, features: torch.Tensor) -> None:
        self.model, self.features = model, features
        config = model.config
        self.factor = int(config.downsample_factor)
        self.per_token = int(config.audio_length_per_tok)
        self.delay = int(config.default_num_delay_tokens)
        self.audio = model.base_model
        """Where the release keeps the audio tower and ``get_audio_features``: the model itself up to 5.9, its
        ``VoxtralRealtimeModel`` from 5.10 (``base_model`` is either, by ``base_model_prefix``)."""
        self.encoder_keyword = codec_cache_keyword(model.forward)
        with torch.no_grad():  # the front end once over the whole audio (modeling_voxtral_realtime.py:1118-1122)
            self.embeds = self.audio.audio_tower.embedder(features)
        self.states: dict[int, _EncoderState] = {}
        self.lengths: list[int | None] = []
        """The encoder cache's ``get_seq_length()`` at each snapshot of its layers (the decode's, then the localization's)."""

    def fresh(self, decoder: Any) -> Any:
        """The encoder cache generate() starts with: ``None`` (the encoder builds a ``DynamicCache``), or beside a static
        decoder cache a ``StaticCache`` of ``audio_config.sliding_window`` positions (as ``_get_encoder_cache`` builds it,
        modeling_voxtral_realtime.py:1222-1245; a new one per stream, not the instance it keeps on the model)."""
        from transformers import StaticCache

        if not isinstance(decoder, StaticCache):
            return None
        audio = self.model.config.audio_config
        return StaticCache(config=audio, max_cache_len=int(audio.sliding_window))

    def state(self, decoder: Any, first: int) -> tuple[Any, Any]:
        """The encoder caches to continue ``decoder`` (holding ``first`` text positions) with: those it was advanced with,
        else (a copied or cropped decoder cache) the encoder run cached over its first ``first`` positions."""
        known = self.states.get(id(decoder))
        if known is not None and known.decoder is decoder and known.length == first:
            return known.cache, known.padding
        cache = self.fresh(decoder)
        if first == 0:
            return cache, None
        with torch.no_grad():
            features = self.audio.get_audio_features
            out = features(encoder_inputs_embeds=self.embeds[:, :first * self.factor], use_cache=True, return_dict=True,
                           **{cache_argument(features): cache})
        return returned_cache(out), out.padding_cache

    def keep(self, decoder: Any, length: int, output: Any) -> None:
        """Record the encoder caches ``output`` returned beside ``decoder`` (``_update_model_kwargs_for_generation``)."""
        self.states[id(decoder)] = _EncoderState(decoder, length, getattr(output, self.encoder_keyword), output.padding_cache)

    def layers(self, decoder: Any) -> list[Any]:
        """The encoder cache's layers beside ``decoder`` (for the per-step snapshots and the K/V localization)."""
        known = self.states.get(id(decoder))
        cache = known.cache if known is not None and known.decoder is decoder else None
        self.lengths.append(seq_length(cache) if cache is not None else None)
        return cache_layers(cache) if cache is not None else []

    def positions(self, first: int, count: int) -> torch.Tensor:
        """The encoder inputs of text positions ``first``… (``prepare_inputs_for_generation``, :1098-1105)."""
        return self.embeds[:, first * self.factor:(first + count) * self.factor]


def streaming_forwards(model: Model, prompt: torch.Tensor, stream: EncoderStream) -> Forwards:
    """Forwards that give each text position its audio through the encoder caches beside the decoder cache."""

    keyword = cache_keyword(model)

    def kept(keep: int | None) -> dict[str, int]:
        return keep_logits(model, keep) if keep is not None else {}

    def call(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        first = seq_length(cache) or 0 if cache is not None else 0
        encoder_cache, padding = stream.state(cache, first)
        caches = {stream.encoder_keyword: encoder_cache, **({keyword: cache} if cache is not None else {})}
        output = model(input_ids=ids, encoder_inputs_embeds=stream.positions(first, ids.shape[1]), use_cache=True,
                       padding_cache=padding, num_delay_tokens=stream.delay, **kept(keep), **caches)
        returned = returned_cache(output, cache)
        stream.keep(returned, first + ids.shape[1], output)
        return returned, output

    def reference(ids: torch.Tensor, keep: int | None) -> Any:
        features = stream.features[..., :ids.shape[1] * stream.per_token]
        return model(input_ids=ids, input_features=features, use_cache=False, num_delay_tokens=stream.delay, **kept(keep))

    def default_cache() -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=model.config.get_text_config(decoder=True))

    return Forwards(model=model, prompt=prompt, start=call, more=call, reference=reference,
                    make_cache=lambda kind, length: new_cache(model, kind, length), default_cache=default_cache,
                    row_inputs=True)


@dataclass
class StreamingEncoderRun:
    """The cell's decode run, the encoder cache's own record, how the inputs were made and what generate() is given."""

    run: FamilyRun
    encoder: OwnCache
    recipe: str
    generate_inputs: GenerateInputs


def _audio(model: Model, batch: int, positions: int, seed: int) -> tuple[torch.Tensor, str]:
    """``input_features`` of ``positions`` text positions of seeded noise per row, by the model's feature extractor."""
    cls = feature_extractor_class(model.config.model_type)
    extractor = cls()
    samples = positions * int(model.config.audio_length_per_tok) * int(extractor.hop_length)
    out = extractor(synthetic_waveforms(batch, samples, seed), sampling_rate=extractor.sampling_rate, return_tensors="pt")
    first = next(model.parameters())  # the model's dtype, as a user casts the processor's output (audio.py does alike)
    features = out["input_features"].to(first.device, first.dtype)
    return features, f"{cls.__name__}() on seeded noise of {samples} samples at {extractor.sampling_rate} Hz: input_features {list(features.shape)}"


def probe_streaming_encoder(model: Model, plan: ProbePlan) -> StreamingEncoderRun:
    """Prefill the text prompt with its audio, decode ``plan.decode_steps`` ids each with its time step's audio through
    both caches, compare with one uncached pass; the encoder cache's own record; what ``generate()`` is given."""
    config = model.config
    device = next(p.device for p in model.parameters())
    features, recipe = _audio(model, plan.batch_size, plan.prompt_length + plan.decode_steps + SPARE_POSITIONS, plan.seed)
    stream = EncoderStream(model, features)
    text_config = config.get_text_config(decoder=True)
    forbidden = special_token_ids(config)
    text = text_ids(plan.batch_size, plan.prompt_length, plan.seed, int(text_config.vocab_size), forbidden).to(device)
    text[:, 0] = int(text_config.bos_token_id)
    driver = Driver(streaming_forwards(model, text, stream), forbidden, extra_halves={ENCODER_CACHE: stream.layers},
                    geometry=cache_geometry(config))
    run = drive(model, plan, driver)
    factor = stream.factor
    audio = config.audio_config
    steps = [replace(step, layers=layers, seq_length=length)
             for step, layers, length in zip(run.record.steps, run.halves[ENCODER_CACHE], stream.lengths, strict=False)]
    static = plan.cache == "static"
    # the decoder's cache paths stay the main record's: the encoder's own cache ran none
    encoder_record = replace(run.record, plan=replace(plan, prompt_length=factor * plan.prompt_length, positions_per_step=factor),
                             steps=steps, max_cache_len=int(audio.sliding_window) if static else None, paths={})
    encoder = OwnCache(ENCODER_CACHE, encoder_record, cache_geometry(audio), f"{explain(audio)}; {factor} encoder positions "
                       f"a text position (downsample_factor)")
    recipe = (f"{recipe}; its front end once over it -> encoder_inputs_embeds {list(stream.embeds.shape)}, "
              f"{factor} positions a text position; text input_ids [B, {plan.prompt_length}] (bos_token_id "
              f"{text_config.bos_token_id} first), num_delay_tokens {stream.delay}")
    given = GenerateInputs({"input_ids": text, "attention_mask": torch.ones_like(text), "input_features": features,
                            "num_delay_tokens": stream.delay}, plan.prompt_length, {"suppress_tokens": sorted(forbidden)},
                           carried=("input_features", "num_delay_tokens"))
    return StreamingEncoderRun(run, encoder, recipe, given)
