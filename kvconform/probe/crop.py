"""The rollback assisted decoding relies on: prefill, ``crop`` the cache back k tokens, continue.

Assisted (speculative) decoding rolls rejected draft tokens back with ``cache.crop(-k)`` (5.15+; before,
``crop(length - k)``: ``compat.crop_off`` makes the release's call). Here the cell's cache is prefilled with the prompt plus k of the probe's decoded
tokens, cropped back k tokens, and the same tokens are decoded again one by one: every step must
match the uncached reference, and ``get_seq_length()`` must be P after the crop and grow by one.
Caches that transformers does not crop (``is_croppable``, or before 5.17 no ``crop``) are reported as such.

The same prefilled cache (a copy) also takes the cache API's edge calls, and a copy of the main decode's cache
(sliding layers rolled, no past recorded) a ``crop`` after the decode (``cache_api.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from kvconform.build.support import crop_support, own_cache
from kvconform.compat import crop_counts_removed_tokens, crop_off, not_croppable_layers, record_past
from kvconform.probe.cache_api import crop_after_decode, edge_calls
from kvconform.probe.cache_io import seq_length
from kvconform.probe.forwards import Forwards
from kvconform.probe.variants import PathNotApplicable, PathRecord, row_delta, summarize

#: Tokens rolled back: a typical number of rejected draft tokens.
CROP_TOKENS = 3


def _fresh_cache(forwards: Forwards, kind: str, max_len: int) -> Any:
    """The cache ``generate()`` would build for ``kind`` (for dynamic, the one generate() builds for the cell)."""
    reason = crop_support(type(forwards.model)) or own_cache(type(forwards.model))
    if reason is not None:
        raise PathNotApplicable(reason)
    cache = forwards.new_cache(kind, max_len)
    return cache if cache is not None else forwards.default_cache()


def _refused_by_halves(cache: Any) -> None:
    """An encoder-decoder cache crops only where both halves are dynamic (``EncoderDecoderCache.check_dynamic_cache``
    raises TypeError "`crop` is only defined for dynamic cache" for static halves): the path is not applicable."""
    check = getattr(cache, "check_dynamic_cache", None)
    if check is None:
        return
    try:
        check("crop")
    except TypeError as exc:
        raise PathNotApplicable(f"transformers refuses it (EncoderDecoderCache.crop): {' '.join(str(exc).split())[:300]}") from exc


@torch.inference_mode()
def run_crop(forwards: Forwards, plan: Any, reference: torch.Tensor, sequence: torch.Tensor, decoded: Any = None) -> PathRecord:
    """Prefill P+k tokens, ``crop(-k)``, decode tokens P… again; ``reference`` is the uncached logits at positions
    P-1 … P+N-1 [B, N+1, V]; ``decoded`` the main decode's cache (all P+N tokens), for the crop after the decode.
    An encoder-decoder cache crops its self-attention half only, as generate() does (``EncoderDecoderCache.crop``)."""
    prompt_length, total = plan.prompt_length, sequence.shape[1]
    k = min(CROP_TOKENS, total - prompt_length)
    cache = _fresh_cache(forwards, plan.cache, total)
    recording = record_past(cache, k)  # as assisted decoding does (5.14+), so conv and recurrent states roll back too
    cache, _ = forwards.cached(sequence[:, : prompt_length + k], cache, keep=1)
    refused = not_croppable_layers(cache)
    if refused is not None:
        raise PathNotApplicable(f"transformers does not crop this {type(cache).__name__} (not croppable: {refused})")
    _refused_by_halves(cache)
    api = None
    if prompt_length + k < total:  # the edge calls on a copy, then the token after the prefill decoded on it
        api = edge_calls(forwards, cache, sequence[:, prompt_length + k : prompt_length + k + 1], reference[:, k + 1, :],
                         identity=plan.cache == "dynamic")
        if decoded is not None:
            crop_after_decode(forwards, decoded, k, sequence[:, total - k : total - k + 1], reference[:, -k, :], api)
    try:
        call = crop_off(cache, k)
    except ValueError as exc:  # before 5.17 a sliding layer past its window refuses here (not_croppable_layers)
        raise PathNotApplicable(f"transformers refuses the crop of {k} tokens: {' '.join(str(exc).split())[:300]}") from exc
    lengths = [seq_length(cache)]
    deltas = []
    every_forward = recording and crop_counts_removed_tokens(cache)  # 5.15+: crop(0) after every forward
    for position in range(prompt_length, total):
        cache, output = forwards.extend(sequence[:, position : position + 1], cache)
        if every_forward:  # 5.15+'s assisted decoding crops after every forward: recording layers return to their size
            cache.crop(0)
        lengths.append(seq_length(cache))
        deltas.append(row_delta(output.logits[:, -1, :], reference[:, position - prompt_length + 1, :]))
    expected = reference[:, 1:, :]
    scale = float(torch.nan_to_num(expected.float()).abs().max())
    description = f"a {prompt_length + k}-token prefill cropped back {k} tokens ({call}), then decoded again"
    record = summarize("crop", deltas, scale, description, lengths, prompt_length, cache)
    record.api = api
    return record
