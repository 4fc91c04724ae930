"""The per-architecture data of ``architectures.yaml``: shrink fixes, exclusions, cache-layout facts."""

from __future__ import annotations

import copy
from functools import lru_cache
from importlib import resources
from typing import Any

from kvconform.strict_yaml import load_yaml


@lru_cache(maxsize=1)
def architecture_table() -> dict[str, Any]:
    """The parsed architectures.yaml (read once)."""
    text = resources.files("kvconform.build").joinpath("architectures.yaml").read_text()
    return load_yaml(text) or {}


def load_architecture_table() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(per-model_type config overrides, excluded model_type -> reason)."""
    table = architecture_table()
    return copy.deepcopy(table.get("overrides") or {}), dict(table.get("excluded") or {})


def cache_layout_facts() -> dict[str, dict[str, Any]]:
    """model_type -> cache-layout facts its modeling code hard-codes rather than states in the config."""
    return dict(architecture_table().get("cache_layout") or {})


def default_sub_configs() -> dict[str, dict[str, dict[str, Any]]]:
    """model_type -> the sub-configs a composite config's class required up to 5.9 (name -> model_type or class)."""
    return copy.deepcopy(architecture_table().get("default_sub_configs") or {})
