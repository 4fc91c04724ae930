"""Planted faults in the caches of the family cells: each patches transformers for one `with` block.

- ``cross_grows``: the cross-attention cache forgets it was filled, so every decode step recomputes the
  encoder K/V and appends them (the cross length grows E, 2E, 3E, …);
- ``cross_recomputed_short``: every decode step recomputes the cross-attention K/V with the wrong length
  (the encoder output minus its first position) and replaces the cached ones;
- ``mrope_deltas_dropped``: decode steps of a multimodal-rotary model forget ``rope_deltas``, so positions
  after the image continue from the token count instead of the image's last position;
- ``positions_restart_after_image``: decode steps of a multimodal-rotary model restart their positions at 0;
- ``lm_positions_restart_after_image``: the OPT language model inside BLIP-2, prefilled with the merged image
  and prompt embeddings, restarts its decode steps' learned positions at 0 (as if only ids counted);
- ``positions_restart_after_audio``: Qwen2-Audio's decode steps number their positions as if the audio
  placeholders took none (the count of text tokens only), so every position after the audio is shifted back;
- ``image_state_kept``: Qwen2-VL's generate() keeps something of the last image request on the model and adds it to
  the logits of every later text-only request: state one call leaves on the model for the next;
- ``cached_generate_drops_the_image``: LLaVA's forward drops the image generate() encoded once (``mm_encoder_outputs``)
  when a cache is given, so a cached generate() prefills its placeholders as text ids; the uncached generate() and the
  hand-driven decode (which passes the pixel values) keep the image;
- ``decode_steps_drop_the_image``: IDEFICS' decode steps attend to no image (their rows of ``image_attention_mask`` zeroed),
  as a generate() that did not carry the mask's last row would run them;
- ``frame_reads_another_codebooks_table``: Higgs Audio v2's audio-only decode steps look codebook 1's code up in
  codebook 0's embedding table (its offset in ``HiggsAudioV2Embeddings`` set to codebook 0's), so the K/V each step writes
  hold another frame embedding (the prefill of text and reference audio is untouched);
- ``reference_window_never_evicts``: UnlimitedOcr's reference sliding window layers keep every decoded token (their window
  never slides); the mask still attends by the config's window, so the logits stay right and the memory grows;
- ``cross_half_not_reordered``: an encoder-decoder cache's ``reorder_cache`` moves the self-attention half's rows and
  leaves the cross-attention half's where they were (each row then reads another row's encoder K/V);
- ``left_pads_attended``: LLaVA's and Higgs Audio's ``prepare_inputs_for_generation`` hands the forward an all-ones attention mask, so a
  left-padded prompt's pad columns are attended (a prompt without padding is unchanged);
- ``decode_steps_drop_the_encoder_mask``: T5's, Speech2Text's, MusicGen's and Dia's decoders, on a one-position forward
  (a decode step), read the encoder output without its attention mask, so a padded encoder row's decode steps attend to its pad positions
  (a forward over several decoder positions, the prefill, keeps the mask);
- ``chunk_features_reversed``: generate()'s chunked prefill hands each chunk the pre-encoded image features of its
  placeholders in reverse order (``_slice_mm_encoder_output`` given the rows backwards), so a chunk that holds part of
  the image scatters another part's features into it; one prefill, and the hand-driven chunks, keep the image whole;
- ``extend_keeps_last_only``: a multi-token forward on a filled dynamic layer stores only its last token's K/V (as a
  decode step would): a prefix extended by several tokens, or a prompt chunk after the first, loses the others;
- ``static_copy_shares_storage``: ``copy.deepcopy`` of a static layer shares its preallocated K/V tensors with the
  original, so a write into the copy lands in the original too;
- ``codebook_reads_another_codebook``: MusicGen's decode steps embed codebook 1's stream from codebook 0's ids, so the
  K/V each step writes hold codebook 0's entry where codebook 1's belongs (the prefill is untouched);
- ``depth_head_one_codebook_behind``: CSM's depth decoder, on its cached decode calls, picks the codebook head one
  codebook behind (as a cache that counts one position short would make ``codebook_indices``): codebook k >= 2 of every
  frame is predicted with codebook k-1's head, while the prefill of ``[0, c0]`` and the backbone are untouched;
- ``coarse_codebook_offset_dropped``: Bark's coarse model, on its cached decode steps, embeds codebook 1's ids without
  their codebook offset (as codebook 0's entry: id - codebook_size), so the K/V a codebook-1 step writes are another
  codebook's; its prefill (the semantic window and the coarse history) and the semantic stage are untouched;
- ``frame_one_behind``: Kyutai speech-to-text's one-position forwards (decode steps) embed the codec frame of the
  position before theirs (the frame the call before carried at its last position) beside their text id; a forward over
  several positions (the prefill, the uncached pass) is untouched.
- ``audio_one_step_behind``: Voxtral Realtime's one-position cached forwards (decode steps) run its audio encoder on the
  previous text position's audio (the encoder inputs the call before carried at its last position) instead of their own,
  so each decoded position gets the last time step's audio added; the prefill and the uncached pass are untouched.
- ``talker_reads_the_next_reply_embedding``: Qwen2.5-Omni's talker decode steps add the thinker reply embedding one
  position ahead (the reply part handed to the step loses its first entry while others remain), so every decoded codec
  position pairs with the next reply token's thinker state; the prefill is untouched.
- ``code_predictor_head_one_behind``: Qwen3-Omni-MoE's code predictor, on its cached decode calls (one code fed, its
  ``generation_steps`` counting the codes), predicts with the head one codebook behind (as a step count one short would
  pick it): codebook k >= 2 of every frame through codebook k-1's head; its prefill over ``[hidden, c0]`` and the talker
  are untouched.
- ``crop_leaves_a_stale_position``: a dynamic layer cropped back from its end (``crop`` with a negative length, as PI0's
  flow-matching sampler crops its prefix cache after every step) keeps one position more than asked: the first position of
  the suffix the step wrote (PI0: its state token's K/V) stays behind the prefix for every later step to read;
- ``crop_is_a_no_op``: ``DynamicCache.crop`` leaves every layer as it is, so each step's suffix stays in the cache;
- ``t2u_cross_from_encoder_input``: SeamlessM4T's text-to-unit model, on its cached decode steps, recomputes its
  cross-attention K/V from another encoder input, the t2u encoder's input (the text decoder's last hidden states
  generate() hands it) instead of its output, and writes them over the cached ones: the same length in every layer,
  other values; the prefill and the uncached pass read the encoder output.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, EncoderDecoderCache, StaticLayer
from transformers.models.bark.modeling_bark import BarkCoarseModel
from transformers.models.csm.modeling_csm import CsmCodebooksHead, CsmDepthDecoderForCausalLM
from transformers.models.higgs_audio_v2.modeling_higgs_audio_v2 import HiggsAudioV2Model
from transformers.models.idefics.modeling_idefics import IdeficsModel
from transformers.models.kyutai_speech_to_text.modeling_kyutai_speech_to_text import KyutaiSpeechToTextEmbeddings
from transformers.models.llava.modeling_llava import LlavaModel
from transformers.models.musicgen.modeling_musicgen import MusicgenDecoder
from transformers.models.opt.modeling_opt import OPTLearnedPositionalEmbedding
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniTalkerForConditionalGeneration
from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioForConditionalGeneration
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLForConditionalGeneration, Qwen2VLModel
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration,
)
from transformers.models.seamless_m4t.modeling_seamless_m4t import SeamlessM4TEncoder, SeamlessM4TTextToUnitModel
from transformers.models.voxtral_realtime.modeling_voxtral_realtime import VoxtralRealtimeModel

from kvconform.families.registry import generation_overrides
from tests.faults import Patch, patched


class _Forgetful(dict):
    """An ``is_updated`` map that never remembers: cross-attention K/V are recomputed at every call."""

    def get(self, key: Any, default: Any = None) -> bool:
        return False


def _cross_cache_patch(short: bool) -> list[Patch]:
    original = EncoderDecoderCache.__init__

    def __init__(self: Any, *caches: Any) -> None:
        original(self, *caches)
        self.is_updated = _Forgetful(self.is_updated)
        if not short:
            return
        cross, update = self.cross_attention_cache, self.cross_attention_cache.update

        def recompute(key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
            layer = cross.layers[layer_idx] if layer_idx < len(cross.layers) else None
            if layer is None or not layer.is_initialized:
                return update(key_states, value_states, layer_idx, *args, **kwargs)
            layer.keys, layer.values = key_states[..., 1:, :], value_states[..., 1:, :]
            return layer.keys, layer.values

        cross.update = recompute

    return [(EncoderDecoderCache, "__init__", __init__)]


def _decode_positions(shift: Callable[[Any, int, int, int], torch.Tensor]) -> list[Patch]:
    """Replace Qwen2-VL's decode-step positions by ``shift(model, batch, cache_length, new_tokens)``."""
    original = Qwen2VLModel.compute_3d_position_ids

    def compute_3d_position_ids(self: Any, input_ids: Any, inputs_embeds: torch.Tensor, *args: Any, **kwargs: Any):
        cache = kwargs.get("cache")
        length = cache.get_seq_length() if cache is not None else 0
        if length == 0 or self.rope_deltas is None:  # the prefill, or a text-only prompt (no image to drift after)
            return original(self, input_ids, inputs_embeds, *args, **kwargs)
        batch, new = inputs_embeds.shape[:2]
        return shift(self, batch, length, new).to(inputs_embeds.device)

    return [(Qwen2VLModel, "compute_3d_position_ids", compute_3d_position_ids)]


