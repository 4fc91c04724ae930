"""Vision- and audio-language cells: a prompt with media placeholders and the media, then text decode steps.

The media is an image (``inputs.image_inputs``) or a waveform's features (``audio.audio_inputs``), as the
model's own processor makes them. The reference is ONE uncached pass over the whole sequence with the same
media, so positions that drift after it (multimodal rotary ``rope_deltas``, positions restarting after the
audio) show up as parity failures, located by layer and position. A text-only prompt on the same model is
the second record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import torch
from transformers import DynamicCache, EncoderDecoderCache

from kvconform.build.models import Model
from kvconform.checks.table import CHECKS
from kvconform.compat import cache_keyword
from kvconform.families import CROSS_HALF
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.decoders import image_cross_attention, inner_language_model
from kvconform.families.encoder_decoder import cross_layers
from kvconform.families.inputs import MediaInputs, image_delimiters, needs_an_image, special_token_ids, text_ids
from kvconform.families.media_calls import GenerateCall, generate_calls
from kvconform.families.registry import decoder_prompt, prefix_lm_types
from kvconform.probe.cache_io import new_cache, returned_cache, whole_pass
from kvconform.probe.decode import ProbePlan
from kvconform.probe.generate_inputs import GenerateInputs

#: Text tokens before the media; the rest of the prompt follows it.
TEXT_BEFORE_MEDIA = 2


def _segments(model: Model, prompt_length: int) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """``ids -> {"token_type_ids": ...}`` for a prefix-LM (the prompt 0, every later token 1), else nothing.

    As its processor makes them for a prompt (all 0, ``processing_paligemma.py``: ``return_token_type_ids``)
    and ``generate()`` extends them (each generated token 1, ``modeling_paligemma.py``
    ``_update_model_kwargs_for_generation``): the prompt attends bidirectionally, the suffix causally.
    """
    if model.config.model_type not in prefix_lm_types():
        return lambda ids: {}

    def types(ids: torch.Tensor) -> dict[str, torch.Tensor]:
        marks = torch.ones_like(ids)
        marks[:, :prompt_length] = 0
        return {"token_type_ids": marks}

    return types


def _driver(model: Model, plan: ProbePlan, prompt: torch.Tensor, image: MediaInputs | None,
            forbidden: set[int]) -> Driver:
    inner = inner_language_model(model)
    decoder = inner if inner is not None else model
    cross = image_cross_attention(model) if image is not None else None
    if inner is not None and image is None:  # its forward needs an image: a text-only prompt is the decoder's
        model = inner
    keyword = cache_keyword(decoder)
    total = prompt.shape[1] + plan.decode_steps
    segments = _segments(model, prompt.shape[1])
    # What the outer forward hands a cross-attention decoder beside the ids (the image's hidden states): every decode
    # step gets them again, as the model's generate() passes them to the decoder's generate() (modeling_blip.py:919-926).
    encoder_states: dict[str, Any] = {}

    def keep_encoder_states(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        encoder_states.update({k: v for k, v in kwargs.items() if k.startswith("encoder_") and v is not None})

    def pixels(ids: torch.Tensor) -> dict[str, Any]:
        return {**(image.for_sequence(model, ids) if image is not None else {}), **segments(ids)}

    def cached(ids: torch.Tensor) -> Any:
        cache = new_cache(decoder, plan.cache, total)
        if cache is None and cross is not None:
            # The cache its decoder makes of the DynamicCache generate() gives it (a self- and a cross-attention half,
            # modeling_blip_text.py:350-356), kept by the caller: the outer output returns no cache.
            cache = EncoderDecoderCache(DynamicCache(config=cross.config), DynamicCache(config=cross.config))
        elif cache is None and inner is not None:  # kept by the caller: the outer output does not return it
            cache = DynamicCache(config=inner.config)
        hook = cross.register_forward_pre_hook(keep_encoder_states, with_kwargs=True) if cross is not None else None
        try:
            output = model(input_ids=ids, use_cache=True, **pixels(ids), **({keyword: cache} if cache is not None else {}))
            output = getattr(output, "language_model_outputs", None) or output
            if cache is None and returned_cache(output) is None:
                # A forward that builds no cache of its own (Granite4Vision's text model, modeling_granite4_vision.py:
                # 590-628, only passes on the one it is given) gets the DynamicCache generate() would give it.
                cache = DynamicCache(config=decoder.config)
                output = model(input_ids=ids, use_cache=True, **pixels(ids), **{keyword: cache})
                output = getattr(output, "language_model_outputs", None) or output
        finally:
            if hook is not None:
                hook.remove()
        return output if returned_cache(output) is not None or cache is None else _with_cache(output, cache)

    def step(token: torch.Tensor, cache: Any) -> Any:
        marks = {k: torch.ones_like(token) for k in segments(token)}  # a generated token is in the suffix
        again = image.for_step(decoder, token.shape[0]) if image is not None else {}  # an image read at every position
        return decoder(input_ids=token, use_cache=True, **marks, **encoder_states, **again, **{keyword: cache})

    return Driver(
        prompt=prompt,
        prefill=lambda: cached(prompt),
        step=step,
        reference=lambda ids: model(input_ids=ids, **pixels(ids), **whole_pass(model, prompt.shape[1])),
        fresh=cached,
        forbidden=forbidden,
        extra_halves={CROSS_HALF: cross_layers} if cross is not None else {},
    )


def _with_cache(output: Any, cache: Any) -> Any:
    """``output`` with the cache it filled, where the outer model's output has no field for it (BLIP)."""
    return SimpleNamespace(logits=output.logits, cache=cache)


