"""Planted KV-cache faults for the self-tests: each patches transformers' cache code for one `with` block.

Every fault is a real bug class (see the seeds' "common mistake"): the suite must fail the right
check and say where.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any

import torch
from transformers.cache_utils import (
    Cache,
    CacheLayerMixin,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    Fp8QuantizedLayer,
    LinearAttentionLayer,
    StaticLayer,
    StaticSlidingWindowLayer,
)

Patch = tuple[type | ModuleType, str, Callable[..., Any]]  # a class or a module, an attribute, its replacement


def _decoding(layer: Any, key_states: torch.Tensor) -> bool:
    """True for a one-token decode update on an already filled layer."""
    return layer.is_initialized and layer.keys is not None and layer.keys.numel() > 0 and key_states.shape[-2] == 1


def _dynamic(store: Callable[[Any, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> list[Patch]:
    """Replace what a DynamicLayer stores on decode; ``store`` returns the (keys, values) to attend over."""
    original = DynamicLayer.update

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not _decoding(self, key_states):
            return original(self, key_states, value_states, *args, **kwargs)
        return store(self, key_states, value_states)

    return [(DynamicLayer, "update", update)]


def _append(self: Any, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    self.keys = torch.cat([self.keys, keys], dim=-2)
    self.values = torch.cat([self.values, values], dim=-2)
    return self.keys, self.values


def write_late() -> list[Patch]:
    """The new K/V lands one slot late: the token's own slot holds the previous write (zeros at first)."""

    def store(self, k, v):
        pending = getattr(self, "_pending", (torch.zeros_like(k), torch.zeros_like(v)))
        self._pending = (k, v)
        return _append(self, *pending)

    return _dynamic(store)


def not_written() -> list[Patch]:
    """The new K/V is attended to once but never stored."""

    def store(self, k, v):
        return torch.cat([self.keys, k], dim=-2), torch.cat([self.values, v], dim=-2)

    return _dynamic(store)


def no_growth() -> list[Patch]:
    """The new K/V overwrites the last column instead of being appended."""

    def store(self, k, v):
        self.keys = torch.cat([self.keys[..., :-1, :], k], dim=-2)
        self.values = torch.cat([self.values[..., :-1, :], v], dim=-2)
        return self.keys, self.values

    return _dynamic(store)


def grows_by_two() -> list[Patch]:
    """The new K/V is appended twice."""

    def store(self, k, v):
        return _append(self, torch.cat([k, k], dim=-2), torch.cat([v, v], dim=-2))

    return _dynamic(store)


def stale_column() -> list[Patch]:
    """The previous column is stored again in place of the new token's K/V."""

    def store(self, k, v):
        return _append(self, self.keys[..., -1:, :], self.values[..., -1:, :])

    return _dynamic(store)


def zero_column() -> list[Patch]:
    """A zero column is stored in place of the new token's K/V."""

    def store(self, k, v):
        return _append(self, torch.zeros_like(k), torch.zeros_like(v))

    return _dynamic(store)


def expanded_heads(repeats: int = 2) -> list[Patch]:
    """K/V stored expanded to the query-head count (H instead of H_kv); attention still sees H_kv."""

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys = torch.cat([self.keys, key_states.repeat_interleave(repeats, dim=1)], dim=-2)
        self.values = torch.cat([self.values, value_states.repeat_interleave(repeats, dim=1)], dim=-2)
        return self.keys[:, ::repeats], self.values[:, ::repeats]

    return [(DynamicLayer, "update", update)]


def position_drift() -> list[Patch]:
    """The cache reports one token more than it holds once filled, so rotary positions shift."""
    original = Cache.get_seq_length

    def get_seq_length(self: Any, *args: Any, **kwargs: Any) -> int:
        length = original(self, *args, **kwargs)
        return length + 1 if length else length

    return [(Cache, "get_seq_length", get_seq_length)]


def short_window() -> list[Patch]:
    """Sliding-window layers keep one token fewer than the window needs (window-2, not window-1).

    The attention mask is shrunk to match, so the model runs but loses the oldest in-window token.
    """
    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]
        full_keys = torch.cat([self.keys, key_states], dim=-2)
        full_values = torch.cat([self.values, value_states], dim=-2)
        keep = self.sliding_window - 2
        self.keys, self.values = full_keys[..., -keep:, :], full_values[..., -keep:, :]
        return full_keys, full_values

    def get_mask_sizes(self: Any, query_length: int) -> tuple[int, int]:
        stored = min(self.cumulative_length, self.sliding_window - 2)
        return stored + query_length, self.cumulative_length - stored

    return [(DynamicSlidingWindowLayer, "update", update), (DynamicSlidingWindowLayer, "get_mask_sizes", get_mask_sizes)]