def _without_deltas(model: Any, batch: int, length: int, new: int) -> torch.Tensor:
    return torch.arange(length, length + new).view(1, 1, -1).expand(3, batch, -1)


def _restarted(model: Any, batch: int, length: int, new: int) -> torch.Tensor:
    return torch.arange(new).view(1, 1, -1).expand(3, batch, -1)


def _lm_positions_restart() -> list[Patch]:
    original = OPTLearnedPositionalEmbedding.forward

    def forward(self: Any, attention_mask: torch.Tensor, cache_length: int = 0, position_ids: Any = None) -> torch.Tensor:
        if cache_length > 0:  # a decode step: positions from 0 instead of after the cached image and prompt
            new = attention_mask.shape[1] - cache_length
            position_ids = torch.arange(new, device=attention_mask.device).expand(attention_mask.shape[0], -1)
        return original(self, attention_mask, cache_length, position_ids)

    return [(OPTLearnedPositionalEmbedding, "forward", forward)]


def _audio_positions_restart() -> list[Patch]:
    original = Qwen2AudioForConditionalGeneration.forward
    audio_tokens = {"count": 0}

    @functools.wraps(original)  # its signature, which the cell reads to name the feature inputs
    def forward(self: Any, input_ids: Any = None, *args: Any, cache: Any = None, **kwargs: Any) -> Any:
        length = cache.get_seq_length() if cache is not None else 0
        if input_ids is not None and length == 0:  # a prefill: remember how many audio placeholders it held
            audio_tokens["count"] = int((input_ids[0] == self.config.audio_token_id).sum())
        elif input_ids is not None and kwargs.get("position_ids") is None:  # a decode step: the audio counted no positions
            start = length - audio_tokens["count"]
            kwargs["position_ids"] = torch.arange(start, start + input_ids.shape[1], device=input_ids.device).expand(input_ids.shape[0], -1)
        return original(self, input_ids, *args, cache=cache, **kwargs)

    return [(Qwen2AudioForConditionalGeneration, "forward", forward)]


