"""What a ``generate()`` path is called with: a family adapter's arguments for one prompt.

The generate paths (greedy with and without the cache, beam search) are one code for every family; only what
``generate()`` is given differs: a causal LM's ids, a vision-language prompt with its image, an encoder input and
its decoder prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

    @classmethod
    def of_ids(cls, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> GenerateInputs:
        """A causal LM's prompt: the ids and their mask (all ones unless given)."""
        mask = torch.ones_like(ids) if attention_mask is None else attention_mask
        return cls({"input_ids": ids, "attention_mask": mask}, ids.shape[1])
