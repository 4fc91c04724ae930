"""One family cell: run its probe and gather every record its checks read (plain data beyond here)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from kvconform.build.geometry import CacheGeometry, cache_geometry, explain
from kvconform.build.models import Model
from kvconform.families import AUDIO_LANGUAGE, CROSS_HALF, ENCODER_DECODER, TEXT_TO_AUDIO, VISION_LANGUAGE
from kvconform.families.audio import audio_inputs
from kvconform.families.bark import is_bark, probe_bark
from kvconform.families.codebook import GenerateRun, calls_record, generate_settings, probe_codebook
from kvconform.families.codebook_ragged import NOT_PADDED, TextBatch, run_codebook_ragged
from kvconform.families.decode import FamilyRun
from kvconform.families.depth_codebooks import DepthTrace, is_depth_codebook_model, probe_depth_codebooks
from kvconform.families.encoder_decoder import assisted_inputs, probe_encoder_decoder
from kvconform.families.flow_matching import is_flow_matching_model, probe_flow_matching
from kvconform.families.geometry import cross_attention_geometry, self_attention_geometry
from kvconform.families.inline_codebooks import is_inline_codebook_model, probe_inline_codebooks
from kvconform.families.inputs import image_inputs
from kvconform.families.media_calls import GenerateCall
from kvconform.families.multimodal import probe_multimodal
from kvconform.families.omni_talker import is_thinker_talker_model, probe_omni_talker
from kvconform.families.streaming_codes import is_streaming_codes_model, probe_streaming_codes
from kvconform.families.streaming_encoder import is_streaming_encoder_model, probe_streaming_encoder
from kvconform.families.text_to_unit import is_text_to_unit_model, probe_text_to_unit
from kvconform.probe.assisted import Adapter
from kvconform.probe.decode import OwnCache, ProbePlan, ProbeRecord
from kvconform.probe.generate_inputs import GenerateInputs
from kvconform.probe.variants import PathNotApplicable, failed_path

#: Per decoder-only multimodal family: (its media per row, the noun its placeholders are named by).
MEDIA = {VISION_LANGUAGE: (image_inputs, "image"), AUDIO_LANGUAGE: (audio_inputs, "audio")}
#: The multimodal checks a streaming model whose encoder has a cache of its own (Voxtral Realtime) cannot take, and why.
STREAMING_ENCODER_NOT_APPLICABLE = {
    "text_only": "a streaming model has no text-only prompt: every text position has its time step's audio added, and its "
                 "forward refuses a call without input_features or encoder_inputs_embeds (modeling_voxtral_realtime.py:950-951, :962-973)",
    "media_calls": "a streaming model's generate() takes the audio with every prompt (no text-only call to bracket the "
                   "audio calls with); the generate and beam paths give it the audio",
    "assisted": "assisted decoding is not built for a streaming model's driver (its encoder's own cache beside the decoder's)",
}
#: The multimodal checks a streaming model (codec frames beside every text position) cannot take, and why.
STREAMING_NOT_APPLICABLE = {
    "text_only": "a streaming model has no text-only prompt: every text position carries a codec frame, and its "
                 "generate() reads input_values to make them (modeling_kyutai_speech_to_text.py:736-739, :826-858)",
    "media_calls": "a streaming model's generate() takes only the audio (its text starts at bos_token_id), so there is "
                   "no text-only call to bracket the audio calls with; the generate and beam paths give it the audio",
    "assisted": "assisted decoding is not built for a streaming model's driver (a codec frame beside every text position)",
}
#: The cross-attention checks a text-to-audio cell without a cross-attention half cannot take (MusicGen, Dia and
#: SeamlessM4T's text-to-unit model have one and take them).
NO_CROSS_HALF = {
    name: "no cross-attention half: the stages this cell decodes are decoder-only, their conditioning in the "
          "self-attention cache (MusicGen Melody's prepended text and chroma states, its decoder layers self-attention "
          "only: modeling_musicgen_melody.py:300-362; a backbone's or thinker's prompt)"
    for name in ("cross_growth", "cross_shapes", "cross_bytes", "encoder_once")
}


@dataclass
class CrossHalf:
    """The cross-attention half of an encoder-decoder cell."""

    record: ProbeRecord
    """The main record with each step's layers replaced by the cross-attention layers."""
    geometry: CacheGeometry
    explanation: str
    encoder_length: int
    encoder_calls: int
    storage: list[list[tuple[int, int] | None]]
    """Per step, each cross layer's (keys, values) storage pointers."""