def _image_state_kept() -> list[Patch]:
    original = Qwen2VLForConditionalGeneration.generate

    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("pixel_values") is not None:  # an image request: the model keeps something of this image
            self._kept_from_image = kwargs["pixel_values"].flatten()[: self.lm_head.weight.shape[0]].float()
            return original(self, *args, **kwargs)
        kept = getattr(self, "_kept_from_image", None)
        if kept is None:
            return original(self, *args, **kwargs)
        handle = self.lm_head.register_forward_hook(lambda module, inputs, output: output + kept.to(output.dtype))
        try:  # a later text-only request reads it
            return original(self, *args, **kwargs)
        finally:
            handle.remove()

    return [(Qwen2VLForConditionalGeneration, "generate", generate)]


def _cached_generate_drops_the_image() -> list[Patch]:
    original = LlavaModel.forward

    @functools.wraps(original)
    def forward(self: Any, *args: Any, cache: Any = None, mm_encoder_outputs: Any = None, **kwargs: Any) -> Any:
        if cache is not None:  # generate() hands the image it encoded once as mm_encoder_outputs: the cached run drops it
            mm_encoder_outputs = None
        return original(self, *args, cache=cache, mm_encoder_outputs=mm_encoder_outputs, **kwargs)

    return [(LlavaModel, "forward", forward)]


