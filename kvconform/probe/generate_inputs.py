"""What a ``generate()`` path is called with: a family adapter's arguments for one prompt.

The generate paths (greedy with and without the cache, beam search) are one code for every family; only what
``generate()`` is given differs: a causal LM's ids, a vision-language prompt with its image, an encoder input and
its decoder prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

#: ``(kwargs, sequences, prompt_length) -> logits`` of one uncached forward (``GenerateInputs.one_pass``).
OnePass = Callable[[dict[str, Any], torch.Tensor, int], torch.Tensor]


@dataclass(frozen=True)
class GenerateInputs:
    """The keyword arguments of ``generate()`` besides its generation config, and how its returned sequences begin."""

    kwargs: dict[str, Any]
    """``input_ids`` and ``attention_mask``, plus the media or the encoder input and ``decoder_input_ids``."""
    prompt_length: int
    """Tokens of each returned sequence before the generated ones (the decoder prompt of an encoder-decoder)."""
    config: dict[str, Any] = field(default_factory=dict)
    """Generation settings the family needs on both runs (``suppress_tokens``: placeholder ids never generated)."""
    sequence_key: str = "input_ids"
    """What a call continued from a returned cache passes the returned sequences as (``decoder_input_ids``)."""
    carried: tuple[str, ...] = ()
    """Arguments a continued call passes again: an encoder-decoder's encoder input (generate() runs the encoder again and
    reads the cross-attention half from the cache), the media of a forward that reads the image at every position
    (IDEFICS). Other decoder-only prompts' media are in the cache and are not given again: 5.x forwards media given to a continued call at its first forward (generation/utils.py,
    ``MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL``), whose ids hold no placeholders (LLaVA raises "Image features and image
    tokens do not match" on every 5.x release; 4.57 passed them at cache position 0 only)."""

    padded: GenerateInputs | None = None
    """The same prompt as a processor pads a batch of unequal rows, where the family has such a form (an encoder-decoder's
    text encoder input: its last row shorter, right-padded, masked; a speech encoder's input: a row's frames or samples
    zero-padded and masked, as the ragged path pads them); the chunked generate() takes it."""
    ragged_columns: tuple[int, int] | None = None
    """The columns of ``ragged_key`` (``[start, end)``) a row of a processor's batch may be shorter in: a decoder
    prompt's text after its media, an encoder's text input, an audio encoder input's frames; the ragged path drops a row's
    last ones. ``None`` where the prompt has no such columns."""
    ragged_key: str = "input_ids"
    """The input whose second dimension a processor pads: ``input_ids``, or an audio encoder's ``input_features``
    (frames) or ``input_values`` (samples), padded with zeros as feature extractors pad them."""
    pad_side: str = "left"
    """Where a processor pads the rows: on the left of a prompt generate() continues, on the right of an encoder's input
    (T5's and BART's tokenizers, every speech feature extractor)."""
    reference_padded: bool = False
    """The ragged path's reference is one uncached pass over the padded batch itself, not each row's own unpadded input:
    an audio encoder's convolutions and normalization read a row's padded frames by design (Speech2Text's second
    convolution reads the first one's output over them, Moonshine's GroupNorm pools over time), so its output moves
    with the padding without any cache; what the cache must do, every decode step reading the cross-attention half under
    the encoder's mask, is what is judged."""
    one_pass: OnePass | None = None
    """ONE uncached forward's logits over ``sequences`` (a prompt and its generated tokens, as generate() returns them),
    given a call's ``kwargs`` (an encoder's input) and its prompt length: the adapter's media, token types and the like
    (the ragged path's reference); ``None`` where the family gives none."""

    def continued(self, sequences: torch.Tensor) -> dict[str, Any]:
        """The arguments of a ``generate()`` call continued from the cache a call on these inputs returned ``sequences`` with."""
        kwargs = {key: self.kwargs[key] for key in self.carried}
        kwargs[self.sequence_key] = sequences
        if self.sequence_key == "input_ids":
            kwargs["attention_mask"] = torch.ones_like(sequences)
        return kwargs

    def left_padded(self, columns: int, pad: int) -> GenerateInputs | None:
        """The same prompt with ``columns`` masked pad columns on the left, as a tokenizer pads a batch to a longer row or
        to ``pad_to_multiple_of``: the ids get ``pad``, the attention mask 0, and every other per-position input (a
        tensor whose first two dimensions are the ids': token types, an image's position mask) 0. ``None`` for a prompt
        continued as ``decoder_input_ids`` (an encoder-decoder's decoder prompt is not padded so) or without ids."""
        ids = self._ids()
        if ids is None:
            return None
        drops = [0] * ids.shape[0]

        def rows(key: str, value: torch.Tensor) -> torch.Tensor:
            return _rows_padded(value, drops, columns, _fill(key, pad), ids.shape[1])

        return replace(self, kwargs=_per_position(self.kwargs, ids, rows),
                       prompt_length=self.prompt_length + columns, padded=None, ragged_columns=None)

    def shortened(self, drop: int) -> GenerateInputs:
        """Every row's text ``drop`` tokens shorter (the last ``drop`` of ``ragged_columns`` left out), unpadded."""
        ids = self.kwargs.get("input_ids")
        if drop == 0 or not isinstance(ids, torch.Tensor) or self.ragged_columns is None:
            return self
        end = self.ragged_columns[1]
        kwargs = _per_position(self.kwargs, ids, lambda key, value: torch.cat([value[:, : end - drop], value[:, end:]], dim=1))
        shorter = drop if self.sequence_key == "input_ids" else 0  # an encoder's input: the decoder prompt stays
        return replace(self, kwargs=kwargs, prompt_length=self.prompt_length - shorter, padded=None,
                       ragged_columns=(self.ragged_columns[0], end - drop))

    def row_drops(self) -> list[int]:
        """The columns each row of a ragged batch lacks: row ``r`` ``r`` tokens of text (all but one at most); an audio
        input's last row half its frames or samples (enough for an encoder that subsamples its mask by hundreds of
        samples, Moonshine's 384, to mask whole positions), the rows between evenly fewer."""
        values = self.kwargs.get(self.ragged_key)
        if not isinstance(values, torch.Tensor) or self.ragged_columns is None:
            return []
        rows, width = values.shape[0], self.ragged_columns[1] - self.ragged_columns[0]
        if self.ragged_key == "input_ids":
            return [min(row, width - 1) for row in range(rows)]
        return [row * width // (2 * max(1, rows - 1)) for row in range(rows)]

    def ragged(self, drops: list[int], pad: int) -> GenerateInputs | None:
        """A batch of unequal rows as a processor pads it: row ``r`` is ``shortened(drops[r])``'s row with ``drops[r]``
        masked pad columns on ``pad_side`` (the ids ``pad``, the attention mask, which a prompt without one gets, and
        every other per-position input 0, audio features and samples too). ``None`` where the prompt has no columns a
        row could lack."""
        values = self.kwargs.get(self.ragged_key)
        if not isinstance(values, torch.Tensor) or self.ragged_columns is None:
            return None
        end = self.ragged_columns[1]

        def rows(key: str, value: torch.Tensor) -> torch.Tensor:
            return _rows_padded(value, drops, 0, _fill(key, pad), end, self.pad_side)

        kwargs = {"attention_mask": torch.ones(values.shape[:2], dtype=torch.long, device=values.device), **self.kwargs}
        return replace(self, kwargs=_per_position(kwargs, values, rows), padded=None, ragged_columns=None)

    def _ids(self) -> torch.Tensor | None:
        ids = self.kwargs.get("input_ids")
        if self.sequence_key != "input_ids" or not isinstance(ids, torch.Tensor):  # an audio-only or encoder-decoder prompt
            return None
        return ids

    @classmethod
    def of_ids(cls, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> GenerateInputs:
        """A causal LM's prompt: the ids and their mask (all ones unless given)."""
        mask = torch.ones_like(ids) if attention_mask is None else attention_mask
        return cls({"input_ids": ids, "attention_mask": mask}, ids.shape[1])


def pad_id(model: Any, inputs: GenerateInputs) -> int:
    """The text config's pad id, as a tokenizer pads; where the shrunk config gives it an id the prompt holds (a
    placeholder: sub-configs' special ids are moved into the small vocabulary one config at a time), the lowest id the
    prompt does not hold."""
    given = getattr(model.config.get_text_config(decoder=True), "pad_token_id", None)
    ids = inputs.kwargs.get("input_ids")
    held = set(ids.flatten().tolist()) if isinstance(ids, torch.Tensor) else set()
    if isinstance(given, int) and given not in held:
        return given
    return next(i for i in range(len(held) + 1) if i not in held)


def _fill(key: str, pad: int) -> int:
    """What a pad column holds: ``pad`` in the ids, 0 in the attention mask and every other per-position input (audio
    features and samples: feature extractors' ``padding_value``)."""
    return pad if key == "input_ids" else 0


def _per_position(kwargs: dict[str, Any], ids: torch.Tensor,
                  change: Callable[[str, torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    """``kwargs`` with ``change(key, value)`` applied to each per-position input of ``ids`` (``input_ids``, or an audio
    input): a tensor whose first two dimensions are the ids' (the ids, the attention mask, token types, an image's
    position mask), never a decoder's."""
    return {key: change(key, value) if isinstance(value, torch.Tensor) and value.dim() >= 2
            and value.shape[:2] == ids.shape[:2] and not key.startswith("decoder_") else value for key, value in kwargs.items()}


def _rows_padded(value: torch.Tensor, drops: list[int], columns: int, fill: int, end: int, side: str = "left") -> torch.Tensor:
    """Each row ``r`` of ``value`` without its ``drops[r]`` positions before column ``end``, with ``columns + drops[r]``
    positions of ``fill`` on ``side`` (every row as wide as ``value`` plus ``columns``)."""
    rows = []
    for row, drop in zip(value, drops, strict=True):
        pad = torch.full((columns + drop, *row.shape[1:]), fill, dtype=row.dtype, device=row.device)
        kept = [row[: end - drop], row[end:]]
        rows.append(torch.cat([pad, *kept] if side == "left" else [*kept, pad]))
    return torch.stack(rows)
