"""Encoder-decoder cells (text and speech): the encoder runs once, the decoder decodes with a two-half cache.

The prefill feeds the encoder input and the decoder prompt as ``generate()`` does; every decode
step passes the prefill's encoder output and the cache. The reference is ONE uncached decoder pass
over the whole decoder sequence with the same encoder output. The encoder's calls are counted.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers.modeling_outputs import BaseModelOutput

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families import CROSS_HALF
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.inputs import IMAGE_INPUTS, encoder_inputs, special_token_ids, text_ids
from kvconform.probe.assisted import AssistedInputs
from kvconform.probe.decode import ProbePlan
from kvconform.probe.generate_inputs import GenerateInputs


@dataclass
class EncoderDecoderRun:
    """The decode run plus what the encoder did."""

    run: FamilyRun
    encoder_length: int
    encoder_calls: int
    recipe: str
    generate_inputs: GenerateInputs
    """The encoder input and decoder prompt as ``generate()`` takes them (the family's adapter of the generate paths)."""


def cross_layers(cache: Any) -> list[Any]:
    """The cross-attention half's layer objects (empty if the cache has no such half)."""
    half = getattr(cache, "cross_attention_cache", None)
    return list(getattr(half, "layers", None) or [])


def _decoder_start(model: Model) -> int:
    """The first decoder token as ``generate()`` picks it: ``decoder_start_token_id``, else ``bos_token_id``.

    Never a pad id: models that mask pad tokens would leave the first query nothing to attend to.
    """
    decoder = getattr(model.config, "decoder", None)
    for name in ("decoder_start_token_id", "bos_token_id"):
        for source in (model.generation_config, model.config, decoder):
            value = getattr(source, name, None) if source is not None else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return 3


def attended_length(outputs: Any) -> int:
    """Positions of the encoder output the decoder's cross-attention reads: ``last_hidden_state``, or where that is no
    sequence of vectors, the ``pooler_output`` tokens (PP-FormulaNet: the neck's [B, C, H, W] map, and the projector's
    [B, S, d_model] tokens PPFormulaNetModel.forward hands the decoder, modeling_pp_formulanet.py:1013)."""
    hidden = outputs[0]
    pooled = getattr(outputs, "pooler_output", None)
    if hidden.dim() != 3 and isinstance(pooled, torch.Tensor) and pooled.dim() == 3:
        return int(pooled.shape[1])
    return int(hidden.shape[1])


def probe_encoder_decoder(model: Model, plan: ProbePlan) -> EncoderDecoderRun:
    """Prefill (encoder + decoder prompt), decode ``plan.decode_steps`` steps, compare with one uncached decoder pass."""
    keyword = cache_keyword(model)
    forbidden = special_token_ids(model.config)
    device = next(p.device for p in model.parameters())
    vocab = model.config.get_text_config(decoder=True).vocab_size
    # The encoder reads one token fewer than the decoder prompt, so the two halves' lengths differ at every step.
    encoder_in = encoder_inputs(model, plan.batch_size, max(2, plan.prompt_length - 1), plan.seed, forbidden)
    start = torch.full((plan.batch_size, 1), _decoder_start(model))
    prompt = torch.cat([start, text_ids(plan.batch_size, plan.prompt_length - 1, plan.seed, vocab, forbidden)], dim=1).to(device)
    encoded: dict[str, Any] = {}
    encoder = model.get_encoder()
    alone = set(encoder_in.tensors) <= set(inspect.signature(encoder.forward).parameters)
    # The encoder's mask (Pix2Struct's padded patches) goes to every decoder call, as generate() keeps it.
    mask = {k: v for k, v in encoder_in.tensors.items() if k == "attention_mask" and "input_ids" not in encoder_in.tensors}
    image = bool(set(encoder_in.tensors) & set(IMAGE_INPUTS))
    length = plan.prompt_length + plan.decode_steps
    # A static cell's cross half is sized to the encoder output, as generate() sizes it. An encoder run by the outer
    # forward (below) is measured by one uncached pass before the counted run; otherwise the prefill's own encoder run.
    outer_length = _outer_encoder_length(model, encoder_in.tensors, prompt) if plan.cache == "static" and not alone else None
    calls = []
    hook = encoder.register_forward_hook(lambda *_: calls.append(1))

    def static(encoder_length: int) -> dict[str, Any]:
        return {keyword: _static_cache(model, length, encoder_length)} if plan.cache == "static" else {}

    def prefill() -> Any:
        # As generate() does: the encoder once, then every decoder call reads its output. An encoder over text with
        # the image merged in by the outer model (Florence-2) runs inside the outer forward of the prefill.
        if alone:
            encoded["outputs"] = encoder(**encoder_in.tensors)
            return decoder(prompt, True, **static(attended_length(encoded["outputs"])))
        output = model(**encoder_in.tensors, decoder_input_ids=prompt, use_cache=True, **static(outer_length or 0))
        encoded["outputs"] = BaseModelOutput(last_hidden_state=output.encoder_last_hidden_state)
        return output

    def decoder(ids: torch.Tensor, use_cache: bool, **extra: Any) -> Any:
        return model(encoder_outputs=encoded["outputs"], decoder_input_ids=ids, use_cache=use_cache, **mask, **extra)

    def reference(ids: torch.Tensor) -> Any:
        # The encoder inputs too, as a teacher-forced call passes them: some models build the decoder's causal
        # mask only from them (FSMT); the encoder itself is not run again (its output is given).
        return decoder(ids, False, **({} if image else encoder_in.tensors))

    def step(token: torch.Tensor, cache: Any) -> Any:
        output = decoder(token, True, **{keyword: cache})
        encoded["calls"] = len(calls)  # the cached run only: the reference passes after it are not counted
        return output

    driver = Driver(
        prompt=prompt,
        prefill=prefill,
        step=step,
        reference=reference,
        fresh=lambda ids: decoder(ids, True),
        forbidden=forbidden,
        extra_halves={CROSS_HALF: cross_layers},
    )
    try:
        run = drive(model, plan, driver)
    finally:
        hook.remove()
    return EncoderDecoderRun(run, attended_length(encoded["outputs"]), encoded["calls"], encoder_in.recipe,
                             _generate_inputs(model, encoder_in.tensors, prompt))


def _outer_encoder_length(model: Model, tensors: dict[str, torch.Tensor], prompt: torch.Tensor) -> int:
    """Positions of the encoder output the decoder's cross-attention reads, where only the outer forward runs the encoder."""
    return int(model(**tensors, decoder_input_ids=prompt[:, :1], use_cache=False).encoder_last_hidden_state.shape[1])


def _static_cache(model: Model, length: int, encoder_length: int) -> Any:
    """The two-half static cache generate(cache_implementation="static") builds for an encoder-decoder: a StaticCache of
    ``length`` for the decoder's self-attention and one of the encoder length for its cross-attention
    (generation/utils.py ``_prepare_static_cache``). Cross-attention reads the whole encoder output: its half has no
    sliding layers even where the decoder's self-attention has them, as T5Gemma's own ``_prepare_cache_for_generation``
    builds it (modeling_t5gemma.py:1058-1061)."""
    from transformers import EncoderDecoderCache, StaticCache

    config = model.config.get_text_config(decoder=True)
    cross = copy.deepcopy(config)
    if getattr(cross, "sliding_window", None) is not None:
        cross.sliding_window = None
    if isinstance(getattr(cross, "layer_types", None), list):
        cross.layer_types = ["full_attention"] * len(cross.layer_types)
    return EncoderDecoderCache(StaticCache(config=config, max_cache_len=length),
                               StaticCache(config=cross, max_cache_len=encoder_length))


def _generate_inputs(model: Model, tensors: dict[str, torch.Tensor], prompt: torch.Tensor) -> GenerateInputs:
    """The probe's encoder input and decoder prompt as ``generate()`` takes them, with the decoder start token the
    prompt begins with (a bare config leaves it None; generate() refuses none). A Whisper-style ``generate()`` (it
    checks ``decoder_input_ids`` itself: generation_whisper.py) gets the encoder input only, as users call it, and
    starts from its own decoder start tokens."""
    start = {"decoder_start_token_id": int(prompt[0, 0])}
    if hasattr(type(model), "_check_decoder_input_ids"):
        return GenerateInputs(dict(tensors), 1, start)
    return GenerateInputs({**tensors, "decoder_input_ids": prompt}, prompt.shape[1], start)


def assisted_inputs(model: Model, plan: ProbePlan, length: int) -> AssistedInputs:
    """This family's adapter of the assisted path: one row of encoder input and a decoder prompt of the start token and
    a repetition (for prompt lookup); the reference is one uncached decoder pass. Whisper-style models, whose generate()
    refuses ``decoder_input_ids`` beside an assistant (generation_whisper.py:1692-1697), are given the encoder input
    only, as users call them, and start from their own decoder start token."""
    forbidden = special_token_ids(model.config)
    device = next(p.device for p in model.parameters())
    vocab = model.config.get_text_config(decoder=True).vocab_size
    tensors = encoder_inputs(model, 1, max(2, plan.prompt_length - 1), plan.seed, forbidden).tensors
    start = _decoder_start(model)
    half = text_ids(1, length // 2, plan.seed, vocab, forbidden)
    body = torch.cat([half, half], dim=1)[:, : length - 1]
    prompt = torch.cat([torch.full((1, 1), start), body], dim=1).to(device)
    given = {"decoder_input_ids": prompt}
    if hasattr(type(model), "_check_decoder_input_ids"):
        prompt, given = prompt[:, :1], {}

    def reference(ids: torch.Tensor, positioned: bool) -> torch.Tensor:  # decoder positions follow the decoder ids
        return model(**tensors, decoder_input_ids=ids, use_cache=False).logits

    return AssistedInputs(prompt, {**tensors, **given}, reference, {"decoder_start_token_id": start})
