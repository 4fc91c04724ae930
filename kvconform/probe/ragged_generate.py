"""The ragged path of a family cell, through ``generate()`` as users batch prompts of unequal length.

A processor pads a batch of unequal rows and masks the pad columns: a vision- or audio-language prompt on the left (row
``r`` ``r`` tokens shorter in its text after the media, the media whole), an encoder-decoder's text input on the right,
as its tokenizer pads it, a speech encoder's audio input on the right with zeros, as its feature extractor pads it
(``GenerateInputs.ragged``). The cached greedy ``generate()`` over that batch is compared, row by row and step by step,
with ONE uncached pass (the adapter's ``one_pass``: its media, token types, an encoder input) over the row's own
unpadded prompt and the tokens the batch generated for it, or, for an audio input, over the padded batch itself
(``GenerateInputs.reference_padded``: an audio encoder is not padding-invariant by design). ``get_seq_length()`` is read
after every forward of the cached run, and the layers of the cache it returns after the last, as the causal ragged path
reads its own.
"""

from __future__ import annotations

from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.build.synthetic import padding_rows_drawn
from kvconform.compat import cache_keyword
from kvconform.probe.cache_io import cache_implementation, fixed_length_config, returned_cache, seq_length
from kvconform.probe.generate_inputs import GenerateInputs, pad_id
from kvconform.probe.variants import PathNotApplicable, PathRecord, failed_path, row_delta, summarize


def run_ragged_generate(model: Model, decoder: Model, inputs: GenerateInputs, plan: Any) -> PathRecord:
    """The ragged batch of ``inputs`` through ``generate()`` with the plan's cache, against one uncached pass per row (its
    own unpadded input, or the padded batch's: ``GenerateInputs.reference_padded``); ``decoder`` is the module generate()
    runs a forward of per step (an inner language model's, BLIP-2).
    Zero pad-embedding rows hold noise meanwhile, as on the causal ragged path (``padding_rows_drawn``)."""
    try:
        with torch.inference_mode(), padding_rows_drawn(model, plan.seed):
            return _ragged(model, decoder, inputs, plan.decode_steps, plan.cache)
    except Exception as exc:  # noqa: BLE001 - a crash of the path fails the ragged check only
        return failed_path("ragged", exc)


def _ragged(model: Model, decoder: Model, inputs: GenerateInputs, steps: int, cache: str) -> PathRecord:
    drops, one_pass = inputs.row_drops(), inputs.one_pass
    if len(drops) < 2 or one_pass is None or drops[-1] == 0:
        raise PathNotApplicable("the cell's generate() inputs hold nothing a processor pads in a batch of unequal rows (an "
                                "encoder input of pixels, Whisper's features, which its feature extractor pads to 30 s "
                                "unmasked, a streaming prompt whose every position carries the media, a config without a "
                                "pad id, or one row)")
    padded = inputs.ragged(drops, pad_id(model, inputs))
    assert padded is not None  # a prompt with columns a row may lack
    config = fixed_length_config(model, steps, True, output_logits=True, return_dict_in_generate=True, **inputs.config,
                                 **cache_implementation(cache, model.config))
    keyword, lengths = cache_keyword(decoder), []

    def seen(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        lengths.append(seq_length(returned_cache(output, kwargs.get(keyword))))

    hook = decoder.register_forward_hook(seen, with_kwargs=True)
    try:
        output = model.generate(**padded.kwargs, generation_config=config)
    finally:
        hook.remove()
    logits = list(output.logits)
    steps = len(logits)
    deltas = [torch.zeros(len(drops), device=step.device) for step in logits]
    scale = 0.0
    batch = one_pass(padded.kwargs, output.sequences, padded.prompt_length) if inputs.reference_padded else None
    for row, drop in enumerate(drops):
        if batch is not None:
            reference = batch[row, -steps - 1 : -1]
        else:
            own = inputs.shortened(drop)
            # the row's own sequence: without its pad columns where the prompt is the sequence (left-padded); every row of
            # the forward carries it (only this row is compared), so the batch's media stay as given
            sequence = output.sequences[row, drop:] if inputs.sequence_key == "input_ids" else output.sequences[row]
            reference = one_pass(own.kwargs, sequence.expand(len(drops), -1), own.prompt_length)[row, -steps - 1 : -1]
        scale = max(scale, float(torch.nan_to_num(reference.float()).abs().max()))
        for k, cached in enumerate(logits):
            deltas[k][row] = row_delta(cached[row : row + 1], reference[k : k + 1])[0]
    description = f"{_what(inputs)} batched with rows {drops} {_unit(inputs.ragged_key)} shorter{_after(inputs)}, " \
                  f"{inputs.pad_side}-padded and masked, through generate()"
    record = summarize("ragged", deltas, scale, description, lengths, padded.prompt_length, returned_cache(output))
    record.reference = ("one uncached pass over the padded batch and each row's tokens" if inputs.reference_padded
                        else "one uncached pass over each row's own unpadded prompt and tokens")
    record.fed = output.sequences[:, -steps:].tolist()
    if cache == "static":  # generate() sizes its static cache for the whole call: the last token is not fed
        record.max_cache_len = padded.prompt_length + steps - 1
    return record


def _what(inputs: GenerateInputs) -> str:
    """The input a row of the batch is shorter in, in words."""
    if inputs.sequence_key == "input_ids":
        return "the cell's prompt"
    return "the encoder's text input" if inputs.ragged_key == "input_ids" else f"the encoder's audio input ({inputs.ragged_key})"


def _unit(key: str) -> str:
    """What one column of ``key`` is."""
    return {"input_ids": "tokens", "input_values": "samples"}.get(key, "frames")


def _after(inputs: GenerateInputs) -> str:
    """Where the dropped columns are, when not at the start of the input."""
    return " after the media" if inputs.ragged_columns is not None and inputs.ragged_columns[0] > 0 else ""
