"""compat.assisted_needs_generate_cache: read from generate()'s own assisted loop, not from a version number."""

from __future__ import annotations

import pytest

from kvconform import compat


@pytest.fixture(autouse=True)
def fresh() -> object:
    compat.assisted_needs_generate_cache.cache_clear()
    yield
    compat.assisted_needs_generate_cache.cache_clear()


def test_a_loop_that_crops_whatever_cache_it_gets_needs_none(monkeypatch: pytest.MonkeyPatch) -> None:
    # 5.0-5.13: no refusal; the loop crops outputs.past_key_values, the model's own cache where generate() built none
    monkeypatch.setattr(compat.inspect, "getsource", lambda _: "outputs.past_key_values.crop(new_cur_len - 1)\n")
    assert compat.assisted_needs_generate_cache() is False


def test_the_refusal_of_5_14_on_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat.inspect, "getsource", lambda _: 'raise RuntimeError("assisted decoding requires a cache")\n')
    assert compat.assisted_needs_generate_cache() is True
    compat.assisted_needs_generate_cache.cache_clear()
    # the 5.24 refusal of a cache that cannot be cropped is another one
    monkeypatch.setattr(compat.inspect, "getsource", lambda _: '"Assisted decoding requires a cache that can be cropped"\n')
    assert compat.assisted_needs_generate_cache() is False