@dataclass
class CodebookHeads:
    """A codebook decoder's rows: row ``b * codebooks + k`` is codebook head ``k`` of batch row ``b``."""

    codebooks: int
    row_deltas: list[list[float]]
    """Per step, each row's max |Δlogit| against the uncached pass."""
    delays: tuple[int, ...]
    generate: GenerateRun
    depth: DepthTrace | None = None
    """A depth decoder's own cache, frame by frame (CSM: heads 1..K-1 are its)."""
    stage: OwnCache | None = None
    """The stage whose cache decodes every head, where the main record is another stage's (Bark: the coarse model; the
    main record's ``own_caches`` holds it too, for the growth, shapes and bytes checks)."""


@dataclass
class FamilyProbe:
    """What a family cell's checks read: the core record and geometry, plus the family's own records."""

    record: ProbeRecord
    geometry: CacheGeometry
    explanation: str
    inputs: str
    """How the synthetic inputs were shaped (image recipe, encoder input)."""
    cross: CrossHalf | None = None
    text_only: ProbeRecord | None = None
    calls: list[GenerateCall] | None = None
    """A multimodal model's generate() calls through one instance: text, an image, another, text again."""
    codebook: CodebookHeads | None = None
    generate_inputs: GenerateInputs | None = None
    """The cell's prompt as ``generate()`` takes it: what the one generate and beam paths are given (the adapter)."""
    assisted_inputs: Adapter | None = None
    """A prompt of one row as assisted ``generate()`` takes it (the adapter of the assisted path; ``None``: not built)."""
    not_applicable: dict[str, str] = field(default_factory=dict)
    """Family checks the cell cannot take, each with the reason (the suites skip them, ``run_all_family`` leaves them out)."""


def _half_record(run: FamilyRun, name: str) -> ProbeRecord:
    steps = [replace(step, layers=layers) for step, layers in zip(run.record.steps, run.halves[name], strict=False)]
    return replace(run.record, steps=steps)


def _cross_half(run: FamilyRun, config: Any, encoder_length: int, encoder_calls: int) -> CrossHalf:
    """The cross-attention half of ``run``, in the geometry the decoder's ``config`` gives it over ``encoder_length``."""
    geometry, explanation = cross_attention_geometry(config, encoder_length)
    return CrossHalf(_half_record(run, CROSS_HALF), geometry, explanation, encoder_length, encoder_calls,
                     run.half_storage[CROSS_HALF])


def probe_family(model: Model, plan: ProbePlan, family: str) -> FamilyProbe:
    """Probe ``model`` as a cell of ``family`` (vision- or audio-language, encoder-decoder, or text-to-audio)."""
    probe = _probe(model, plan, family)
    if family == TEXT_TO_AUDIO and probe.cross is None:
        probe.not_applicable = {**NO_CROSS_HALF, **probe.not_applicable}
    if family == TEXT_TO_AUDIO and plan.ragged and "ragged" not in probe.record.paths:
        probe.record.paths["ragged"] = failed_path("ragged", PathNotApplicable(NOT_PADDED))
    if family == TEXT_TO_AUDIO and probe.codebook is not None and plan.calls:  # its generate() made again
        probe.record.calls = calls_record(probe.codebook.generate, plan.locate_tolerance, model.config.model_type, plan.cache)
    return probe