def static_wrong_slot() -> list[Patch]:
    """A static cache writes each decoded token one slot past its position."""
    original = StaticLayer.update

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not (self.is_initialized and key_states.shape[-2] == 1):
            return original(self, key_states, value_states, *args, **kwargs)
        slot = self.cumulative_length + 1
        self.cumulative_length.add_(1)
        if slot < self.max_cache_len:
            self.keys.index_copy_(2, slot.reshape(1), key_states)
            self.values.index_copy_(2, slot.reshape(1), value_states)
        return self.keys, self.values

    return [(StaticLayer, "update", update)]


def beam_not_reordered() -> list[Patch]:
    """Beam search's ``reorder_cache`` leaves the K/V rows in their old beam order."""

    def reorder_cache(self: Any, beam_idx: torch.Tensor) -> None:
        return None

    return [(CacheLayerMixin, "reorder_cache", reorder_cache)]


def static_not_reordered() -> list[Patch]:
    """A static layer's ``reorder_cache`` leaves its preallocated rows where they were."""

    def reorder_cache(self: Any, beam_idx: torch.Tensor) -> None:
        return None

    return [(StaticLayer, "reorder_cache", reorder_cache)]


def quantized_not_reordered() -> list[Patch]:
    """An fp8 layer's ``reorder_cache`` leaves its quantized rows where they were."""

    def reorder_cache(self: Any, beam_idx: torch.Tensor) -> None:
        return None

    return [(Fp8QuantizedLayer, "reorder_cache", reorder_cache)]


def crop_one_short() -> list[Patch]:
    """``crop(-k)`` removes k-1 columns: one rejected token's K/V stays in the cache."""
    original = DynamicLayer.crop

    def crop(self: Any, tokens_to_remove: int) -> None:
        return original(self, tokens_to_remove + 1 if tokens_to_remove < 0 else tokens_to_remove)

    return [(DynamicLayer, "crop", crop)]