def _decode_steps_drop_the_image() -> list[Patch]:
    original = IdeficsModel.forward

    @functools.wraps(original)
    def forward(self: Any, *args: Any, cache: Any = None, image_attention_mask: Any = None, **kwargs: Any) -> Any:
        if cache is not None and cache.get_seq_length() > 0 and image_attention_mask is not None:  # a decode step
            image_attention_mask = torch.zeros_like(image_attention_mask)
        return original(self, *args, cache=cache, image_attention_mask=image_attention_mask, **kwargs)

    return [(IdeficsModel, "forward", forward)]


def _codebook_crossed() -> list[Patch]:
    original = MusicgenDecoder.forward

    @functools.wraps(original)
    def forward(self: Any, input_ids: Any = None, *args: Any, cache: Any = None, **kwargs: Any) -> Any:
        if input_ids is not None and cache is not None and cache.get_seq_length() > 0:  # a decode step
            codes = input_ids.reshape(-1, self.num_codebooks, input_ids.shape[-1]).clone()
            codes[:, 1] = codes[:, 0]
            input_ids = codes.reshape(input_ids.shape)
        return original(self, input_ids, *args, cache=cache, **kwargs)

    return [(MusicgenDecoder, "forward", forward)]


def _depth_head_behind() -> list[Patch]:
    decoding = {"on": False}
    forward, head = CsmDepthDecoderForCausalLM.forward, CsmCodebooksHead.forward

    @functools.wraps(forward)
    def depth_forward(self: Any, *args: Any, cache: Any = None, **kwargs: Any) -> Any:
        decoding["on"] = cache is not None and cache.get_seq_length() > 0
        try:
            return forward(self, *args, cache=cache, **kwargs)
        finally:
            decoding["on"] = False

    @functools.wraps(head)
    def head_forward(self: Any, hidden_states: Any, codebook_indices: Any = None) -> Any:
        if decoding["on"]:
            codebook_indices = (codebook_indices - 1).clamp(min=1)
        return head(self, hidden_states, codebook_indices)

    return [(CsmDepthDecoderForCausalLM, "forward", depth_forward), (CsmCodebooksHead, "forward", head_forward)]


