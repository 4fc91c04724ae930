"""Encoder-decoder cells (text and speech): the encoder runs once, the decoder decodes with a two-half cache.

The prefill feeds the encoder input and the decoder prompt as ``generate()`` does; every decode
step passes the prefill's encoder output and the cache. The reference is ONE uncached decoder pass
over the whole decoder sequence with the same encoder output. The encoder's calls are counted.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers.modeling_outputs import BaseModelOutput

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families import CROSS_HALF
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.geometry import self_attention_geometry
from kvconform.families.inputs import IMAGE_INPUTS, encoder_inputs, special_token_ids, text_ids
from kvconform.probe.assisted import AssistedInputs
from kvconform.probe.cache_io import cross_layers, keep_logits
from kvconform.probe.decode import ProbePlan
from kvconform.probe.forwards import Forwards, fed_back
from kvconform.probe.generate_inputs import GenerateInputs

#: ``(tokens [rows, 1], their position) -> tokens``: ids ``generate()`` forces (``Driver.constrain``).
Constrain = Callable[[torch.Tensor, int], torch.Tensor]
#: ``ids [rows, S] -> the decoder_input_ids the model takes``.
DecoderIds = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class EncoderDecoderRun:
    """The decode run plus what the encoder did."""

    run: FamilyRun
    encoder_length: int
    encoder_calls: int
    recipe: str
    generate_inputs: GenerateInputs
    """The encoder input and decoder prompt as ``generate()`` takes them (the family's adapter of the generate paths)."""


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
    forbidden = special_token_ids(model.config)
    device = next(p.device for p in model.parameters())
    vocab = model.config.get_text_config(decoder=True).vocab_size
    # The encoder reads one token fewer than the decoder prompt, so the two halves' lengths differ at every step.
    encoder_in = encoder_inputs(model, plan.batch_size, max(2, plan.prompt_length - 1), plan.seed, forbidden)
    start = torch.full((plan.batch_size, 1), _decoder_start(model))
    prompt = torch.cat([start, text_ids(plan.batch_size, plan.prompt_length - 1, plan.seed, vocab, forbidden)], dim=1).to(device)
    run, encoder_length, calls = drive_encoder_decoder(model, plan, encoder_in.tensors, prompt, forbidden)
    return EncoderDecoderRun(run, encoder_length, calls, encoder_in.recipe, _generate_inputs(model, encoder_in.tensors, prompt))


def drive_encoder_decoder(model: Model, plan: ProbePlan, tensors: dict[str, torch.Tensor], prompt: torch.Tensor,
                          forbidden: set[int], constrain: Constrain | None = None,
                          decoder_ids: DecoderIds | None = None, code_rows: int = 1) -> tuple[FamilyRun, int, int]:
    """The cached decode of ``prompt`` over the encoder input ``tensors`` against one uncached decoder pass, both cache
    halves snapshotted every step (``constrain``: ids ``generate()`` forces, ``decoder_ids``: the decoder's layout of
    the ids, and ``code_rows`` its rows per cache row, as in ``encoder_decoder_forwards``). Returns the run, the encoder length and the encoder's calls during the
    decode and its reference (the paths after them are not counted)."""
    # Built before the encoder's calls are counted: a static cell of an encoder the outer forward runs measures its length.
    forwards, encoder_length = encoder_decoder_forwards(model, plan, tensors, prompt, decoder_ids, code_rows)
    calls: list[int] = []
    hook = model.get_encoder().register_forward_hook(lambda *_: calls.append(1))
    counted: dict[str, int] = {}

    def decoded() -> None:
        counted["calls"] = len(calls)

    try:
        driver = Driver(forwards, forbidden, extra_halves={CROSS_HALF: cross_layers}, constrain=constrain, after_decode=decoded,
                        geometry=self_attention_geometry(model.config)[0])
        run = drive(model, plan, driver)
    finally:
        hook.remove()
    return run, encoder_length(), counted["calls"]


def encoder_decoder_forwards(model: Model, plan: ProbePlan, tensors: dict[str, torch.Tensor], prompt: torch.Tensor,
                             decoder_ids: DecoderIds | None = None, code_rows: int = 1) -> tuple[Forwards, Callable[[], int]]:
    """The forwards of an encoder-decoder cell, as generate() calls it: the encoder runs once (at the first prefill), and
    every decoder forward, cached or not, reads its output; the cache is generate()'s two halves (a static cell's cross
    half sized to the encoder output). ``decoder_ids`` maps the ``[rows, S]`` ids the decode loop keeps to the layout the
    decoder takes (Dia's codebook channels ``[B, S, K]``), of ``code_rows`` rows per cache row. Returns them and the encoder length (known once the encoder ran)."""
    keyword = cache_keyword(model)
    encoder = model.get_encoder()
    alone = set(tensors) <= set(inspect.signature(encoder.forward).parameters)
    # The encoder's mask (Pix2Struct's padded patches) goes to every decoder call, as generate() keeps it.
    mask = {k: v for k, v in tensors.items() if k == "attention_mask" and "input_ids" not in tensors}
    image = bool(set(tensors) & set(IMAGE_INPUTS))
    encoded: dict[str, Any] = {}
    # A static cell's cross half is sized to the encoder output, as generate() sizes it. An encoder run by the outer
    # forward (below) is measured by one uncached pass before the counted run; otherwise the encoder's own run.
    outer_length = _outer_encoder_length(model, tensors, prompt) if plan.cache == "static" and not alone else None

    def encoder_length() -> int:
        if "outputs" not in encoded and alone:
            encoded["outputs"] = encoder(**tensors)
        return attended_length(encoded["outputs"]) if "outputs" in encoded else outer_length or 0

    def kept(keep: int | None) -> dict[str, int]:
        return keep_logits(model, keep) if keep is not None else {}

    def laid_out(ids: torch.Tensor) -> torch.Tensor:
        return decoder_ids(ids) if decoder_ids is not None else ids

    def decoder(ids: torch.Tensor, use_cache: bool, **extra: Any) -> Any:
        return model(encoder_outputs=encoded["outputs"], decoder_input_ids=laid_out(ids), use_cache=use_cache, **mask, **extra)

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        given = {keyword: cache} if cache is not None else {}
        if "outputs" not in encoded and not alone:
            # An encoder over text with the image merged in by the outer model (Florence-2) runs inside the outer forward.
            output = model(**tensors, decoder_input_ids=laid_out(ids), use_cache=True, **given, **kept(keep))
            encoded["outputs"] = BaseModelOutput(last_hidden_state=output.encoder_last_hidden_state)
            return fed_back(output, cache)
        encoder_length()  # as generate() does: the encoder once, then every decoder call reads its output
        return fed_back(decoder(ids, True, **given, **kept(keep)), cache)

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        return fed_back(decoder(ids, True, **{keyword: cache}, **kept(keep)), cache)

    def reference(ids: torch.Tensor, keep: int | None) -> Any:
        # The encoder inputs too, as a teacher-forced call passes them: some models build the decoder's causal
        # mask only from them (FSMT); the encoder itself is not run again (its output is given).
        encoder_length()
        return decoder(ids, False, **({} if image else {k: v for k, v in tensors.items() if k not in mask}), **kept(keep))

    def make_cache(kind: str, length: int) -> Any:
        return _static_cache(model, length, encoder_length()) if kind == "static" else None

    def default_cache() -> Any:
        from transformers import DynamicCache, EncoderDecoderCache

        # The cross half without sliding layers, as T5Gemma's own _prepare_cache_for_generation builds it (:1058-1061).
        return EncoderDecoderCache(DynamicCache(config=model.config.get_text_config(decoder=True)),
                                   DynamicCache(config=_cross_config(model)))

    forwards = Forwards(model=model, prompt=prompt, start=start, more=more, reference=reference, make_cache=make_cache,
                        default_cache=default_cache, row_inputs=True, code_rows=code_rows)
    return forwards, encoder_length


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
    return EncoderDecoderCache(StaticCache(config=config, max_cache_len=length),
                               StaticCache(config=_cross_config(model), max_cache_len=encoder_length))


def _cross_config(model: Model) -> Any:
    """The decoder config without sliding layers, for the cross-attention half (it reads the whole encoder output)."""
    cross = copy.deepcopy(model.config.get_text_config(decoder=True))
    if getattr(cross, "sliding_window", None) is not None:
        cross.sliding_window = None
    if isinstance(getattr(cross, "layer_types", None), list):
        cross.layer_types = ["full_attention"] * len(cross.layer_types)
    return cross


def _generate_inputs(model: Model, tensors: dict[str, torch.Tensor], prompt: torch.Tensor) -> GenerateInputs:
    """The probe's encoder input and decoder prompt as ``generate()`` takes them, with the decoder start token the
    prompt begins with (a bare config leaves it None; generate() refuses none). A Whisper-style ``generate()`` (it
    checks ``decoder_input_ids`` itself: generation_whisper.py) gets the encoder input only, as users call it, and
    starts from its own decoder start tokens. A call continued from a returned cache gives the encoder input again and
    the returned sequences as the decoder's."""
    start = {"decoder_start_token_id": int(prompt[0, 0])}
    if hasattr(type(model), "_check_decoder_input_ids"):
        return GenerateInputs(dict(tensors), 1, start, sequence_key="decoder_input_ids", carried=tuple(tensors))
    given = GenerateInputs({**tensors, "decoder_input_ids": prompt}, prompt.shape[1], start, sequence_key="decoder_input_ids",
                           carried=tuple(tensors))
    def one_pass(kwargs: dict[str, Any], sequences: torch.Tensor, prompt_length: int) -> torch.Tensor:
        encoder = {key: value for key, value in kwargs.items() if not key.startswith("decoder_")}
        return model(**encoder, decoder_input_ids=sequences, use_cache=False).logits

    audio = next((key for key in ("input_features", "input_values") if set(tensors) == {key}), None)
    if audio is not None and prompt.shape[0] > 1 and "attention_mask" in inspect.signature(model.forward).parameters:
        # a speech encoder's input as its feature extractor pads a batch (zeros, masked; Whisper-style models returned
        # above: theirs pads every clip to 30 s unmasked); judged against the padded batch's own uncached pass. The
        # chunked generate() takes that batch with its mask too, as the feature extractor returns it.
        speech = replace(given, ragged_columns=(0, tensors[audio].shape[1]), ragged_key=audio, pad_side="right",
                         reference_padded=True, one_pass=one_pass)
        return replace(speech, padded=speech.ragged(speech.row_drops(), 0))
    ids, pad = tensors.get("input_ids"), getattr(model.config, "pad_token_id", None)
    if set(tensors) != {"input_ids"} or ids is None or pad is None or ids.shape[0] < 2 or ids.shape[1] <= ENCODER_PADDING:
        return given  # an encoder input of pixels, a config without a pad id, one row: no text batch to pad
    text = replace(given, ragged_columns=(0, ids.shape[1]), pad_side="right", one_pass=one_pass)
    return replace(text, padded=text.ragged([0] * (ids.shape[0] - 1) + [ENCODER_PADDING], int(pad)))


#: Positions the last row of a padded encoder batch leaves to padding (of the encoder input's, one fewer than the prompt).
ENCODER_PADDING = 2


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
