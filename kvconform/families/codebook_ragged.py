"""The ragged path of a codebook decoder, through ``generate()``: its text batched with shorter rows, padded as its
processor pads them.

Users batch texts of unequal length, and each processor pads them its own way:

- a text encoder's conditioning (MusicGen, Dia) on the right, masked: MusicGen's T5 tokenizer; Dia's ``text_kwargs``
  ``padding_side="right"``, processing_dia.py:70-75 in 5.24.0, pad id 0, tokenization_dia.py:57; transformers' own
  MusicGen and Dia integration tests generate from such ``padding=True`` batches;
- a decoder's own prompt (Higgs Audio) on the left: ``HiggsAudioV2Processor``'s ``padding_side="left"``
  (processing_higgs_audio_v2.py:73), the config's ``pad_token_id``; a row lacks text before its reference audio, so
  every row keeps its audio frames (``audio_input_ids`` and their mask are given whole to the batch, row by row to each
  row's own run).

Row ``r`` of the cell's text is ``RAGGED_DROP × r`` tokens shorter, padded and masked; the cached greedy ``generate()``
over the batch, with the cell's settings (MusicGen's published guidance doubles the rows through the cache, the mask's
unconditional half zero, modeling_musicgen.py:1724-1727), is compared step by step, codebook head by head, with ONE
uncached ``generate()`` of the row's own unpadded text alone. ``get_seq_length()`` is read after every decoder
forward, the layers of the cache it returns after the last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families.codebook import conditioning_config, score_rows_delta
from kvconform.probe.cache_io import returned_cache, seq_length
from kvconform.probe.variants import PathNotApplicable, PathRecord, failed_path, summarize

#: Text tokens each later row lacks: row ``r`` is ``RAGGED_DROP × r`` shorter, at least one token kept.
RAGGED_DROP = 2
#: The codebook decoders whose processor pads a text batch, and on which side (``TextBatch.side``).
PADDED_TEXT_TYPES = {"musicgen": "right", "dia": "right", "higgs_audio_v2": "left"}
#: Why the other codebook decoders run no ragged batch here.
NOT_PADDED = ("the ragged batch runs where a processor pads a batch of texts: the text encoder's conditioning on the "
              "right (dia, musicgen), Higgs Audio's prompt on the left; this model's text is part of its decoder's own "
              "sequence (MusicGen Melody prepends it to the codes, whose positions then count a padded row's pad columns: arange + "
              "cache length, modeling_musicgen_melody.py:150 in 5.24.0, so a padded row cannot equal its own run; CSM and "
              "the talkers decode it as their prompt) or reaches a stage of its own (Bark, SeamlessM4T's text-to-unit "
              "model): not built here")


@dataclass(frozen=True)
class TextBatch:
    """A codebook decoder's text batch as ``generate()`` takes it, and what a shorter row may lack."""

    ids: torch.Tensor
    """``[B, T]`` text ids, every row full."""
    droppable: int
    """Tokens a row may lack: from its end (right padding), or from its start (left padding: the text before its audio)."""
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    """Per-row inputs besides the ids (Higgs Audio's audio frames and their mask): whole to the batch, row by row to
    each row's own run."""


def run_codebook_ragged(model: Model, text: TextBatch, settings: dict[str, Any]) -> PathRecord:
    """The text batch made ragged, through the cached ``generate(**settings)``, against each row's own uncached
    ``generate()``."""
    try:
        if model.config.model_type not in PADDED_TEXT_TYPES:
            raise PathNotApplicable(NOT_PADDED)
        if text.ids.shape[0] < 2:
            raise PathNotApplicable("one text row: nothing to pad")
        with torch.inference_mode():
            return _ragged(model, text, settings, PADDED_TEXT_TYPES[model.config.model_type])
    except Exception as exc:  # noqa: BLE001 - a crash of the path fails the ragged check only
        return failed_path("ragged", exc)


def _fed_width(args: Any, kwargs: dict[str, Any]) -> int | None:
    """Positions a decoder forward was fed: its ids, embeddings, or (Higgs Audio's decode steps) audio frames."""
    for given in (kwargs.get("input_ids", args[0] if args else None), kwargs.get("inputs_embeds"), kwargs.get("audio_input_ids")):
        if isinstance(given, torch.Tensor):
            return given.shape[1]
    return None


def _ragged(model: Model, text: TextBatch, settings: dict[str, Any], side: str) -> PathRecord:
    ids = text.ids
    drops = [min(RAGGED_DROP * row, text.droppable) for row in range(ids.shape[0])]
    pad = _text_pad_id(model)
    padded, mask = ids.clone(), torch.ones_like(ids)
    for row, drop in enumerate(drops):
        if drop and side == "right":
            padded[row, -drop:], mask[row, -drop:] = pad, 0
        elif drop:
            padded[row, :drop], mask[row, :drop] = pad, 0
    decoder = model.get_decoder()
    keyword, trace = cache_keyword(decoder), []

    def seen(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        positions = kwargs.get("cache_position")
        cache = returned_cache(output, kwargs.get(keyword))
        written = (int(positions.reshape(-1)[0]), positions.numel()) if isinstance(positions, torch.Tensor) else None
        trace.append((cache, _fed_width(args, kwargs), seq_length(cache), written))

    hook = decoder.register_forward_hook(seen, with_kwargs=True)
    try:
        output = model.generate(input_ids=padded, attention_mask=mask, return_dict_in_generate=True, output_scores=True,
                                **text.inputs, **settings)
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
        own_ids = ids[row : row + 1, : ids.shape[1] - drop] if side == "right" else ids[row : row + 1, drop:]
        own = model.generate(input_ids=own_ids, use_cache=False, return_dict_in_generate=True, output_scores=True,
                             **{name: value[row : row + 1] for name, value in text.inputs.items()}, **uncached)
        # a row's own run stops at its end-of-audio token, the batch's when every row has (its later steps are pad);
        # scores are [B * K, V] (MusicGen, Dia) or [B, K, V] (Higgs Audio): the row's K codebook heads either way
        for k, (cached, reference) in enumerate(zip(output.scores, own.scores, strict=False)):
            heads = cached.reshape(len(drops), -1, cached.shape[-1])[row]
            deltas[k][row] = float(score_rows_delta(heads, reference.reshape(-1, reference.shape[-1])).max())
            scale = max(scale, float(torch.nan_to_num(reference.float(), posinf=0.0, neginf=0.0).abs().max()))
    guided = (settings.get("guidance_scale") or model.generation_config.guidance_scale or 1) > 1
    what = "the text conditioning" if side == "right" else "the prompt's text before its audio"
    description = (f"{what} batched with rows {drops} tokens shorter, {side}-padded (id {pad}) and masked, through "
                   f"generate(){' with classifier-free guidance (the cache holds 2 rows a prompt)' if guided else ''}")
    record = summarize("ragged", deltas, scale, description, lengths, first, final)
    record.reference = "one uncached generate() of each row's own unpadded text"
    record.batch = len(drops) * (2 if guided else 1)
    if "cache_implementation" in settings:  # generate() sizes its static cache for the whole call: the last token is not fed
        record.max_cache_len = first + steps - 1
    return record


def _text_pad_id(model: Model) -> int:
    """The text's config's pad id (MusicGen's T5: 0; Higgs Audio's own), else 0 (Dia's tokenizer pads with id 0,
    tokenization_dia.py:57)."""
    pad = getattr(conditioning_config(model.config), "pad_token_id", None)
    return pad if isinstance(pad, int) else 0