def _coarse_offset_dropped() -> list[Patch]:
    original = BarkCoarseModel.forward
    layout = generation_overrides("bark")  # the tiny model's ids: codebook k's codes from semantic_vocab_size + k * size
    first, size = int(layout["semantic_config"]["semantic_vocab_size"]), int(layout["codebook_size"])

    @functools.wraps(original)
    def forward(self: Any, input_ids: Any = None, *args: Any, **kwargs: Any) -> Any:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if input_ids is not None and cache is not None and cache.get_seq_length() > 0:  # a decode step
            second = (input_ids >= first + size) & (input_ids < first + 2 * size)
            input_ids = torch.where(second, input_ids - size, input_ids)
        return original(self, input_ids, *args, **kwargs)

    return [(BarkCoarseModel, "forward", forward)]


def _talker_reply_ahead() -> list[Patch]:
    original = Qwen2_5OmniTalkerForConditionalGeneration.forward

    @functools.wraps(original)
    def forward(self: Any, *args: Any, inputs_embeds: Any = None, thinker_reply_part: Any = None, **kwargs: Any) -> Any:
        if inputs_embeds is None and thinker_reply_part is not None and thinker_reply_part.shape[1] > 1:  # a decode step
            thinker_reply_part = thinker_reply_part[:, 1:]
        return original(self, *args, inputs_embeds=inputs_embeds, thinker_reply_part=thinker_reply_part, **kwargs)

    return [(Qwen2_5OmniTalkerForConditionalGeneration, "forward", forward)]


def _code_predictor_head_behind() -> list[Patch]:
    original = Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration.forward

    @functools.wraps(original)
    def forward(self: Any, input_ids: Any = None, *args: Any, generation_steps: Any = None, **kwargs: Any) -> Any:
        if input_ids is None:  # the prefill over [hidden, c0]
            return original(self, input_ids, *args, generation_steps=generation_steps, **kwargs)
        heads = self.lm_head
        self.lm_head = torch.nn.ModuleList([heads[0], *heads[:-1]])  # head k is head k - 1's
        try:
            return original(self, input_ids, *args, generation_steps=generation_steps, **kwargs)
        finally:
            self.lm_head = heads

    return [(Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration, "forward", forward)]


def _t2u_cross_from_encoder_input() -> list[Patch]:
    encode, decode = SeamlessM4TEncoder.forward, SeamlessM4TTextToUnitModel.forward
    seen: dict[str, torch.Tensor] = {}

    @functools.wraps(encode)
    def encoder_forward(self: Any, *args: Any, inputs_embeds: Any = None, **kwargs: Any) -> Any:
        if self.is_t2u_encoder and inputs_embeds is not None:
            seen["input"] = inputs_embeds
        return encode(self, *args, inputs_embeds=inputs_embeds, **kwargs)

    @functools.wraps(decode)
    def forward(self: Any, *args: Any, cache: Any = None, encoder_outputs: Any = None, **kwargs: Any) -> Any:
        if isinstance(cache, EncoderDecoderCache) and cache.get_seq_length() > 0 and "input" in seen:  # a decode step
            encoder_outputs = (seen["input"],)
            cache.is_updated.clear()  # recompute the cross K/V from it, then write them over the cached ones
            for layer in cache.cross_attention_cache.layers:
                layer.is_initialized = False
        return decode(self, *args, cache=cache, encoder_outputs=encoder_outputs, **kwargs)

    return [(SeamlessM4TEncoder, "forward", encoder_forward), (SeamlessM4TTextToUnitModel, "forward", forward)]


def _frame_reads_another_table() -> list[Patch]:
    original = HiggsAudioV2Model.forward

    @functools.wraps(original)
    def forward(self: Any, input_ids: Any = None, *args: Any, cache: Any = None, **kwargs: Any) -> Any:
        if input_ids is not None or cache is None or cache.get_seq_length() == 0:  # a prefill or an uncached pass
            return original(self, input_ids, *args, cache=cache, **kwargs)
        offsets = self.embed_audio_tokens.audio_tokens_offsets
        kept = offsets.clone()
        offsets[1] = offsets[0]
        try:
            return original(self, input_ids, *args, cache=cache, **kwargs)
        finally:
            offsets.copy_(kept)

    return [(HiggsAudioV2Model, "forward", forward)]


