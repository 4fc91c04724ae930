"""Extra cache paths, each compared with an uncached reference: ragged batches and prefix reuse.

- ragged: rows of different lengths, left-padded with an attention mask; every row's cached logits
  must match that row's own unpadded uncached pass.
- prefix reuse: a prefilled prefix cache is copied and continued (a multi-token extend, then decode);
  the result must match the uncached reference exactly as a fresh run does, the extended copy must hold what
  one prefill of the same tokens holds (K/V and conv/recurrent states), and the original must be left as it
  was: extended again by the same tokens it gives the copy's logits (a copy that shares a state with it, in the
  cache or on the model's modules, fails here).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.build.synthetic import padding_rows_drawn
from kvconform.compat import all_linear, generation_positions, mask_builder_inputs
from kvconform.probe.cache_api import ApiRecord
from kvconform.probe.cache_io import (
    forward_keeping_cache,
    input_device,
    keep_logits,
    make_prompt,
    new_cache,
    seq_length,
)
from kvconform.probe.cache_state import StateComparison, cache_tensors, compare_states, snapshot
from kvconform.probe.forwards import Forwards
from kvconform.probe.layer_state import LayerState, snapshot_layers
from kvconform.probe.ragged_rows import ragged_row_lengths
from kvconform.probe.reference_health import TopkTies
from kvconform.probe.selections import SelectionReplay


@dataclass
class PathRecord:
    """Per decode step max |Δlogit| of one extra cache path against its uncached reference."""

    name: str
    step_max_abs_delta: list[float]
    worst_step: int
    worst_row: int
    logit_scale: float
    description: str
    seq_lengths: list[int | None]
    """``get_seq_length()`` after the prefill (or extend) and after each decode step."""
    first_length: int
    """What ``get_seq_length()`` must be after the prefill (or extend); +1 per step after that."""
    final_layers: list[LayerState]
    """Every cache layer after the last step, for the shape rules."""
    error: str | None = None
    """Set when the path itself raised (the main decode's checks still stand)."""
    not_applicable: str | None = None
    """Set when the model or cache cannot take this path, with the reason."""
    topk_ties: TopkTies | None = None
    """Set when the path failed and its top-k selections were decided by exact ties (then no cache is blamed)."""
    reference: str = "the uncached reference"
    """What the path's logits are compared with."""
    replay: SelectionReplay | None = None
    """Set when the path failed on a model that selects: the path run again with the uncached selections."""
    fed: list[list[int]] | None = None
    """The tokens decoded after the prefill, per row, where a rerun must feed the same ones (ragged)."""
    states: StateComparison | None = None
    """prefix_reuse: the extended copy's cache against one prefill of the same tokens (K/V, conv/recurrent states)."""
    replayed_states: StateComparison | None = None
    """The same comparison in the replayed run (the uncached selections forced in)."""
    original_delta: float | None = None
    """prefix_reuse: max |Δlogit| of the original prefix extended again by the same tokens against the copy's extend."""
    original_changed: str | None = None
    """prefix_reuse: the first tensor of the original prefix cache that changed while its copy ran (shared state)."""
    api: ApiRecord | None = None
    """The cache API's edge calls made on copies of the path's caches (crop: ``cache_api.py``)."""
    batch: int | None = None
    """The rows the path's cache holds where not the plan's batch (classifier-free guidance doubles them); ``None``: the plan's."""
    max_cache_len: int | None = None
    """A static cache's length where the path's cache is not sized as the main decode's (``generate()`` sizes its own
    ``max_length - 1``, generation/utils.py ``_prepare_cache_for_generation``); ``None``: the main decode's."""


class PathNotApplicable(RuntimeError):
    """The model or cache cannot take this path (the message says why, from transformers' own flags)."""


def failed_path(name: str, error: BaseException) -> PathRecord:
    """The record of a path that raised (or, for ``PathNotApplicable``, could not be taken)."""
    if isinstance(error, PathNotApplicable):
        return PathRecord(name, [], 0, 0, 0.0, name, [], 0, [], not_applicable=str(error))
    return PathRecord(name, [], 0, 0, 0.0, name, [], 0, [], error=f"{type(error).__name__}: {error}"[:500])


def _accepts(model: Model, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def summarize(name: str, deltas: list[torch.Tensor], scale: float, description: str,
               lengths: list[int | None], first_length: int, cache: Any) -> PathRecord:
    """``deltas[k]`` is a [B] tensor of per-row max |Δ| at step k."""
    per_step = [float(d.max()) for d in deltas]
    worst_step = max(range(len(per_step)), key=per_step.__getitem__)
    return PathRecord(name, per_step, worst_step, int(deltas[worst_step].argmax()), scale, description,
                      lengths, first_length, snapshot_layers(cache))


def row_delta(cached: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num((cached.float() - reference.float()).abs(), nan=float("inf")).amax(dim=-1)


def _generate_feeds_mask(model: Model, keyword: str, token: torch.Tensor, cache: Any, mask: torch.Tensor) -> bool:
    """Whether ``generate()`` feeds the attention mask on a cached decode step: Mamba-style models drop it
    (their one-token step cannot take the whole sequence's mask), so the path feeds what generate() feeds.
    Where the model's own input preparation needs generate()'s state to run (musicgen), the mask is fed, as
    GenerationMixin does by default."""
    try:
        prepared = model.prepare_inputs_for_generation(
            token, attention_mask=mask, use_cache=True, is_first_iteration=False, **{keyword: cache},
            **generation_positions(model, mask.shape[1] - token.shape[1], token.shape[1]),
        )
    except (TypeError, ValueError, AttributeError):
        return True
    return prepared.get("attention_mask") is not None


def mask_as_generate_feeds(model: Model, cache: Any, ids: torch.Tensor, attention: torch.Tensor,
                            positions: dict[str, torch.Tensor]) -> Any:
    """The 2-D mask, or for a compileable (static) cache the 4-D masks ``generate()`` builds from it beforehand
    (GenerationMixin.prepare_inputs_for_generation: ``create_masks_for_generate``), as generate() feeds them."""
    from transformers import Cache
    from transformers.masking_utils import create_masks_for_generate

    if not (isinstance(cache, Cache) and cache.is_compileable and not all_linear(cache)):
        return attention
    build = getattr(model, "create_masks_for_generate", create_masks_for_generate)
    embeds = torch.empty((ids.shape[0], ids.shape[1], 0), dtype=next(model.parameters()).dtype, device=ids.device)
    return build(config=model.config, attention_mask=attention, position_ids=positions.get("position_ids"),
                 **mask_builder_inputs(build, embeds, cache, attention.shape[1] - ids.shape[1]))


@torch.inference_mode()
def run_ragged(model: Model, plan: Any, keyword: str, feed: list[list[int]] | None = None) -> PathRecord:
    """Left-padded prompts of lengths P, P-1, … (at least 2) decoded together with a mask; greedy, or fed the
    tokens ``feed`` (a rerun's). Zero pad-embedding rows hold noise meanwhile (``padding_rows_drawn``)."""
    with padding_rows_drawn(model, plan.seed):
        return _ragged(model, plan, keyword, feed)


def _ragged(model: Model, plan: Any, keyword: str, feed: list[list[int]] | None) -> PathRecord:
    device = input_device(model)
    prompt = make_prompt(plan.batch_size, plan.prompt_length, plan.seed, model.config.get_text_config(decoder=True).vocab_size, device)
    batch, width = prompt.shape
    lengths = ragged_row_lengths(batch, width)
    mask = torch.zeros_like(prompt)
    for row, length in enumerate(lengths):
        mask[row, width - length :] = 1
    padded = torch.where(mask.bool(), prompt, torch.zeros_like(prompt))
    use_positions = _accepts(model, "position_ids")

    def step(ids: torch.Tensor, attention: torch.Tensor, cache: Any, feed_mask: bool = True) -> tuple[Any, Any]:
        positions = {"position_ids": ((attention.cumsum(-1) - 1).clamp(min=0))[:, -ids.shape[1] :]} if use_positions else {}
        masks = {"attention_mask": mask_as_generate_feeds(model, cache, ids, attention, positions)} if feed_mask else {}
        return forward_keeping_cache(model, keyword, cache, input_ids=ids, **masks, **positions, **keep_logits(model, 1))

    cache, output = step(padded, mask, new_cache(model, plan.cache, width + plan.decode_steps))
    logits, tokens = [output.logits[:, -1, :]], []
    cache_lengths = [seq_length(cache)]
    feed_mask = True
    for k in range(plan.decode_steps):
        token = logits[-1].argmax(-1, keepdim=True) if feed is None else torch.tensor(feed, device=device)[:, k : k + 1]
        tokens.append(token)
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        if k == 0:
            feed_mask = _generate_feeds_mask(model, keyword, token, cache, mask)
        cache, output = step(token, mask, cache, feed_mask)
        logits.append(output.logits[:, -1, :])
        cache_lengths.append(seq_length(cache))

    generated = torch.cat(tokens, dim=1) if tokens else prompt[:, :0]
    deltas = [torch.zeros(batch, device=device) for _ in logits]
    scale = 0.0
    for row, length in enumerate(lengths):
        own = torch.cat([prompt[row : row + 1, width - length :], generated[row : row + 1]], dim=1)
        # The same position convention as the padded run (RoBERTa-style models otherwise start at padding_idx + 1).
        positions = {"position_ids": torch.arange(own.shape[1], device=device)[None]} if use_positions else {}
        kept = own.shape[1] - length + 1  # positions length-1 … of this row's own pass
        reference = model(input_ids=own, use_cache=False, **positions, **keep_logits(model, kept)).logits[0, -kept:, :]
        scale = max(scale, float(torch.nan_to_num(reference.float()).abs().max()))
        for k, cached in enumerate(logits):
            deltas[k][row] = row_delta(cached[row : row + 1], reference[k : k + 1])[0]
    description = f"left-padded rows of lengths {lengths} with an attention mask"
    record = summarize("ragged", deltas, scale, description, cache_lengths, width, cache)
    record.fed = generated.tolist()
    return record


@torch.inference_mode()
def run_prefix_reuse(forwards: Forwards, plan: Any, expected: torch.Tensor, sequence: torch.Tensor) -> PathRecord:
    """Prefill P-2 tokens, copy that cache, extend the copy by 2 tokens at once, then decode the same tokens; compare
    the extended copy with one prefill of P tokens, then extend the original again by the same 2 tokens.

    ``sequence`` is the main probe's fed tokens (P + N) and ``expected`` its uncached logits at positions
    P-1 … P+N-1 [B, N+1, V]. A vision-language prefix holds the image; an encoder-decoder cache is copied with both halves.
    """
    prompt_length, total = plan.prompt_length, sequence.shape[1]
    prefix = max(1, prompt_length - 2)
    within_one_prefill(forwards, prefix, "a prefix cache of its first")
    extend = sequence[:, prefix:prompt_length]
    stored, _ = forwards.cached(sequence[:, :prefix], forwards.new_cache(plan.cache, total), keep=1)
    before = snapshot(stored)
    reused = copy.deepcopy(stored)
    reused, output = forwards.extend(extend, reused, keep=1)
    logits = [output.logits[:, -1, :]]
    extended = snapshot(reused)
    lengths = [seq_length(reused)]
    for position in range(prompt_length, total):
        reused, output = forwards.extend(sequence[:, position : position + 1], reused)
        logits.append(output.logits[:, -1, :])
        lengths.append(seq_length(reused))
    deltas = [row_delta(cached, expected[:, step, :]) for step, cached in enumerate(logits)]
    scale = float(torch.nan_to_num(expected.float()).abs().max())
    description = f"a copied {prefix}-token prefix cache extended by {prompt_length - prefix} tokens at once, then decoded"
    record = summarize("prefix_reuse", deltas, scale, description, lengths, prompt_length, reused)
    now = cache_tensors(stored)
    record.original_changed = next((f"layer {layer} ({name}) {tensor}" for (layer, tensor), (name, old) in before.items()
                                    if (layer, tensor) not in now or not torch.equal(old, now[(layer, tensor)][1])), None)
    fresh, _ = forwards.cached(sequence[:, :prompt_length], forwards.new_cache(plan.cache, total), keep=1)
    record.states = compare_states(extended, snapshot(fresh), forwards.dtype)
    _, again = forwards.extend(extend, stored, keep=1)
    record.original_delta = float(row_delta(again.logits[:, -1, :], logits[0]).max())
    return record


def within_one_prefill(forwards: Forwards, first: int, what: str) -> None:
    """A path that caches the first ``first`` tokens and feeds the rest later cannot split a prefix-LM's bidirectional
    prompt: its first tokens' K/V depend on every prompt token (``token_type_ids`` 0), so it is not applicable."""
    if 0 < first < forwards.bidirectional:
        raise PathNotApplicable(f"{what} {first} tokens splits the {forwards.bidirectional}-token prompt that attends both "
                                "ways (a prefix-LM's token_type_ids 0): no cache of part of it equals one prefill of it all")
