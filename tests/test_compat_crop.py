"""compat.not_croppable_layers: a cache's own ``is_croppable`` where the release has it, its layers' ``crop`` before."""

from __future__ import annotations

from typing import Any

import pytest

from kvconform import compat


class Croppable:
    def crop(self, tokens: int) -> None:
        """A layer with the method (DynamicLayer in every release)."""


class Uncroppable:
    """A layer without it (StaticLayer up to 5.16)."""


class Cache:
    def __init__(self, *layers: Any, flag: bool | None = None) -> None:
        self.layers = list(layers)
        if flag is not None:
            self.is_croppable = flag

    def crop(self, tokens: int) -> None:
        """Crops every layer, as Cache.crop does."""


def test_before_5_17_a_cache_is_croppable_when_every_layer_has_crop() -> None:
    assert compat.not_croppable_layers(Cache(Croppable(), Croppable())) is None
    assert compat.not_croppable_layers(Cache(Croppable(), Uncroppable())) == ["Uncroppable"]


def test_a_cache_without_crop_is_not_croppable() -> None:
    assert compat.not_croppable_layers(object()) == ["object"]


def test_the_flag_of_5_17_wins_over_the_methods() -> None:
    layer = Croppable()
    layer.is_croppable = False  # type: ignore[attr-defined]  # a sliding layer past its window (5.17+)
    assert compat.not_croppable_layers(Cache(layer, flag=False)) == ["Croppable"]
    assert compat.not_croppable_layers(Cache(Uncroppable(), flag=True)) is None


class Recorded(Cache):
    def __init__(self, length: int) -> None:
        super().__init__()
        self.length, self.calls = length, []

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens: int) -> None:  # type: ignore[override]
        self.calls.append(tokens)


def test_crop_off_makes_the_call_of_the_release_s_assisted_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    compat.assisted_crops_by_count.cache_clear()
    monkeypatch.setattr(compat.inspect, "getsource", lambda _: "outputs.past_key_values.crop(new_cur_len - 1)\n")
    cache = Recorded(9)
    assert compat.crop_off(cache, 3) == "crop(6)" and cache.calls == [6]  # 5.0-5.13: the length to keep
    compat.assisted_crops_by_count.cache_clear()
    monkeypatch.setattr(compat.inspect, "getsource", lambda _: "outputs.past_key_values.crop(-number_of_tokens_to_crop)\n")
    cache = Recorded(9)
    assert compat.crop_off(cache, 3) == "crop(-3)" and cache.calls == [-3]  # 5.14+
    compat.assisted_crops_by_count.cache_clear()


def test_crop_0_empties_a_cache_whose_crop_takes_the_length_to_keep() -> None:
    class Legacy:
        def crop(self, max_length: int) -> None:
            """5.0-5.14's DynamicCache.crop."""

    class Current:
        def crop(self, tokens_to_remove: int) -> None:
            """5.15+."""

    assert compat.crop_counts_removed_tokens(Legacy()) is False
    assert compat.crop_counts_removed_tokens(Current()) is True