def _reference_window_never_evicts() -> list[Patch]:
    from transformers.models.unlimited_ocr.modeling_unlimited_ocr import UnlimitedOcrDynamicReferenceSlidingWindowLayer as Layer

    original = Layer.__init__

    @functools.wraps(original)
    def __init__(self: Any, sliding_window: int | None = None, **kwargs: Any) -> None:
        original(self, sliding_window=1_000_000, **kwargs)

    return [(Layer, "__init__", __init__)]


def _cross_half_not_reordered() -> list[Patch]:
    def reorder_cache(self: Any, beam_idx: torch.Tensor) -> None:
        self.self_attention_cache.reorder_cache(beam_idx)

    return [(EncoderDecoderCache, "reorder_cache", reorder_cache)]


def _extend_keeps_last_only() -> list[Patch]:
    original = DynamicLayer.update

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not (self.is_initialized and self.keys is not None and self.keys.numel() > 0 and key_states.shape[-2] > 1):
            return original(self, key_states, value_states, *args, **kwargs)
        attended = torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)
        self.keys = torch.cat([self.keys, key_states[..., -1:, :]], dim=-2)
        self.values = torch.cat([self.values, value_states[..., -1:, :]], dim=-2)
        return attended

    return [(DynamicLayer, "update", update)]


def _left_pads_attended() -> list[Patch]:
    """LLaVA's and Higgs Audio's generate() attend to a left-padded row's pad columns (the 2-D mask made all ones)."""
    from transformers import HiggsAudioV2ForConditionalGeneration, LlavaForConditionalGeneration

    def unmasked(cls: type) -> Patch:
        original = cls.prepare_inputs_for_generation

        @functools.wraps(original)
        def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
            inputs = original(self, *args, **kwargs)
            if isinstance(inputs.get("attention_mask"), torch.Tensor) and inputs["attention_mask"].dim() == 2:
                inputs["attention_mask"] = torch.ones_like(inputs["attention_mask"])
            return inputs

        return (cls, "prepare_inputs_for_generation", prepare)

    return [unmasked(LlavaForConditionalGeneration), unmasked(HiggsAudioV2ForConditionalGeneration)]


