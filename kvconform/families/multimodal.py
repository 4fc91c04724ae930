"""Vision- and audio-language cells: a prompt with media placeholders and the media, then text decode steps.

The media is an image (``inputs.image_inputs``) or a waveform's features (``audio.audio_inputs``), as the
model's own processor makes them. The reference is ONE uncached pass over the whole sequence with the same
media, so positions that drift after it (multimodal rotary ``rope_deltas``, positions restarting after the
audio) show up as parity failures, located by layer and position. A text-only prompt on the same model is
the second record.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, EncoderDecoderCache

from kvconform.build.geometry import cache_geometry
from kvconform.build.models import Model
from kvconform.checks.table import CHECKS
from kvconform.compat import cache_keyword
from kvconform.families import CROSS_HALF
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.decoders import image_cross_attention, inner_language_model
from kvconform.families.inputs import MediaInputs, image_delimiters, needs_an_image, special_token_ids, text_ids
from kvconform.families.media_calls import GenerateCall, generate_calls
from kvconform.families.registry import decoder_prompt, prefix_lm_types
from kvconform.probe.assisted import Adapter, AssistedInputs
from kvconform.probe.cache_io import cross_layers, declare_prompt, keep_logits, new_cache, returned_cache, seq_length, whole_pass
from kvconform.probe.decode import ProbePlan, ProbeRecord, without_paths
from kvconform.probe.forwards import Forwards, fed_back
from kvconform.probe.generate_inputs import GenerateInputs
from kvconform.probe.variants import PathNotApplicable
from kvconform.probe.window import WindowRecord, windows_of

#: Text tokens before the media; the rest of the prompt follows it.
TEXT_BEFORE_MEDIA = 2


def token_types(model: Model, prompt_length: int, ids: torch.Tensor, first: int = 0) -> dict[str, torch.Tensor]:
    """A prefix-LM's ``token_type_ids`` of ``ids`` at positions ``first``…: the prompt 0, every later token 1; nothing for
    other models.

    As its processor makes them for a prompt (all 0, ``processing_paligemma.py``: ``return_token_type_ids``)
    and ``generate()`` extends them (each generated token 1, ``modeling_paligemma.py``
    ``_update_model_kwargs_for_generation``): the prompt attends bidirectionally, the suffix causally.
    """
    if model.config.model_type not in prefix_lm_types():
        return {}
    positions = torch.arange(first, first + ids.shape[1], device=ids.device)
    return {"token_type_ids": (positions >= prompt_length).to(ids.dtype).expand_as(ids).contiguous()}


def media_forwards(model: Model, prompt: torch.Tensor, media: MediaInputs | None, closing: Sequence[int] = ()) -> Forwards:
    """The forwards of a vision- or audio-language cell: a call whose ids start the sequence with all of a row's
    placeholders carries the media (and its modality ids; ``closing``: the ids the processor writes after them, which
    the first forward holds too, as rotary positions are computed over the image whole); later calls carry none, as generate() passes the media to the
    prefill only; a prefix-LM's calls carry each position's token type (the prompt 0, later tokens 1). A call that would
    split a row's placeholders is not applicable (``Forwards.unsplit``: a chunked prefill's first chunk holds them whole).

    A model whose own ``generate()`` hands the prompt to an inner language model (BLIP-2) prefills through the outer
    forward with the image, then continues on the inner model, whose cache the caller keeps. A decoder that reads the
    image by cross-attention (BLIP) keeps a self- and a cross-attention half, and every later call gets the image states
    the outer forward gave it, as the model's generate() passes them on (modeling_blip.py:919-926); a forward that reads
    the image at every position (IDEFICS) gets it again with each later call's rows of the image mask."""
    inner = inner_language_model(model)
    decoder = inner if inner is not None else model
    cross = image_cross_attention(model) if media is not None else None
    if inner is not None and media is None:  # its forward needs an image: a text-only prompt is the decoder's
        model = inner
    keyword = cache_keyword(decoder)
    prompt_length = prompt.shape[1]
    placed = media is not None and media.token_id is not None and bool((prompt == media.token_id).any())
    prefix_lm = model.config.model_type in prefix_lm_types()
    encoder_states: dict[str, Any] = {}

    def keep_encoder_states(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        encoder_states.update({k: v for k, v in kwargs.items() if k.startswith("encoder_") and v is not None})

    def kept(module: Model, keep: int | None) -> dict[str, int]:
        return keep_logits(module, keep) if keep is not None else {}

    def types(ids: torch.Tensor, first: int) -> dict[str, torch.Tensor]:
        return token_types(model, prompt_length, ids, first)

    def processor_mask(ids: torch.Tensor) -> dict[str, torch.Tensor]:
        # The tokenizer's attention_mask, which the processor returns with the prompt and generate() always passes. Up to
        # 5.2 Qwen3-VL's mask reads its rotary positions as packed sequences without one (an image's tokens share one
        # temporal position, masking_utils.find_packed_sequence_indices): a pass over the processor's output has it.
        return {"attention_mask": torch.ones_like(ids)}

    def media_of(ids: torch.Tensor, first: int) -> dict[str, Any]:
        if media is None:
            return {}
        if media.token_id is None:  # read by cross-attention, no placeholders: the image goes to the prefill
            return media.for_sequence(model, ids) if first == 0 else {}
        held = (ids == media.token_id).sum(dim=1)
        if int(held.max()) == 0 and first == 0 and placed:  # a prefix of the media prompt before its placeholders
            raise PathNotApplicable(f"a forward over positions 0-{ids.shape[1] - 1} holds none of each row's "
                                    f"{media.tokens_per_row} placeholders: the media goes whole to the prefill")
        if int(held.max()) == 0:  # the blank image of a text-only prompt (IDEFICS), or a later call (the image again there)
            return media.for_sequence(model, ids) if first == 0 and not media.attends else media.for_step(decoder, *ids.shape)
        if first == 0 and int(held.min()) == media.tokens_per_row:
            return media.for_sequence(model, ids)
        raise PathNotApplicable(f"a forward over positions {first}-{first + ids.shape[1] - 1} holds {held.tolist()} of each row's "
                                f"{media.tokens_per_row} placeholders: the media goes whole to the prefill")

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        if cache is None and ids.shape[1] != prompt_length and keeps_prompt_apart:  # its own cache would take ids for the prompt
            cache = default_cache()
        if cache is None and cross is not None:
            # The cache its decoder makes of the DynamicCache generate() gives it (a self- and a cross-attention half,
            # modeling_blip_text.py:350-356), kept by the caller: the outer output returns no cache.
            cache = EncoderDecoderCache(DynamicCache(config=cross.config), DynamicCache(config=cross.config))
        elif cache is None and inner is not None:  # kept by the caller: the outer output does not return it
            cache = DynamicCache(config=inner.config)
        inputs = {"input_ids": ids, "use_cache": True, **processor_mask(ids), **media_of(ids, 0), **types(ids, 0),
                  **kept(model, keep)}
        hook = cross.register_forward_pre_hook(keep_encoder_states, with_kwargs=True) if cross is not None else None
        try:
            output = model(**inputs, **({keyword: cache} if cache is not None else {}))
            output = getattr(output, "language_model_outputs", None) or output
            if cache is None and returned_cache(output) is None:
                # A forward that builds no cache of its own (Granite4Vision's text model, modeling_granite4_vision.py:
                # 590-628, only passes on the one it is given) gets the DynamicCache generate() would give it.
                cache = DynamicCache(config=decoder.config)
                output = model(**inputs, **{keyword: cache})
                output = getattr(output, "language_model_outputs", None) or output
        finally:
            if hook is not None:
                hook.remove()
        return fed_back(output, cache)

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        first = seq_length(cache) or 0
        again = media_of(ids, first)  # refuses a call that holds placeholders; an image read at every position again
        return fed_back(decoder(input_ids=ids, use_cache=True, **types(ids, first), **again, **encoder_states,
                                **kept(decoder, keep), **{keyword: cache}), cache)

    def reference(ids: torch.Tensor, keep: int | None) -> Any:
        return model(input_ids=ids, **processor_mask(ids), **media_of(ids, 0), **types(ids, 0), **kept(model, keep),
                     **whole_pass(model, prompt_length))

    def declared(cache: Any) -> Any:  # where the prompt ends, for a path that prefills another number of tokens
        if cache is not None:
            declare_prompt(cache, prompt_length)
        return cache

    def default_cache() -> Any:
        return declared(DynamicCache(config=decoder.config.get_text_config(decoder=True)))

    try:  # layers that keep the prompt apart (a reference sliding window) learn where it ends from the cache alone
        keeps_prompt_apart = declare_prompt(DynamicCache(config=decoder.config.get_text_config(decoder=True)), prompt_length)
    except (KeyError, TypeError, ValueError, AttributeError):  # layer types no DynamicCache builds
        keeps_prompt_apart = False

    return Forwards(model=model, prompt=prompt, start=start, more=more, reference=reference,
                    make_cache=lambda kind, length: declared(new_cache(decoder, kind, length)), default_cache=default_cache,
                    row_inputs=media is not None, bidirectional=prompt_length if prefix_lm else 0,
                    unsplit=_through_media(prompt, {media.token_id, *closing}) if placed and media is not None else 0)


def _through_media(prompt: torch.Tensor, ids: set[int | None]) -> int:
    """The positions up to and with the last of ``ids`` (the placeholders and the ids closing them) in any row."""
    columns = torch.isin(prompt, torch.tensor([i for i in ids if i is not None], device=prompt.device)).any(dim=0).nonzero()
    return int(columns[-1]) + 1


def _driver(model: Model, prompt: torch.Tensor, media: MediaInputs | None, forbidden: set[int],
            closing: Sequence[int] = ()) -> Driver:
    """The cell's forwards and its greedy picks; a cross-attention decoder's second half snapshotted every step."""
    cross = image_cross_attention(model) if media is not None else None
    return Driver(media_forwards(model, prompt, media, closing), forbidden, extra_halves={CROSS_HALF: cross_layers} if cross is not None else {},
                  geometry=cache_geometry(model.config))



@dataclass
class MultimodalRun:
    """A vision- or audio-language cell's runs, and what its generate() paths are given."""

    with_media: FamilyRun
    text_only: FamilyRun | None
    """``None`` where the text_only check does not run on the plan's cache (the table's)."""
    calls: list[GenerateCall]
    """The generate() calls through one instance: text, the media, other media, text again."""
    recipe: str
    """How the media was made and where its placeholders sit in the prompt."""
    generate_inputs: GenerateInputs
    """The media prompt as ``generate()`` takes it (the family's adapter of the one generate and beam paths)."""
    assisted_inputs: Adapter
    """A media prompt of one row as assisted ``generate()`` takes it (the family's adapter of the assisted path)."""


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


def _own_generate(model: Model) -> str | None:
    """Why assisted decoding cannot run through a model whose own generate() takes the image as a required argument and
    hands its language model's generate() the prompt as embeddings (BLIP-2: modeling_blip_2.py:1818 in 5.24): an
    assistant of the same architecture is called without the image (TypeError), and the forwards that verify the drafts
    are the language model's; ``None`` elsewhere."""
    generate = type(model).generate
    pixels = inspect.signature(generate).parameters.get("pixel_values")
    if pixels is None or pixels.default is not inspect.Parameter.empty:
        return None
    source = inspect.unwrap(generate)  # under its torch.no_grad() wrapper
    where = f"{Path(inspect.getsourcefile(source) or '?').name}:{inspect.getsourcelines(source)[1]}"
    return (f"{type(model).__name__}.generate() ({where}) takes the image as a required argument and calls its language "
            "model's generate() with the prompt's embeddings: an assistant of its architecture is called without the image "
            "(TypeError: missing 'pixel_values') and the forwards that verify drafts are the language model's")


def _forget_rope_deltas(model: Model) -> None:
    """Multimodal-rotary models keep the last prompt's ``rope_deltas`` on the instance, and a forward over a text-only
    prompt does not replace them (modeling_qwen2_vl.py:1093-1116); generate() sets them at every prefill
    (modeling_qwen2_vl.py:1340-1366). The hand-driven decode of the cell starts from a fresh instance's (None), as an
    earlier cell's generate() on the same instance would otherwise leave its image's deltas to a text-only decode; the
    generate() paths start from it too, after the hand-driven runs."""
    for module in model.modules():
        if getattr(module, "rope_deltas", None) is not None:
            module.rope_deltas = None


def _crossed_as_text(media: WindowRecord | None, text: ProbeRecord) -> WindowRecord | None:
    """The window crossings of a cell whose media prompt crosses none (its placeholders fill more than the window): the
    text-only prompt's, said so, on the caches whose text_only check does not carry them (the static cache)."""
    if media is None or text.window is None or media.crossings or media.not_applicable is None:
        return media
    return replace(text.window, through="the text-only prompt (a prompt holding the media whole is longer than the window)",
                   decode=text)


def probe_multimodal(model: Model, plan: ProbePlan, media: Callable[[Model, int, int], MediaInputs],
                     noun: str) -> MultimodalRun:
    """The runs with the media and text only, the generate() calls through one instance, and the generate() inputs; the
    media run's plan counts its placeholders.

    ``media(model, batch, seed)`` makes one image or waveform per row; ``noun`` names it in the recipe.
    """
    _forget_rope_deltas(model)
    probe = media(model, plan.batch_size, plan.seed)  # before the text: its placeholder id is no text id
    forbidden = special_token_ids(model.config) | ({probe.token_id} if probe.token_id is not None else set())
    forbidden |= set(probe.layout.ids) if probe.layout is not None else set()  # the processor's own ids (Molmo2's columns)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    device = next(p.device for p in model.parameters())
    text = text_ids(plan.batch_size, plan.prompt_length, plan.seed, vocab, forbidden).to(device)
    before, after = image_delimiters(model.config) if noun == "image" else ([], [])
    forbidden |= set(before) | set(after)
    # A text-only prompt carries a blank image where the forward needs one (IDEFICS), as its processor makes it.
    blank = probe.blank() if needs_an_image(model) else None
    # Text only first: nothing the media run leaves on the model (rope_deltas) can reach it. On the caches the text_only
    # check runs on only (the table's). Its prompt also crosses the windows, which a prompt holding the media whole
    # cannot (its placeholders fill more than a shrunk window).
    text_caches = CHECKS["text_only"].caches
    checked = text_caches is None or plan.cache in text_caches
    crossed = plan.window and bool(windows_of(cache_geometry(model.config)))  # a cache the text_only check skips: its window
    text_only = (drive(model, replace(without_paths(plan), window=plan.window), _driver(model, text, blank, forbidden))
                 if checked or crossed else None)
    row = probe.row(before, after)
    after = probe.closing(after)
    placeholders = torch.tensor([row] * plan.batch_size, dtype=text.dtype, device=device)
    prompt = torch.cat([text[:, :TEXT_BEFORE_MEDIA], placeholders, text[:, TEXT_BEFORE_MEDIA:]], dim=1)
    prompt, as_given = _decoder_prompt(model, prompt)
    media_plan = replace(plan, prompt_length=prompt.shape[1])
    with_media = drive(model, media_plan, _driver(model, prompt, probe, forbidden, after))
    if text_only is not None and not checked:
        with_media.record.window = _crossed_as_text(with_media.record.window, text_only.record)
        text_only = None
    # The generate() paths (run after this) start from a fresh instance's state too: the hand-driven prefill over the
    # processor's output (its attention_mask) leaves the image's rope_deltas on the instance, and a forward that does not
    # compute its own reads them (the omni thinkers' static generate() prefill, given no 2-D mask on 5.14-5.15).
    _forget_rope_deltas(model)
    first = TEXT_BEFORE_MEDIA + len(before)
    wrapped = f" between the processor's start and end ids {before + after}" if before else ""
    recipe = (f"{probe.recipe}, {probe.tokens_per_row} {noun} tokens at positions "
              f"{first}-{first + probe.tokens_per_row - 1} of a {prompt.shape[1]}-token prompt{wrapped}" if probe.tokens_per_row
              else f"{probe.recipe}, a {prompt.shape[1]}-token prompt")
    if probe.layout is not None:
        recipe = (f"{probe.recipe}, {probe.tokens_per_row} {noun} tokens in the processor's {len(row)} ids for it (crop starts, "
                  f"row ends, columns: {sorted(set(row) - {probe.token_id})}) at positions {TEXT_BEFORE_MEDIA}-"
                  f"{TEXT_BEFORE_MEDIA + len(row) - 1} of a {prompt.shape[1]}-token prompt, mm_token_type_ids marking them all")
    other = media(model, plan.batch_size, plan.seed + 1)

    text_model = inner_language_model(model) or model

    def inputs(ids: torch.Tensor, item: MediaInputs | None, prompt_length: int) -> dict[str, Any]:
        item = item if item is not None else blank
        media_inputs = item.for_sequence(model, ids) if item is not None else {}
        return {**media_inputs, **token_types(model if item is not None else text_model, prompt_length, ids)}

    # Only on the caches the media_calls check runs on (the table's): the calls build generate()'s own cache.
    caches = CHECKS["media_calls"].caches
    calls = generate_calls(model, text_model, text, [(f"an {noun}", prompt, probe), (f"another {noun}", prompt, other)],
                           plan.decode_steps, inputs, forbidden, as_given) if caches is None or plan.cache in caches else []
    # Placeholder and special ids are never generated, as the decode loop never picks them: an uncached generate()
    # would otherwise count a generated placeholder as one more image token.
    ids = as_given(prompt)
    media_inputs = inputs(prompt, probe, prompt.shape[1])
    # A continued call gives the media again only where the forward reads the image at every position (IDEFICS): the
    # cache holds the others' image tokens.
    carried = tuple(media_inputs) if needs_an_image(model) else ()

    def one_pass(kwargs: dict[str, Any], sequences: torch.Tensor, prompt_length: int) -> torch.Tensor:
        # As the media_calls' reference: the processor's mask, the media and token types of these ids, the prompt declared.
        return model(input_ids=sequences, attention_mask=torch.ones_like(sequences), **inputs(sequences, probe, prompt_length),
                     **whole_pass(model, prompt_length)).logits

    given = GenerateInputs({"input_ids": ids, "attention_mask": torch.ones_like(ids), **media_inputs}, prompt.shape[1],
                           {"suppress_tokens": sorted(forbidden)}, carried=carried,
                           ragged_columns=(TEXT_BEFORE_MEDIA + len(row), prompt.shape[1]), one_pass=one_pass)

    def assisted(_model: Model, _plan: Any, length: int) -> AssistedInputs:
        """One row (assisted decoding refuses more): its own media, the text before it, then ``length`` tokens that repeat
        their first half (prompt lookup drafts from them); the reference is ``one_pass``'s, of this row's media."""
        item = media(model, 1, plan.seed)
        half = text_ids(1, (length + 1) // 2, plan.seed, vocab, forbidden)
        body = torch.cat([half, half], dim=1)[:, :length].to(device)
        placed = torch.tensor([item.row(before, after)], dtype=body.dtype, device=device)
        one, as_given_one = _decoder_prompt(model, torch.cat([body[:, :TEXT_BEFORE_MEDIA], placed, body[:, TEXT_BEFORE_MEDIA:]], dim=1))
        ids = as_given_one(one)

        def reference(sequences: torch.Tensor, positioned: bool) -> torch.Tensor:
            return model(input_ids=sequences, attention_mask=torch.ones_like(sequences), **inputs(sequences, item, one.shape[1]),
                         **whole_pass(model, one.shape[1])).logits

        # An EOS no token has where the built model's generation config has none (every published checkpoint's
        # generation_config.json names one; the composite configs' classes do not), as transformers' own assisted tests
        # stop: prompt lookup up to 5.12 raises on a missing one (candidate_generator.py:1138 in 5.12.1, the labelled
        # finding of the BERT decoders, which have none).
        stop = {"eos_token_id": -1} if model.generation_config.eos_token_id is None else {}
        return AssistedInputs(one, {"input_ids": ids, "attention_mask": torch.ones_like(ids), **inputs(one, item, one.shape[1])},
                              reference, {"suppress_tokens": sorted(forbidden), **stop}, not_applicable=_own_generate(model))

    return MultimodalRun(with_media, text_only, calls, recipe, given, assisted)
