"""What a ``generate()`` path is called with: a family adapter's arguments for one prompt.

The generate paths (greedy with and without the cache, beam search) are one code for every family; only what
``generate()`` is given differs: a causal LM's ids, a vision-language prompt with its image, an encoder input and
its decoder prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch


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
    """The same prompt as a tokenizer pads a batch of unequal rows, where the family has such a form (an encoder-decoder's
    text encoder input: its last row shorter, right-padded, masked); the chunked generate() takes it."""

    def continued(self, sequences: torch.Tensor) -> dict[str, Any]:
        """The arguments of a ``generate()`` call continued from the cache a call on these inputs returned ``sequences`` with."""
        kwargs = {key: self.kwargs[key] for key in self.carried}
        kwargs[self.sequence_key] = sequences
        if self.sequence_key == "input_ids":
            kwargs["attention_mask"] = torch.ones_like(sequences)
        return kwargs

    def left_padded(self, columns: int, pad_id: int) -> GenerateInputs | None:
        """The same prompt with ``columns`` masked pad columns on the left, as a tokenizer pads a batch to a longer row or
        to ``pad_to_multiple_of``: the ids get ``pad_id``, the attention mask 0, and every other per-position input (a
        tensor whose first two dimensions are the ids': token types, an image's position mask) 0. ``None`` for a prompt
        continued as ``decoder_input_ids`` (an encoder-decoder's decoder prompt is not padded so) or without ids."""
        ids = self.kwargs.get("input_ids")
        if self.sequence_key != "input_ids" or not isinstance(ids, torch.Tensor):  # an audio-only or encoder-decoder prompt
            return None

        def padded(key: str, value: Any) -> Any:
            if not (isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == ids.shape):
                return value
            fill = pad_id if key == "input_ids" else 0
            return torch.cat([torch.full((value.shape[0], columns, *value.shape[2:]), fill, dtype=value.dtype,
                                         device=value.device), value], dim=1)

        return replace(self, kwargs={key: padded(key, value) for key, value in self.kwargs.items()},
                       prompt_length=self.prompt_length + columns, padded=None)

    @classmethod
    def of_ids(cls, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> GenerateInputs:
        """A causal LM's prompt: the ids and their mask (all ones unless given)."""
        mask = torch.ones_like(ids) if attention_mask is None else attention_mask
        return cls({"input_ids": ids, "attention_mask": mask}, ids.shape[1])