def _decode_steps_drop_the_encoder_mask() -> list[Patch]:
    from transformers.models.dia.modeling_dia import DiaDecoder
    from transformers.models.musicgen.modeling_musicgen import MusicgenDecoder
    from transformers.models.speech_to_text.modeling_speech_to_text import Speech2TextDecoder
    from transformers.models.t5.modeling_t5 import T5Stack

    def unmasked(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            ids = kwargs.get("input_ids")
            if getattr(self, "is_decoder", True) and isinstance(ids, torch.Tensor) and ids.shape[1] == 1:
                kwargs["encoder_attention_mask"] = None
            return original(self, *args, **kwargs)

        return forward

    return [(decoder, "forward", unmasked(decoder.forward)) for decoder in (T5Stack, Speech2TextDecoder, MusicgenDecoder, DiaDecoder)]


def _chunk_features_reversed() -> list[Patch]:
    import transformers.generation.utils as generation

    original = generation._slice_mm_encoder_output

    def sliced(output: Any, rows: torch.Tensor) -> Any:
        return original(output, rows.flip(0))

    return [(generation, "_slice_mm_encoder_output", sliced)]


def _static_copy_shares_storage() -> list[Patch]:
    import copy

    def deepcopy(self: Any, memo: dict[int, Any]) -> Any:
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        for name, value in vars(self).items():
            setattr(copied, name, value if name in ("keys", "values") else copy.deepcopy(value, memo))
        return copied

    return [(StaticLayer, "__deepcopy__", deepcopy)]


def _frame_one_behind() -> list[Patch]:
    original = KyutaiSpeechToTextEmbeddings.forward
    last: dict[str, torch.Tensor] = {}

    def forward(self: Any, input_ids: torch.Tensor) -> torch.Tensor:
        fed = input_ids
        if input_ids.shape[1] == 1 and "frame" in last and last["frame"].shape[0] == input_ids.shape[0]:
            fed = torch.cat([input_ids[..., :1], last["frame"]], dim=-1)
        last["frame"] = input_ids[:, -1:, 1:].clone()
        return original(self, fed)

    return [(KyutaiSpeechToTextEmbeddings, "forward", forward)]


def _audio_one_step_behind() -> list[Patch]:
    original = VoxtralRealtimeModel.get_audio_features
    last: dict[str, torch.Tensor] = {}

    def get_audio_features(self: Any, *args: Any, encoder_inputs_embeds: torch.Tensor | None = None, **kwargs: Any):
        fed = encoder_inputs_embeds
        factor = self.config.downsample_factor
        cache = kwargs.get("cache")
        if fed is not None and fed.shape[1] == factor and cache is not None and cache.get_seq_length() > 0 and "audio" in last:
            fed = last["audio"]
        if encoder_inputs_embeds is not None:
            last["audio"] = encoder_inputs_embeds[:, -factor:].clone()
        return original(self, *args, encoder_inputs_embeds=fed, **kwargs)

    return [(VoxtralRealtimeModel, "get_audio_features", get_audio_features)]


def _crop_leaves_a_stale_position() -> list[Patch]:
    original = DynamicLayer.crop

    def crop(self: Any, max_length: int) -> None:
        original(self, max_length + 1 if max_length < 0 else max_length)

    return [(DynamicLayer, "crop", crop)]


def _crop_is_a_no_op() -> list[Patch]:
    def crop(self: Any, max_length: int) -> None:
        return None

    return [(DynamicCache, "crop", crop)]


FAULTS: dict[str, Callable[[], list[Patch]]] = {
    "cross_grows": lambda: _cross_cache_patch(short=False),
    "cross_recomputed_short": lambda: _cross_cache_patch(short=True),
    "mrope_deltas_dropped": lambda: _decode_positions(_without_deltas),
    "positions_restart_after_image": lambda: _decode_positions(_restarted),
    "lm_positions_restart_after_image": _lm_positions_restart,
    "positions_restart_after_audio": _audio_positions_restart,
    "image_state_kept": _image_state_kept,
    "cached_generate_drops_the_image": _cached_generate_drops_the_image,
    "decode_steps_drop_the_image": _decode_steps_drop_the_image,
    "codebook_reads_another_codebook": _codebook_crossed,
    "depth_head_one_codebook_behind": _depth_head_behind,
    "coarse_codebook_offset_dropped": _coarse_offset_dropped,
    "talker_reads_the_next_reply_embedding": _talker_reply_ahead,
    "code_predictor_head_one_behind": _code_predictor_head_behind,
    "t2u_cross_from_encoder_input": _t2u_cross_from_encoder_input,
    "frame_reads_another_codebooks_table": _frame_reads_another_table,
    "reference_window_never_evicts": _reference_window_never_evicts,
    "cross_half_not_reordered": _cross_half_not_reordered,
    "left_pads_attended": _left_pads_attended,
    "decode_steps_drop_the_encoder_mask": _decode_steps_drop_the_encoder_mask,
    "chunk_features_reversed": _chunk_features_reversed,
    "extend_keeps_last_only": _extend_keeps_last_only,
    "static_copy_shares_storage": _static_copy_shares_storage,
    "frame_one_behind": _frame_one_behind,
    "audio_one_step_behind": _audio_one_step_behind,
    "crop_leaves_a_stale_position": _crop_leaves_a_stale_position,
    "crop_is_a_no_op": _crop_is_a_no_op,
}


def planted(fault: str) -> AbstractContextManager[None]:
    """Apply one fault from ``FAULTS`` for the duration of the block."""
    return patched(FAULTS[fault]())