@dataclass
class MultimodalRun:
    """A vision- or audio-language cell's runs, and what its generate() paths are given."""

    with_media: FamilyRun
    text_only: FamilyRun
    calls: list[GenerateCall]
    """The generate() calls through one instance: text, the media, other media, text again."""
    recipe: str
    """How the media was made and where its placeholders sit in the prompt."""
    generate_inputs: GenerateInputs
    """The media prompt as ``generate()`` takes it (the family's adapter of the one generate and beam paths)."""


def _decoder_prompt(model: Model, prompt: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """The media prompt as the model's own generate() hands it to its decoder, and ``prompt -> ids`` as generate() is given
    them (``families.yaml``'s ``decoder_prompt``: BLIP puts its [DEC] id first and drops the processor's closing [SEP])."""
    rewrite = decoder_prompt(model.config.model_type)
    if not rewrite:
        return prompt, lambda ids: ids
    text_config = model.config.get_text_config(decoder=True)
    prompt = prompt.clone()
    prompt[:, 0] = int(getattr(text_config, rewrite["first"]))
    closing = int(getattr(text_config, rewrite["closing"]))
    return prompt, lambda ids: torch.cat([ids, torch.full_like(ids[:, :1], closing)], dim=1)


def _forget_rope_deltas(model: Model) -> None:
    """Multimodal-rotary models keep the last prompt's ``rope_deltas`` on the instance, and a forward over a text-only
    prompt does not replace them (modeling_qwen2_vl.py:1093-1116); generate() sets them at every prefill
    (modeling_qwen2_vl.py:1340-1366). The hand-driven decode of the cell starts from a fresh instance's (None), as an
    earlier cell's generate() on the same instance would otherwise leave its image's deltas to a text-only decode."""
    for module in model.modules():
        if getattr(module, "rope_deltas", None) is not None:
            module.rope_deltas = None


def probe_multimodal(model: Model, plan: ProbePlan, media: Callable[[Model, int, int], MediaInputs],
                     noun: str) -> MultimodalRun:
    """The runs with the media and text only, the generate() calls through one instance, and the generate() inputs; the
    media run's plan counts its placeholders.

    ``media(model, batch, seed)`` makes one image or waveform per row; ``noun`` names it in the recipe.
    """
    _forget_rope_deltas(model)
    probe = media(model, plan.batch_size, plan.seed)  # before the text: its placeholder id is no text id
    forbidden = special_token_ids(model.config) | ({probe.token_id} if probe.token_id is not None else set())
    vocab = model.config.get_text_config(decoder=True).vocab_size
    device = next(p.device for p in model.parameters())
    text = text_ids(plan.batch_size, plan.prompt_length, plan.seed, vocab, forbidden).to(device)
    before, after = image_delimiters(model.config) if noun == "image" else ([], [])
    forbidden |= set(before) | set(after)
    # A text-only prompt carries a blank image where the forward needs one (IDEFICS), as its processor makes it.
    blank = probe.blank() if needs_an_image(model) else None
    # Text only first: nothing the media run leaves on the model (rope_deltas) can reach it.
    text_only = drive(model, plan, _driver(model, plan, text, blank, forbidden))
    row = [*before, *[probe.token_id] * probe.tokens_per_row, *after]
    placeholders = torch.tensor([row] * plan.batch_size, dtype=text.dtype, device=device)
    prompt = torch.cat([text[:, :TEXT_BEFORE_MEDIA], placeholders, text[:, TEXT_BEFORE_MEDIA:]], dim=1)
    prompt, as_given = _decoder_prompt(model, prompt)
    media_plan = replace(plan, prompt_length=prompt.shape[1])
    with_media = drive(model, media_plan, _driver(model, media_plan, prompt, probe, forbidden))
    first = TEXT_BEFORE_MEDIA + len(before)
    wrapped = f" between the processor's start and end ids {before + after}" if before else ""
    recipe = (f"{probe.recipe}, {probe.tokens_per_row} {noun} tokens at positions "
              f"{first}-{first + probe.tokens_per_row - 1} of a {prompt.shape[1]}-token prompt{wrapped}" if probe.tokens_per_row
              else f"{probe.recipe}, a {prompt.shape[1]}-token prompt")
    other = media(model, plan.batch_size, plan.seed + 1)

    text_model = inner_language_model(model) or model

    def inputs(ids: torch.Tensor, item: MediaInputs | None, prompt_length: int) -> dict[str, Any]:
        item = item if item is not None else blank
        media_inputs = item.for_sequence(model, ids) if item is not None else {}
        return {**media_inputs, **_segments(model if item is not None else text_model, prompt_length)(ids)}

    # Only on the caches the media_calls check runs on (the table's): the calls build generate()'s own cache.
    caches = CHECKS["media_calls"].caches
    calls = generate_calls(model, text_model, text, [(f"an {noun}", prompt, probe), (f"another {noun}", prompt, other)],
                           plan.decode_steps, inputs, forbidden, as_given) if caches is None or plan.cache in caches else []
    # Placeholder and special ids are never generated, as the decode loop never picks them: an uncached generate()
    # would otherwise count a generated placeholder as one more image token.
    ids = as_given(prompt)
    given = GenerateInputs({"input_ids": ids, "attention_mask": torch.ones_like(ids), **inputs(prompt, probe, prompt.shape[1])},
                           prompt.shape[1], {"suppress_tokens": sorted(forbidden)})
    return MultimodalRun(with_media, text_only, calls, recipe, given)