def _probe(model: Model, plan: ProbePlan, family: str) -> FamilyProbe:
    config = model.config
    if family == AUDIO_LANGUAGE and is_streaming_codes_model(model):
        streaming = probe_streaming_codes(model, plan)
        return FamilyProbe(streaming.run.record, cache_geometry(config), f"{explain(config)}; inputs: {streaming.recipe}",
                           streaming.recipe, generate_inputs=streaming.generate_inputs, not_applicable=STREAMING_NOT_APPLICABLE)
    if family == AUDIO_LANGUAGE and is_streaming_encoder_model(model):
        encoder = probe_streaming_encoder(model, plan)
        encoder.run.record.own_caches.append(encoder.encoder)
        return FamilyProbe(encoder.run.record, cache_geometry(config), f"{explain(config)}; inputs: {encoder.recipe}", encoder.recipe,
                           generate_inputs=encoder.generate_inputs, not_applicable=STREAMING_ENCODER_NOT_APPLICABLE)
    if family == VISION_LANGUAGE and is_flow_matching_model(model):
        flow = probe_flow_matching(model, plan)
        return FamilyProbe(flow.record, flow.geometry, f"{flow.explanation}; inputs: {flow.recipe}", flow.recipe,
                           not_applicable=flow.not_applicable)
    if family in MEDIA:
        make, noun = MEDIA[family]
        run = probe_multimodal(model, plan, make, noun)
        explanation = f"{explain(config)}; inputs: {run.recipe}"
        return FamilyProbe(run.with_media.record, cache_geometry(config), explanation, run.recipe, text_only=run.text_only.record if run.text_only is not None else None,
                           calls=run.calls, generate_inputs=run.generate_inputs, assisted_inputs=run.assisted_inputs)
    if family in ENCODER_DECODER:
        result = probe_encoder_decoder(model, plan)
        geometry, explanation = self_attention_geometry(config)
        cross = _cross_half(result.run, config, result.encoder_length, result.encoder_calls)
        inputs = f"encoder: {result.recipe} -> {result.encoder_length} encoder positions"
        return FamilyProbe(result.run.record, geometry, explanation, inputs, cross=cross, generate_inputs=result.generate_inputs,
                           assisted_inputs=assisted_inputs)
    if family == TEXT_TO_AUDIO and is_text_to_unit_model(model):
        units = probe_text_to_unit(model, plan)
        t2u = model.t2u_model.config  # its decoder fields are the t2u_* ones (modeling_seamless_m4t.py:1853-1856)
        geometry, explanation = self_attention_geometry(t2u)
        heads = CodebookHeads(1, units.run.row_deltas, (0,), units.generate)
        return FamilyProbe(units.run.record, geometry, f"t2u model {explanation}", units.recipe,
                           cross=_cross_half(units.run, t2u, units.encoder_length, units.encoder_calls), codebook=heads)
    if family == TEXT_TO_AUDIO and is_bark(model):
        bark = probe_bark(model, plan)
        geometry, explanation = self_attention_geometry(model.semantic.config)
        stage = OwnCache("coarse stage", bark.coarse.record, bark.coarse_geometry, bark.coarse_explanation)
        bark.semantic.record.own_caches.append(stage)
        heads = CodebookHeads(bark.codebooks, bark.coarse.row_deltas, tuple(range(bark.codebooks)), bark.generate, stage=stage)
        return FamilyProbe(bark.semantic.record, geometry, f"semantic stage {explanation}", bark.recipe, codebook=heads)
    if family == TEXT_TO_AUDIO and is_depth_codebook_model(model):
        depth = probe_depth_codebooks(model, plan)
        geometry, explanation = self_attention_geometry(config)
        heads = CodebookHeads(depth.codebooks, depth.run.row_deltas, (0,) * depth.codebooks, depth.generate, depth.trace)
        return FamilyProbe(depth.run.record, geometry, explanation, depth.recipe, codebook=heads)
    if family == TEXT_TO_AUDIO and is_thinker_talker_model(model):
        talker = probe_omni_talker(model, plan)
        talker_config = getattr(config.talker_config, "text_config", None) or config.talker_config
        heads = CodebookHeads(talker.codebooks, talker.run.row_deltas, (0,) * talker.codebooks, talker.generate, talker.depth)
        return FamilyProbe(talker.run.record, cache_geometry(talker_config), f"talker: {explain(talker_config)}",
                           talker.recipe, codebook=heads)
    if family == TEXT_TO_AUDIO and is_inline_codebook_model(model):
        inline = probe_inline_codebooks(model, plan)
        geometry, explanation = self_attention_geometry(config)
        heads = CodebookHeads(inline.layout.codebooks, inline.run.row_deltas, inline.layout.delays, inline.generate)
        return FamilyProbe(inline.run.record, geometry, explanation, inline.recipe, codebook=heads)
    if family == TEXT_TO_AUDIO:
        codes = probe_codebook(model, plan)
        if plan.ragged and codes.text is not None:
            start = time.perf_counter()
            settings = generate_settings(model, plan.decode_steps, cache=plan.cache)
            text = TextBatch(codes.text, codes.text.shape[1] - 1)
            codes.run.record.paths["ragged"] = run_codebook_ragged(model, text, settings)
            codes.run.record.timings["ragged_s"] = time.perf_counter() - start
        geometry, explanation = self_attention_geometry(config)
        heads = CodebookHeads(codes.layout.codebooks, codes.run.row_deltas, codes.layout.delays, codes.generate)
        half = _cross_half(codes.run, config, *codes.encoder) if codes.encoder is not None else None
        return FamilyProbe(codes.run.record, geometry, explanation, codes.recipe, cross=half, codebook=heads)
    raise ValueError(f"no family probe for {family!r}")
