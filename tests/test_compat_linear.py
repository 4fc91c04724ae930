"""compat.all_linear: a cache of linear-attention layers only, read from ``Cache.is_linear`` (5.13+) or its layers (5.5-5.12)."""

from __future__ import annotations

from types import SimpleNamespace

from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

from kvconform.compat import all_linear


def test_is_linear_wins_where_the_cache_has_it() -> None:
    assert all_linear(SimpleNamespace(is_linear=[True, True]))
    assert not all_linear(SimpleNamespace(is_linear=[True, False]))
    assert not all_linear(SimpleNamespace(is_linear=[]))


def test_layers_read_as_is_linear_reads_them_where_the_property_is_missing() -> None:
    """5.5-5.12's caches hold LinearAttentionLayer objects but no ``is_linear`` (mamba2's StaticCache there)."""
    assert all_linear(SimpleNamespace(layers=[LinearAttentionLayer(), LinearAttentionLayer()]))
    assert not all_linear(SimpleNamespace(layers=[LinearAttentionLayer(), DynamicLayer()]))


def test_caches_without_layers_have_none() -> None:
    """5.0-5.4's MambaCache, xLSTM's cache: neither the property nor layers."""
    assert not all_linear(SimpleNamespace())
    assert not all_linear(SimpleNamespace(layers=[]))
