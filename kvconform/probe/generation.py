"""``generate()`` paths whose cache operations differ from the greedy decode loop.

- beam search: the cache is expanded to ``batch × beams`` before the prefill and reordered with
  ``reorder_cache(beam_idx)`` after every step; cached and uncached runs must pick the same beams
  with the same scores. A quanto/HQQ cache is compared with the same search through its residual design
  (``int_design.design_cache``, the backend's own rounding): its K/V are not full precision by design, while
  every reorder, deferred reorder and flush of the real layers has its one right result.
- a batched, left-padded greedy ``generate()``: cached and uncached runs must pick the same tokens.

Both run with the cell's cache through ``cache_implementation`` (what users pass to ``generate()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.build.support import int_cache_config
from kvconform.compat import cache_keyword
from kvconform.matrix import INT_QUANTIZED
from kvconform.probe.cache_io import cache_implementation, fixed_length_config, input_device, make_prompt
from kvconform.probe.decode import GenerateRecord, run_generate
from kvconform.probe.generate_inputs import GenerateInputs
from kvconform.probe.int_design import design_cache

#: Beams in the beam-search check: enough that reordering moves rows between beams.
NUM_BEAMS = 3
#: What generate() raises for a model whose cache cannot be reordered (generation/utils.py, beam search).
CANNOT_REORDER = "cannot use beam search with a cache currently, as the cache cannot be reordered"
#: What a model's own generate() raises when it implements greedy search and sampling only
#: (musicgen: modeling_musicgen.py:1080, modeling_musicgen_melody.py:1071).
GREEDY_OR_SAMPLING_ONLY = "should be one of greedy or sampling"
#: transformers' own refusals of beam search: the check is not applicable, in the refusal's words.
REFUSALS = (CANNOT_REORDER, GREEDY_OR_SAMPLING_ONLY)


def left_padded(prompt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of lengths P, P-1, … (at least 2) left-padded with id 0, and their attention mask."""
    batch, width = prompt.shape
    mask = torch.zeros_like(prompt)
    for row in range(batch):
        mask[row, width - max(2, width - row) :] = 1
    return torch.where(mask.bool(), prompt, torch.zeros_like(prompt)), mask


def _prompt(model: Model, plan: Any) -> torch.Tensor:
    vocab = model.config.get_text_config(decoder=True).vocab_size
    return make_prompt(plan.batch_size, plan.prompt_length, plan.seed, vocab, input_device(model))


@torch.inference_mode()
def run_padded_generate(model: Model, plan: Any) -> GenerateRecord:
    """Greedy ``generate()`` on a left-padded batch, with and without the cell's cache."""
    padded, mask = left_padded(_prompt(model, plan))
    return run_generate(model, GenerateInputs.of_ids(padded, mask), plan.decode_steps, plan.cache)


@dataclass
class BeamRecord:
    """Beam search with and without the cache: the returned beams and their scores."""

    cached_tokens: list[list[int]]
    uncached_tokens: list[list[int]]
    cached_scores: list[float]
    uncached_scores: list[float]
    first_divergence: int | None
    """First generated position where a returned beam differs, or ``None``."""
    num_beams: int = NUM_BEAMS
    error: str | None = None
    not_applicable: str | None = None
    """Set when generate() refuses beam search with this model's cache (its own words)."""
    reference: str = "uncached"
    """What the cached beams are compared with: the ``uncached`` run, or the cache's residual ``design``."""

    @property
    def max_score_delta(self) -> float:
        return max((abs(a - b) for a, b in zip(self.cached_scores, self.uncached_scores, strict=False)), default=0.0)


@torch.inference_mode()
def run_beam(model: Model, plan: Any, inputs: GenerateInputs | None = None) -> BeamRecord:
    """Beam search over the probe's prompt (``inputs``: a family adapter's), with and without the cell's cache.

    Like the greedy generate() path, it starts from the model's own generation config (its decoder start token
    and the like), which a model whose generate() does not merge it in (musicgen) would otherwise never see.
    """

    inputs = inputs if inputs is not None else GenerateInputs.of_ids(_prompt(model, plan))
    design = plan.cache in INT_QUANTIZED
    runs = {}
    try:
        for use_cache in (True, False):
            config = fixed_length_config(
                model, plan.decode_steps, use_cache or design, num_beams=NUM_BEAMS, num_return_sequences=NUM_BEAMS,
                early_stopping=False, length_penalty=1.0, output_scores=True, return_dict_in_generate=True, **inputs.config,
                **(cache_implementation(plan.cache, model.config) if use_cache else {}),
            )
            reference = {} if use_cache or not design else {cache_keyword(model): _design(model, plan.cache)}
            runs[use_cache] = model.generate(**inputs.kwargs, generation_config=config, **reference)
    except ValueError as exc:
        if any(refusal in str(exc) for refusal in REFUSALS):  # transformers' own refusal of beam search for this model
            return BeamRecord([], [], [], [], None, not_applicable=f"generate() refuses: {exc}"[:500])
        return BeamRecord([], [], [], [], None, error=f"{type(exc).__name__}: {exc}"[:500])
    except Exception as exc:  # noqa: BLE001 - a crash fails the beam check only
        return BeamRecord([], [], [], [], None, error=f"{type(exc).__name__}: {exc}"[:500])
    new = inputs.prompt_length
    cached, uncached = runs[True].sequences[:, new:], runs[False].sequences[:, new:]
    differs = (cached != uncached).any(dim=0).nonzero()
    return BeamRecord(
        cached_tokens=cached.tolist(), uncached_tokens=uncached.tolist(),
        cached_scores=runs[True].sequences_scores.float().tolist(),
        uncached_scores=runs[False].sequences_scores.float().tolist(),
        first_divergence=int(differs[0]) if len(differs) else None, reference="design" if design else "uncached",
    )


def _design(model: Model, cache: str) -> Any:
    """An empty residual-design cache of the integer-quantized kind ``cache`` (the beam search's reference)."""
    return design_cache(model, int_cache_config(model.config, cache))
