"""The rollback assisted decoding relies on: prefill, ``crop`` the cache back k tokens, continue.

Assisted (speculative) decoding in transformers 5.24 rolls rejected draft tokens back with
``cache.crop(-k)``. Here the cell's cache is prefilled with the prompt plus k of the probe's decoded
tokens, cropped back k tokens, and the same tokens are decoded again one by one: every step must
match the uncached reference, and ``get_seq_length()`` must be P after the crop and grow by one.
Caches that transformers marks as not croppable (``is_croppable``) are reported as such.

The same prefilled cache (a copy) also takes the cache API's edge calls, and a copy of the main decode's cache
(sliding layers rolled, no past recorded) a ``crop`` after the decode (``cache_api.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.build.support import crop_support
from kvconform.compat import record_past
from kvconform.probe.cache_api import crop_after_decode, edge_calls
from kvconform.probe.cache_io import keep_logits, new_cache, returned_cache, seq_length
from kvconform.probe.variants import PathNotApplicable, PathRecord, row_delta, summarize

#: Tokens rolled back: a typical number of rejected draft tokens.
CROP_TOKENS = 3


def _fresh_cache(model: Model, kind: str, max_len: int) -> Any:
    """The cache ``generate()`` would build for ``kind`` (a ``DynamicCache`` of the text config for dynamic)."""
    reason = crop_support(type(model))
    if reason is not None:
        raise PathNotApplicable(reason)
    cache = new_cache(model, kind, max_len)
    if cache is None:
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    return cache


@torch.inference_mode()
def run_crop(model: Model, plan: Any, keyword: str, reference: torch.Tensor, sequence: torch.Tensor,
             decoded: Any = None) -> PathRecord:
    """Prefill P+k tokens, ``crop(-k)``, decode tokens P… again; ``reference`` is the uncached logits at positions
    P-1 … P+N-1 [B, N+1, V]; ``decoded`` the main decode's cache (all P+N tokens), for the crop after the decode."""
    prompt_length, total = plan.prompt_length, sequence.shape[1]
    k = min(CROP_TOKENS, total - prompt_length)
    cache = _fresh_cache(model, plan.cache, total)
    record_past(cache)  # as assisted decoding does (5.15+), so conv states can be rolled back too
    output = model(input_ids=sequence[:, : prompt_length + k], use_cache=True, **keep_logits(model, 1), **{keyword: cache})
    cache = returned_cache(output, cache)
    if not getattr(cache, "is_croppable", False):
        layers = sorted({type(layer).__name__ for layer in getattr(cache, "layers", []) if not getattr(layer, "is_croppable", False)})
        raise PathNotApplicable(f"transformers marks this {type(cache).__name__} as not croppable (is_croppable False; layers {layers})")
    api = None
    if prompt_length + k < total:  # the edge calls on a copy, then the token after the prefill decoded on it
        api = edge_calls(model, keyword, cache, sequence[:, prompt_length + k : prompt_length + k + 1], reference[:, k + 1, :],
                         identity=plan.cache == "dynamic")
        if decoded is not None:
            crop_after_decode(model, keyword, decoded, k, sequence[:, total - k : total - k + 1], reference[:, -k, :], api)
    cache.crop(-k)
    lengths = [seq_length(cache)]
    deltas = []
    for position in range(prompt_length, total):
        output = model(input_ids=sequence[:, position : position + 1], use_cache=True, **{keyword: cache})
        cache = returned_cache(output, cache)
        cache.crop(0)  # assisted decoding crops after every forward: recording layers return to their working size
        lengths.append(seq_length(cache))
        deltas.append(row_delta(output.logits[:, -1, :], reference[:, position - prompt_length + 1, :]))
    expected = reference[:, 1:, :]
    scale = float(torch.nan_to_num(expected.float()).abs().max())
    description = f"a {prompt_length + k}-token prefill cropped back {k} tokens (crop(-{k})), then decoded again"
    record = summarize("crop", deltas, scale, description, lengths, prompt_length, cache)
    record.api = api
    return record