def crop_skips_verified_drafts() -> list[Patch]:
    """``crop`` after a multi-token forward over a filled layer (assisted decoding's draft verification) is a no-op:
    the rejected drafts' K/V columns stay. A crop after a prefill (the ``crop`` path) still works."""
    update, crop = DynamicLayer.update, DynamicLayer.crop

    def verify(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        self._verified = self.is_initialized and self.keys is not None and self.keys.numel() > 0 and key_states.shape[-2] > 1
        return update(self, key_states, value_states, *args, **kwargs)

    def keep(self: Any, tokens_to_remove: int) -> None:
        if not getattr(self, "_verified", False):
            crop(self, tokens_to_remove)

    return [(DynamicLayer, "update", verify), (DynamicLayer, "crop", keep)]


def crop_zero_empties() -> list[Patch]:
    """``crop(0)`` slices ``keys[..., :-0, :]`` (an empty slice): the guard for "nothing to remove" is missing."""

    def crop(self: Any, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"Calling `crop` with a positive value (`{tokens_to_remove}`) is not supported.")
        if not self.is_initialized:
            return
        self.keys = self.keys[..., : -abs(tokens_to_remove), :]
        self.values = self.values[..., : -abs(tokens_to_remove), :]

    return [(DynamicLayer, "crop", crop)]


def static_reorder_reverses_rows() -> list[Patch]:
    """A static layer's ``reorder_cache`` reverses the batch rows whatever ``beam_idx`` asks (with 2 rows that is the
    rotation, so only the identity shows it)."""

    def reorder_cache(self: Any, beam_idx: torch.Tensor) -> None:
        if self.keys is None:  # a layer never written (T5's static cache sized by the encoder's layers)
            return
        flipped = torch.arange(self.keys.shape[0] - 1, -1, -1, device=self.keys.device)
        self.keys.copy_(self.keys.index_select(0, flipped))
        self.values.copy_(self.values.index_select(0, flipped))

    return [(StaticLayer, "reorder_cache", reorder_cache)]


def generate_reuses_cache() -> list[Patch]:
    """``generate()`` keeps the cache it built on the model and hands it, not reset, to the next greedy call of the
    same batch size (a cache kept "to avoid reallocation" without its reset)."""
    from transformers.generation.utils import GenerationMixin

    original = GenerationMixin._prepare_cache_for_generation

    def prepare(self: Any, generation_config: Any, model_kwargs: dict, generation_mode: Any, batch_size: int,
                *args: Any, **kwargs: Any) -> Any:
        user_cache = model_kwargs.get("cache") is not None
        result = original(self, generation_config, model_kwargs, generation_mode, batch_size, *args, **kwargs)
        built = model_kwargs.get("cache")
        if user_cache or built is None or generation_config.num_beams != 1:
            return result
        kept = vars(self).get("_kept_cache")
        if kept is not None and kept[0] == (type(built), batch_size):
            model_kwargs["cache"] = kept[1]
        else:
            vars(self)["_kept_cache"] = ((type(built), batch_size), built)
        return result

    return [(GenerationMixin, "_prepare_cache_for_generation", prepare)]


def continuation_refeeds_sequence() -> list[Patch]:
    """``generate()`` continued from a returned cache feeds the model the whole sequence again, not only the tokens the
    cache lacks (the first forward of a call whose ids the cache partly holds); every other forward is sliced as before."""
    from transformers.generation.utils import GenerationMixin

    original = GenerationMixin.prepare_inputs_for_generation

    def prepare(self: Any, input_ids: torch.Tensor, *args: Any, next_sequence_length: int | None = None, **kwargs: Any) -> Any:
        if kwargs.get("is_first_iteration") and next_sequence_length is not None and next_sequence_length < input_ids.shape[1]:
            next_sequence_length = None
        return original(self, input_ids, *args, next_sequence_length=next_sequence_length, **kwargs)

    return [(GenerationMixin, "prepare_inputs_for_generation", prepare)]


def assistant_crop_counted_from_its_cache() -> list[Patch]:
    """After a verification the assistant's cache is cropped by the rejected drafts and the added token counted from its
    own end (transformers 5.15's ``crop(-(remove_from_pkv + num_added_tokens))``), not down to below the new sequence's
    last token: after rejected drafts it holds every position of the sequence handed to the assistant next."""
    from transformers.generation.candidate_generator import AssistedCandidateGenerator

    original = AssistedCandidateGenerator._update_past_and_masks

    def update(self: Any, input_ids: torch.Tensor, remove_from_pkv: int = 0, num_added_tokens: int = 1) -> bool:
        cache = next((self.assistant_kwargs[k] for k in ("cache", "past_key_values") if self.assistant_kwargs.get(k) is not None),
                     None)
        if cache is None:
            return original(self, input_ids, remove_from_pkv, num_added_tokens)
        cache.crop(-(remove_from_pkv + num_added_tokens))
        cache.crop = lambda _tokens: None  # the release's own crop, after this one
        try:
            return original(self, input_ids, remove_from_pkv, num_added_tokens)
        finally:
            del cache.crop

    return [(AssistedCandidateGenerator, "_update_past_and_masks", update)]


def assistant_crop_keeps_a_rejected_draft() -> list[Patch]:
    """The assistant's cache, cropped of the rejected drafts to the right length, keeps the first rejected draft's K/V
    in its last kept slot (a rollback that moves the end one slot early and copies): lengths, and the main model's
    tokens and logits, stay right; only the assistant's stored K/V and its drafts are wrong."""
    from transformers.generation.candidate_generator import AssistedCandidateGenerator

    original = AssistedCandidateGenerator._update_past_and_masks

    def update(self: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
        cache = next((self.assistant_kwargs[k] for k in ("cache", "past_key_values") if self.assistant_kwargs.get(k) is not None),
                     None)
        before = [(layer.keys, layer.values) for layer in getattr(cache, "layers", [])
                  if isinstance(layer, DynamicLayer) and isinstance(layer.keys, torch.Tensor)]
        result = original(self, input_ids, *args, **kwargs)
        for layer, (keys, values) in zip(getattr(cache, "layers", []), before, strict=False):
            kept = layer.keys.shape[-2]
            if 0 < kept < keys.shape[-2]:
                layer.keys[..., kept - 1, :] = keys[..., kept, :]
                layer.values[..., kept - 1, :] = values[..., kept, :]
        return result

    return [(AssistedCandidateGenerator, "_update_past_and_masks", update)]


def chunked_prefill_rounds_keys() -> list[Patch]:
    """``generate(prefill_chunk_size=...)`` stores its chunks' keys rounded to bfloat16 (a cast left in the chunked
    branch): the logits move a little, the greedy tokens of a tiny model hold; generate() without chunks and the
    hand-driven chunks are untouched."""
    from transformers.generation.utils import GenerationMixin

    prefill, update = GenerationMixin._prefill, DynamicLayer.update
    chunking = [False]

    def chunked(self: Any, input_ids: torch.Tensor, generation_config: Any, *args: Any, **kwargs: Any) -> Any:
        chunking[0] = generation_config.prefill_chunk_size is not None
        try:
            return prefill(self, input_ids, generation_config, *args, **kwargs)
        finally:
            chunking[0] = False

    def rounded(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if chunking[0]:
            key_states = key_states.to(torch.bfloat16).to(key_states.dtype)
        return update(self, key_states, value_states, *args, **kwargs)

    return [(GenerationMixin, "_prefill", chunked), (DynamicLayer, "update", rounded)]


def cache_config_consumed() -> list[Patch]:
    """``generate(cache_implementation="quantized", cache_config=d)`` pops ``backend`` from the user's own dict
    (no copy), so the next call with the same dict builds another backend."""
    from transformers import QuantizedCache
    from transformers.generation.utils import GenerationMixin

    original = GenerationMixin._prepare_cache_for_generation

    def prepare(self: Any, generation_config: Any, model_kwargs: dict, *args: Any, **kwargs: Any) -> Any:
        user = generation_config.cache_config
        if generation_config.cache_implementation != "quantized" or not isinstance(user, dict) or model_kwargs.get("cache") is not None:
            return original(self, generation_config, model_kwargs, *args, **kwargs)
        backend = user.pop("backend", "quanto")
        model_kwargs["cache"] = QuantizedCache(backend=backend, config=self.config.get_text_config(decoder=True), **user)
        return None

    return [(GenerationMixin, "_prepare_cache_for_generation", prepare)]


def static_window_no_roll() -> list[Patch]:
    """A full static sliding-window layer overwrites its newest slot instead of rolling the window left."""
    original = StaticSlidingWindowLayer.update

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not (self.is_initialized and self.cumulative_length_int >= self.max_cache_len and key_states.shape[-2] == 1):
            return original(self, key_states, value_states, *args, **kwargs)
        self.cumulative_length_int += 1
        self.keys[:, :, -1:] = key_states
        self.values[:, :, -1:] = value_states
        return self.keys, self.values

    return [(StaticSlidingWindowLayer, "update", update)]


def dynamic_window_stale_before_full() -> list[Patch]:
    """A dynamic sliding layer that is not yet full stores the previous column again in place of a decoded token.

    Only a prompt shorter than the window decodes into a layer that is not full: the main decode's prompt is longer.
    """
    original = DynamicSlidingWindowLayer.update

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not (_decoding(self, key_states) and self.cumulative_length < self.sliding_window - 1):
            return original(self, key_states, value_states, *args, **kwargs)
        return original(self, self.keys[..., -1:, :], self.values[..., -1:, :], *args, **kwargs)

    return [(DynamicSlidingWindowLayer, "update", update)]


def static_window_late_before_full() -> list[Patch]:
    """A static sliding layer that is not yet full writes a decoded token one slot past its position.

    Only a prompt shorter than the window decodes into free slots: the main decode's prompt fills the window.
    """
    original = StaticSlidingWindowLayer.update

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not (self.is_initialized and key_states.shape[-2] == 1 and 0 < self.cumulative_length_int < self.max_cache_len):
            return original(self, key_states, value_states, *args, **kwargs)
        slot = min(self.cumulative_length_int + 1, self.max_cache_len - 1)
        self.cumulative_length_int += 1
        self.cumulative_length.add_(1)
        self.keys[:, :, slot : slot + 1] = key_states
        self.values[:, :, slot : slot + 1] = value_states
        return self.keys, self.values

    return [(StaticSlidingWindowLayer, "update", update)]


def mask_one_wide() -> list[Patch]:
    """A dynamic layer advertises a decode mask one key wider than the K/V its update() returns.

    With sdpa a one-token decode over a full layer skips the mask altogether, so the logits survive it.
    """
    original = DynamicLayer.get_mask_sizes

    def get_mask_sizes(self: Any, query_length: int) -> tuple[int, int]:
        kv_length, kv_offset = original(self, query_length)
        return (kv_length + 1 if query_length == 1 and self.get_seq_length() else kv_length), kv_offset

    return [(DynamicLayer, "get_mask_sizes", get_mask_sizes)]


def fp8_scale_drift() -> list[Patch]:
    """The fp8 layer quantizes each new token with its own scale but dequantizes it with the frozen one."""
    original = Fp8QuantizedLayer._quantize

    def _quantize(self: Any, tensor: torch.Tensor, scale: Any = None):
        return original(self, tensor, None)

    return [(Fp8QuantizedLayer, "_quantize", _quantize)]


def int_residual_flushed_late() -> list[Patch]:
    """quanto/HQQ layers flush their full-precision residual one token late: it holds ``residual_length`` tokens
    before they are quantized (``>`` for ``>=`` at cache_utils.QuantizedLayer.update)."""
    from transformers.cache_utils import QuantizedLayer

    original = QuantizedLayer.update

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        self.residual_length += 1
        try:
            return original(self, key_states, value_states, *args, **kwargs)
        finally:
            self.residual_length -= 1

    return [(QuantizedLayer, "update", update)]


def int_block_other_scale() -> list[Patch]:
    """A quanto layer stores each quantized group with its neighbour group's scale and zero point (one group off)."""
    from transformers.cache_utils import QuantoQuantizedLayer

    original = QuantoQuantizedLayer._quantize

    def _quantize(self: Any, tensor: torch.Tensor, axis: int) -> Any:
        quantized = original(self, tensor, axis)
        quantized._scale, quantized._shift = quantized._scale.roll(1, 0), quantized._shift.roll(1, 0)
        return quantized

    return [(QuantoQuantizedLayer, "_quantize", _quantize)]


def int_reorder_kept_after_flush() -> list[Patch]:
    """A quanto/HQQ layer keeps the deferred beam order after a flush has baked it in, so the next dequantization
    applies it a second time."""
    from transformers.cache_utils import QuantizedLayer

    original = QuantizedLayer.update

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        pending = self._pending_beam_idx
        result = original(self, key_states, value_states, *args, **kwargs)
        if pending is not None and self._pending_beam_idx is None:
            self._pending_beam_idx = pending
        return result

    return [(QuantizedLayer, "update", update)]


def int_pending_reorder_replaced() -> list[Patch]:
    """A quanto/HQQ layer's ``reorder_cache`` replaces a deferred beam order not yet applied instead of composing the
    two: only a second reorder before the next flush (beam search, every step) meets it."""
    from transformers.cache_utils import QuantizedLayer

    original = QuantizedLayer.reorder_cache

    def reorder_cache(self: Any, beam_idx: torch.LongTensor) -> None:
        self._pending_beam_idx = None
        original(self, beam_idx)

    return [(QuantizedLayer, "reorder_cache", reorder_cache)]


def cached_prefill_shift() -> list[Patch]:
    """The model's ``use_cache=True`` path shifts every logit of a prefill into an empty cache by max|logit|.

    No cache entry is read and none is wrong (the K/V are untouched), and a constant shift keeps every argmax and
    log-softmax: only the cached prefill's logits leave the uncached pass, so the diagnosis must not blame a cache read.
    The shift is made in float32, where it is exact for half-precision logits: rounded in their own dtype, two
    near-tied logits could become equal and swap the argmax. Planted in a causal LM (Llama), a vision-language model
    (LLaVA, its image in the prompt) and an encoder-decoder (T5, its decoder prompt read by ``decoder_input_ids``).
    """
    from functools import wraps

    from transformers import LlamaForCausalLM, LlavaForConditionalGeneration, T5ForConditionalGeneration

    def shifted(original: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(original)
        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            empty = cache is None or cache.get_seq_length() == 0
            ids = kwargs.get("decoder_input_ids")  # an encoder-decoder's prompt is its decoder's
            ids = ids if ids is not None else kwargs.get("input_ids")
            tokens = ids.shape[1] if ids is not None else 1
            output = original(self, *args, **kwargs)
            if kwargs.get("use_cache") and empty and tokens > 1:
                output.logits = output.logits.float() + output.logits.float().abs().amax()
            return output

        return forward

    return [(model, "forward", shifted(model.forward))
            for model in (LlamaForCausalLM, LlavaForConditionalGeneration, T5ForConditionalGeneration)]


def chunk_conv_state_dropped() -> list[Patch]:
    """A multi-token forward on a filled linear-attention layer is taken for a prefill: the conv state the earlier
    tokens left is dropped (zero-padded instead), so the next chunk's causal conv cannot see them. One-token decode
    steps (``seq_len == 1`` takes the models' own update path) and prefills into an empty cache are unchanged."""
    original = LinearAttentionLayer.update_conv_state

    def update_conv_state(self: Any, conv_states: torch.Tensor, state_idx: int = 0, *args: Any, **kwargs: Any) -> torch.Tensor:
        if conv_states.shape[-1] > 1:
            self.has_previous_state[state_idx] = False
        return original(self, conv_states, state_idx, *args, **kwargs)

    return [(LinearAttentionLayer, "update_conv_state", update_conv_state)]


def prefix_copy_shares_recurrent_state() -> list[Patch]:
    """``copy.deepcopy`` of a linear-attention layer copies everything but its recurrent states, which the copy shares
    with the original: a later in-place state update of the copy (``copy_``) advances the original too."""
    import copy

    def deepcopy(self: Any, memo: dict[int, Any]) -> Any:
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        for name, value in vars(self).items():
            setattr(copied, name, value if name == "recurrent_states" else copy.deepcopy(value, memo))
        return copied

    return [(LinearAttentionLayer, "__deepcopy__", deepcopy)]


FAULTS: dict[str, Callable[[], list[Patch]]] = {
    "chunk_conv_state_dropped": chunk_conv_state_dropped,
    "prefix_copy_shares_recurrent_state": prefix_copy_shares_recurrent_state,
    "cached_prefill_shift": cached_prefill_shift,
    "beam_not_reordered": beam_not_reordered,
    "crop_one_short": crop_one_short,
    "crop_skips_verified_drafts": crop_skips_verified_drafts,
    "crop_zero_empties": crop_zero_empties,
    "chunked_prefill_rounds_keys": chunked_prefill_rounds_keys,
    "assistant_crop_counted_from_its_cache": assistant_crop_counted_from_its_cache,
    "generate_reuses_cache": generate_reuses_cache,
    "assistant_crop_keeps_a_rejected_draft": assistant_crop_keeps_a_rejected_draft,
    "cache_config_consumed": cache_config_consumed,
    "continuation_refeeds_sequence": continuation_refeeds_sequence,
    "static_reorder_reverses_rows": static_reorder_reverses_rows,
    "static_not_reordered": static_not_reordered,
    "quantized_not_reordered": quantized_not_reordered,
    "static_window_no_roll": static_window_no_roll,
    "dynamic_window_stale_before_full": dynamic_window_stale_before_full,
    "static_window_late_before_full": static_window_late_before_full,
    "fp8_scale_drift": fp8_scale_drift,
    "int_residual_flushed_late": int_residual_flushed_late,
    "int_block_other_scale": int_block_other_scale,
    "int_reorder_kept_after_flush": int_reorder_kept_after_flush,
    "int_pending_reorder_replaced": int_pending_reorder_replaced,
    "mask_one_wide": mask_one_wide,
    "write_late": write_late,
    "not_written": not_written,
    "no_growth": no_growth,
    "grows_by_two": grows_by_two,
    "stale_column": stale_column,
    "zero_column": zero_column,
    "expanded_heads": expanded_heads,
    "position_drift": position_drift,
    "short_window": short_window,
    "static_wrong_slot": static_wrong_slot,
}


def planted(fault: str) -> AbstractContextManager[None]:
    """Apply one fault from ``FAULTS`` for the duration of the block."""
    return patched(FAULTS[fault]())


@contextmanager
def patched(patches: list[Patch]) -> Iterator[None]:
    """Set each (class, attribute, replacement) for the duration of the block, then restore the originals."""
    saved = [(cls, name, cls.__dict__.get(name)) for cls, name, _ in patches]
    try:
        for cls, name, replacement in patches:
            setattr(cls, name, replacement)
        yield
    finally:
        for cls, name, original in saved:
            if original is None:  # the class inherited it: drop the patch so inheritance applies again
                delattr(cls, name)
            else:
                setattr(cls, name, original)

