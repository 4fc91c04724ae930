"""How to call one cell's model with and without a cache, whatever its family: the adapter every cache path takes.

A cache path (crop, reorder, prefix reuse, chunked prefill) is one code for every family; what differs is only how a
forward is called. A causal LM's forward is ``model(input_ids=..., use_cache=..., <cache keyword>=cache)``. A vision-
or audio-language prompt's forward also carries its image or audio features (and the token types of a prefix-LM)
where the ids hold its placeholders; an encoder-decoder's decoder forward carries the encoder output the prefill
computed once, and its cache has two halves (generate() crops the self-attention half only, reorders both). The
family modules build their ``Forwards``; :func:`causal_forwards` is a causal LM's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.probe.cache_io import (
    compute_dtype,
    forward_keeping_cache,
    input_device,
    keep_logits,
    make_prompt,
    new_cache,
    returned_cache,
)


def fed_back(output: Any, cache: Any) -> tuple[Any, Any]:
    """``(the cache a forward returned, else the one it was given; the output)``."""
    return returned_cache(output, cache), output

#: ``(ids, cache or None, logits to keep or None: all) -> (the cache to feed back, the model output)``.
CachedCall = Callable[[torch.Tensor, Any, "int | None"], "tuple[Any, Any]"]


@dataclass
class Forwards:
    """One cell's forwards. ``cached`` and ``extend`` return ``(cache to feed back, output)``; the logits of a call are
    those of its ids (the last ``keep`` of them where given)."""

    model: Model
    """The module whose forwards these are (the selection tracers hook it; its dtype is the cell's)."""
    prompt: torch.Tensor
    """The prompt's ids [B, P] the cell's runs start from (with media placeholders, or a decoder prompt)."""
    start: CachedCall
    """A cached forward over ids that start the sequence: the prefill, with the media or encoder output it needs."""
    more: CachedCall
    """A cached forward over one or several ids continuing the cache."""
    reference: Callable[[torch.Tensor, int | None], Any]
    """One uncached pass over ids from the sequence's start (the same media or encoder output)."""
    make_cache: Callable[[str, int], Any]
    """``(kind, length) -> cache``: the cache of ``kind`` the cell decodes with (``None``: the model builds its own)."""
    default_cache: Callable[[], Any]
    """The dynamic cache generate() builds for the cell (a concrete object, where a path must hold it before the prefill)."""
    row_inputs: bool = False
    """Whether the forwards carry per-row inputs besides the ids (an image, an encoder output per row), which a prefill
    of the rows in another order would need reordered with them."""
    bidirectional: int = 0
    """Leading positions that attend to each other both ways (a prefix-LM's prompt): no cache of part of them equals
    one prefill of them all."""
    unsplit: int = 0
    """Leading positions one forward must hold whole (through a media prompt's last placeholder: the media goes whole to
    the first forward that holds its placeholders); 0 where any prefix prefills alone."""
    code_rows: int = 1
    """Rows of the ids per row of the cache: a codebook decoder's K code rows of one batch row (MusicGen's
    ``[B x K, S]``, row ``b * K + k``), 1 elsewhere."""

    def cached(self, ids: torch.Tensor, cache: Any = None, keep: int | None = None) -> tuple[Any, Any]:
        """Prefill ``ids`` (the sequence's first tokens) into ``cache`` (``None``: the model's own)."""
        return self.start(ids, cache, keep)

    def extend(self, ids: torch.Tensor, cache: Any, keep: int | None = None) -> tuple[Any, Any]:
        """Feed ``ids`` after what ``cache`` holds."""
        return self.more(ids, cache, keep)

    def uncached(self, ids: torch.Tensor, keep: int | None = None) -> Any:
        return self.reference(ids, keep)

    def new_cache(self, kind: str, length: int) -> Any:
        return self.make_cache(kind, length)

    def cache_batch(self, ids: torch.Tensor) -> int:
        """The batch of the cache ``ids`` [rows, S] fill."""
        return ids.shape[0] // self.code_rows

    def id_rows(self, order: torch.Tensor) -> torch.Tensor:
        """The ids' rows in the order ``order`` puts the cache's rows (each cache row's ``code_rows`` ids rows with it)."""
        offsets = torch.arange(self.code_rows, device=order.device)
        return (order[:, None] * self.code_rows + offsets).flatten()

    @property
    def dtype(self) -> torch.dtype:
        return compute_dtype(self.model)


def causal_forwards(model: Model, prompt: torch.Tensor | None = None, batch_size: int = 1, prompt_length: int = 1,
                    seed: int = 0) -> Forwards:
    """A causal LM's forwards: ``model(input_ids=..., use_cache=..., <cache keyword>=cache)``; its prompt ``prompt``, else
    the seeded random one of ``make_prompt``. A model that returns no cache object is given one (``forward_keeping_cache``)."""
    keyword = cache_keyword(model)
    if prompt is None:
        vocab = model.config.get_text_config(decoder=True).vocab_size
        prompt = make_prompt(batch_size, prompt_length, seed, vocab, input_device(model))

    def kept(keep: int | None) -> dict[str, int]:
        return keep_logits(model, keep) if keep is not None else {}

    def cached(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        return forward_keeping_cache(model, keyword, cache, input_ids=ids, **kept(keep))

    def default_cache() -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=model.config.get_text_config(decoder=True))

    return Forwards(
        model=model, prompt=prompt, start=cached, more=cached,
        reference=lambda ids, keep: model(input_ids=ids, use_cache=False, **kept(keep)),
        make_cache=lambda kind, length: new_cache(model, kind, length), default_cache=default_cache,
    )
