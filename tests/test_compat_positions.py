"""compat.feed_cache_position: the cache_position generate() fed, for forwards that take one (5.0-5.3)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from kvconform.compat import feed_cache_position


class _StateCache:
    """A recurrent cache without ``get_seq_length`` (5.0's ``MambaCache``)."""


class _Recurrent(torch.nn.Module):
    """Raises like 5.0's mamba when a cache comes without ``cache_position``; returns the positions it got."""

    def forward(self, input_ids: torch.Tensor, cache_params: Any = None, cache_position: Any = None,
                use_cache: bool = True) -> SimpleNamespace:
        if cache_params is not None and cache_position is None:
            raise ValueError("You have to specify the `cache_position` manually")
        return SimpleNamespace(cache_params=cache_params or _StateCache(), positions=cache_position)


class _Attention(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor, past_key_values: Any = None) -> SimpleNamespace:
        return SimpleNamespace(past_key_values=past_key_values)


def test_positions_continue_from_tokens_fed() -> None:
    model = _Recurrent()
    assert feed_cache_position(model)
    assert not feed_cache_position(model)  # installed once
    prompt = model(input_ids=torch.zeros(2, 5, dtype=torch.long))
    assert prompt.positions is None  # no cache passed: the model starts its own, as generate's prefill did
    step = model(input_ids=torch.zeros(2, 1, dtype=torch.long), cache_params=prompt.cache_params)
    assert step.positions.tolist() == [5]
    step = model(input_ids=torch.zeros(2, 2, dtype=torch.long), cache_params=step.cache_params)
    assert step.positions.tolist() == [6, 7]


def test_seq_length_and_given_positions_win() -> None:
    model = _Recurrent()
    feed_cache_position(model)
    cache = SimpleNamespace(get_seq_length=lambda: 9)
    assert model(input_ids=torch.zeros(1, 2, dtype=torch.long), cache_params=cache).positions.tolist() == [9, 10]
    given = torch.tensor([3])
    assert model(input_ids=torch.zeros(1, 1, dtype=torch.long), cache_params=cache, cache_position=given).positions is given


def test_forward_without_cache_position_is_left_alone() -> None:
    model = _Attention()
    assert not feed_cache_position(model)
    assert not model._forward_pre_hooks and not model._forward_hooks


def test_a_copied_cache_keeps_its_count() -> None:
    import copy

    model = _Recurrent()
    feed_cache_position(model)
    cache = model(input_ids=torch.zeros(1, 4, dtype=torch.long)).cache_params
    assert model(input_ids=torch.zeros(1, 3, dtype=torch.long), cache_params=copy.deepcopy(cache)).positions.tolist() == [4, 5, 6]


def test_generation_positions_only_where_the_forward_takes_them() -> None:
    from kvconform.compat import generation_positions

    assert generation_positions(_Recurrent(), 7, 2)["cache_position"].tolist() == [7, 8]
    assert generation_positions(_Attention(), 7, 2) == {}


class _Stateful(_Recurrent):
    """A model generate() builds no cache for: its input preparation makes one (``made``)."""

    made: Any = None

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        return {"input_ids": input_ids, "cache_params": self.made}


def test_generation_cache_leaves_a_cache_without_a_count_to_the_forward() -> None:
    from kvconform.probe.cache_io import generation_cache

    model, ids = _Stateful(), torch.zeros(1, 3, dtype=torch.long)
    model.made = _StateCache()  # 5.0's MambaCache: generate() fed it arange(conv_kernel), which the forward makes itself
    assert generation_cache(model, ids) is None
    model.made = SimpleNamespace(get_seq_length=lambda: 0)  # 5.0-5.4's hybrid caches: the forward needs this one
    assert generation_cache(model, ids) is model.made


def test_record_past_passes_the_crop_count_where_the_release_takes_it() -> None:
    from kvconform.compat import record_past

    calls: list[dict[str, Any]] = []

    class Keyword:  # 5.25's Cache: forwards **kwargs to its layers
        def activate_past_recording(self, **kwargs: Any) -> None:
            calls.append(kwargs)

    class Bare:  # 5.15-5.24
        def activate_past_recording(self) -> None:
            calls.append({})

    assert record_past(Keyword(), 3) and record_past(Bare(), 3)
    assert calls == [{"recurrent_states_to_keep": 3}, {}]
    assert not record_past(object(), 3)  # before 5.15: no recording


class _EncoderDecoder(torch.nn.Module):
    """An outer encoder-decoder forward given both the encoder's ids and the decoder's (Florence-2's)."""

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor, past_key_values: Any = None,
                cache_position: Any = None, use_cache: bool = True) -> SimpleNamespace:
        return SimpleNamespace(past_key_values=past_key_values, positions=cache_position)


def test_an_encoder_decoder_call_is_left_alone() -> None:
    model = _EncoderDecoder()
    feed_cache_position(model)
    cache = SimpleNamespace(get_seq_length=lambda: 0)
    out = model(input_ids=torch.zeros(2, 22, dtype=torch.long), decoder_input_ids=torch.zeros(2, 6, dtype=torch.long),
                past_key_values=cache)
    assert out.positions is None  # not the encoder's 22 positions: the decoder numbers its own tokens


class _OwnState(torch.nn.Module):
    """A forward that takes no cache (RecurrentGemma up to 5.3 keeps its state in its layers)."""

    def forward(self, input_ids: torch.Tensor, cache_position: Any = None, use_cache: bool = True) -> None:
        return None


def test_a_model_that_takes_no_cache_has_no_cache_cells() -> None:
    from kvconform.build.support import state_support
    from kvconform.compat import taken_cache_keyword

    assert taken_cache_keyword(_OwnState.forward) is None
    assert taken_cache_keyword(_Recurrent.forward) == "cache_params"
    assert taken_cache_keyword(_Attention.forward) == "past_key_values"
    reason = state_support(_OwnState)
    assert reason is not None and "_OwnState.forward takes no cache argument" in reason
    assert state_support(_Attention) is None
