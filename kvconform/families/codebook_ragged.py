"""The ragged path of a codebook decoder conditioned by a text encoder (MusicGen, Dia), through ``generate()``.

Users batch descriptions of unequal length: the processors pad the text on the right and mask it (MusicGen's T5
tokenizer; Dia's ``text_kwargs`` ``padding_side="right"``, processing_dia.py:70-75 in 5.24.0, pad id 0,
tokenization_dia.py:57), and transformers' own MusicGen and Dia integration tests generate from such ``padding=True``
batches. Row ``r`` of the cell's text is ``RAGGED_DROP × r`` tokens shorter, padded and masked; the cached greedy
``generate()`` over the batch, with the cell's settings (MusicGen's published guidance doubles the rows through the
cache, the mask's unconditional half zero, modeling_musicgen.py:1724-1727), is compared step by step, codebook head
by head, with ONE uncached ``generate()`` of the row's own unpadded text alone. ``get_seq_length()`` is read after
every decoder forward, the layers of the cache it returns after the last.
"""

from __future__ import annotations

from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families.codebook import conditioning_config, score_rows_delta
from kvconform.probe.cache_io import returned_cache, seq_length
from kvconform.probe.variants import PathNotApplicable, PathRecord, failed_path, summarize

#: Text tokens each later row lacks (right-padded): row ``r`` is ``RAGGED_DROP × r`` shorter, at least one token kept.
RAGGED_DROP = 2
#: The codebook decoders whose text conditioning a processor pads in a batch (an encoder input, masked in cross-attention).
PADDED_TEXT_TYPES = frozenset({"musicgen", "dia"})
#: Why the other codebook decoders run no ragged batch here.
NOT_PADDED = ("the ragged batch runs where the text conditioning is an encoder input a processor right-pads and masks "
              f"({', '.join(sorted(PADDED_TEXT_TYPES))}); this model's text is part of its decoder's own sequence "
              "(MusicGen Melody prepends it to the codes, whose positions then count a padded row's pad columns: arange + "
              "cache length, modeling_musicgen_melody.py:150 in 5.24.0, so a padded row cannot equal its own run; CSM, Higgs Audio, "
              "the talkers decode it as their prompt) or reaches a stage of its own (Bark, SeamlessM4T's text-to-unit "
              "model): not built here")


def run_codebook_ragged(model: Model, text: torch.Tensor, settings: dict[str, Any], codebooks: int) -> PathRecord:
    """The text batch ``text`` ``[B, T]`` made ragged, through the cached ``generate(**settings)``, against each row's own
    uncached ``generate()``; ``codebooks``: the score rows per batch row."""
    try:
        if model.config.model_type not in PADDED_TEXT_TYPES:
            raise PathNotApplicable(NOT_PADDED)
        if text.shape[0] < 2:
            raise PathNotApplicable("one text row: nothing to pad")
        with torch.inference_mode():
            return _ragged(model, text, settings, codebooks)
    except Exception as exc:  # noqa: BLE001 - a crash of the path fails the ragged check only
        return failed_path("ragged", exc)


def _ragged(model: Model, text: torch.Tensor, settings: dict[str, Any], codebooks: int) -> PathRecord:
    drops = [min(RAGGED_DROP * row, text.shape[1] - 1) for row in range(text.shape[0])]
    pad = _text_pad_id(model)
    padded, mask = text.clone(), torch.ones_like(text)
    for row, drop in enumerate(drops):
        if drop:
            padded[row, -drop:], mask[row, -drop:] = pad, 0
    decoder = model.get_decoder()
    keyword, trace = cache_keyword(decoder), []

    def seen(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        ids, positions = kwargs.get("input_ids", args[0] if args else None), kwargs.get("cache_position")
        cache = returned_cache(output, kwargs.get(keyword))
        written = (int(positions.reshape(-1)[0]), positions.numel()) if isinstance(positions, torch.Tensor) else None
        trace.append((cache, ids.shape[1] if isinstance(ids, torch.Tensor) else None, seq_length(cache), written))

    hook = decoder.register_forward_hook(seen, with_kwargs=True)
    try:
        output = model.generate(input_ids=padded, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **settings)
    finally:
        hook.remove()
    # The forwards that wrote the cache generate() returns, a forward that writes the positions the one before it wrote
    # counted once: generate() makes its first decoder forward twice in MusicGen's 5.24 (the first one's cache left
    # unused: 9 forwards for 8 tokens, with and without the cache alike) and Dia's 5.0 static cells (position 0 written
    # twice with the same frame).
    final = returned_cache(output)
    kept = [entry for entry in trace if entry[0] is final]
    kept = [entry for k, entry in enumerate(kept) if not (k and entry[3] is not None and entry[3] == kept[k - 1][3])]
    fed = [width for _, width, _, _ in kept]
    lengths = [length for _, _, length, _ in kept]
    first = fed[0] if fed and fed[0] is not None else 1
    uncached = {key: value for key, value in settings.items() if key != "cache_implementation"}
    steps = len(output.scores)
    deltas = [torch.zeros(len(drops)) for _ in range(steps)]
    scale = 0.0
    for row, drop in enumerate(drops):
        own = model.generate(input_ids=text[row : row + 1, : text.shape[1] - drop], use_cache=False,
                             return_dict_in_generate=True, output_scores=True, **uncached)
        heads = slice(row * codebooks, (row + 1) * codebooks)
        # a row's own run stops at its end-of-audio token, the batch's when every row has (its later steps are pad)
        for k, (cached, reference) in enumerate(zip(output.scores, own.scores, strict=False)):
            deltas[k][row] = float(score_rows_delta(cached[heads], reference).max())
            scale = max(scale, float(torch.nan_to_num(reference.float(), posinf=0.0, neginf=0.0).abs().max()))
    guided = (settings.get("guidance_scale") or model.generation_config.guidance_scale or 1) > 1
    description = (f"the text conditioning batched with rows {drops} tokens shorter, right-padded (id {pad}) and masked, "
                   f"through generate(){' with classifier-free guidance (the cache holds 2 rows a prompt)' if guided else ''}")
    record = summarize("ragged", deltas, scale, description, lengths, first, final)
    record.reference = "one uncached generate() of each row's own unpadded text"
    record.batch = len(drops) * (2 if guided else 1)
    if "cache_implementation" in settings:  # generate() sizes its static cache for the whole call: the last token is not fed
        record.max_cache_len = first + steps - 1
    return record


def _text_pad_id(model: Model) -> int:
    """The text encoder config's pad id (T5's 0), else 0 (Dia's tokenizer pads with id 0, tokenization_dia.py:57)."""
    pad = getattr(conditioning_config(model.config), "pad_token_id", None)
    return pad if isinstance(pad, int) else 0
