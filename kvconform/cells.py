"""Cells: one model × dtype × device × cache × attention implementation, with ids a person can type into ``-k``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvconform.checks.table import CHECK_ORDER, CHECKS
from kvconform.families import CAUSAL_LM, FAMILY_CACHES
from kvconform.matrix import QUANTIZED_KINDS, Matrix, ModelSpec, Tolerance, missing_backend
from kvconform.plan import NOT_APPLICABLE
from kvconform.probe.ragged_rows import ragged_row_lengths

#: The attention implementation whose cells keep the short id (``llama[float32-cpu-static]``).
DEFAULT_ATTENTION = "sdpa"


@dataclass(frozen=True)
class Cell:
    """One probe run: every check of the cell reads the same record."""

    spec: ModelSpec
    dtype: str
    device: str
    cache: str
    attn: str = DEFAULT_ATTENTION
    model_attn: str = DEFAULT_ATTENTION
    """The attention implementation the model runs by default (eager where it has no sdpa)."""

    @property
    def id(self) -> str:
        suffix = "" if self.attn == DEFAULT_ATTENTION else f"-{self.attn}"
        return f"{self.spec.id}[{self.dtype}-{self.device}-{self.cache}{suffix}]"

    @property
    def tolerance(self) -> Tolerance:
        return self.spec.settings.tolerances[self.dtype]

    @property
    def is_variant(self) -> bool:
        """Any cell but the model's default path (dynamic cache, sdpa attention)."""
        return self.cache != "dynamic" or self.attn != self.model_attn


def check_applies(check: str, cell: Cell) -> bool:
    """Whether ``check`` runs on ``cell`` (see the check table: its families, setting, dtypes, caches, attention)."""
    return CHECKS[check].applies(cell.spec.settings, cell.dtype, cell.spec.family, cell.cache, cell.attn == cell.model_attn)


def untestable(check: str, cell: Cell) -> str | None:
    """Why an enabled check could not fail on ``cell`` (it is skipped with this reason), or ``None``."""
    missing = missing_backend(cell.cache)
    if missing is not None:
        return missing
    settings = cell.spec.settings
    lengths = ragged_row_lengths(settings.batch_size, settings.prompt_length)
    if check == "ragged" and len(set(lengths)) < 2:
        return (f"ragged: batch_size {settings.batch_size} and prompt_length {settings.prompt_length} give rows of "
                f"lengths {lengths}, so no row is padded; it needs batch_size >= 2 and prompt_length >= 3")
    return None


def cache_axes(spec: ModelSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The caches and attentions ``spec`` runs: its settings' for causal LMs; for the other families those of its
    settings' caches the family runs (``FAMILY_CACHES``), with the model's own attention."""
    if spec.family == CAUSAL_LM:
        return spec.settings.caches, spec.settings.attentions
    return tuple(cache for cache in spec.settings.caches if cache in FAMILY_CACHES[spec.family]), (DEFAULT_ATTENTION,)


#: Why a cell of the matrix axes is not planned (``plan.unplanned`` of a report; plain text a diff can group).
NO_SDPA = "the model has no sdpa attention in this release: its eager cells are its default path"
QUANTIZED_ONE_ATTENTION = "the quantized cache runs with the model's default attention only"
STATIC_ONE_ATTENTION = ("the static cache runs with the model's default attention only (on 5.24 each of 163 static cells "
                        "under another attention gave its default-attention cell's verdict on every check: docs/performance.md)")
VARIANT_DTYPES = ("variant cells (a cache other than dynamic, or an attention other than the model's default) "
                  "run in variant_dtypes {dtypes} only")


def _candidates(spec: ModelSpec, model_attn: str) -> list[tuple[Cell, str | None]]:
    """Every cell of ``spec``'s axes with why it is not planned (``None``: it is)."""
    settings = spec.settings
    caches, wanted = cache_axes(spec)
    attentions = list(wanted)
    if model_attn != DEFAULT_ATTENTION and DEFAULT_ATTENTION in wanted and model_attn not in attentions:
        attentions.append(model_attn)
    found = []
    for device in settings.devices:
        for dtype in settings.dtypes:
            for cache in caches:
                for attn in attentions:
                    cell = Cell(spec, dtype, device, cache, attn, model_attn)
                    if attn == DEFAULT_ATTENTION and model_attn != DEFAULT_ATTENTION:
                        reason: str | None = NO_SDPA
                    elif cache in QUANTIZED_KINDS and attn != model_attn:
                        # A quantized layer hands dequantized K/V to whatever attention runs: one attention suffices.
                        reason = QUANTIZED_ONE_ATTENTION
                    elif cache == "static" and attn != model_attn:
                        reason = STATIC_ONE_ATTENTION
                    elif cell.is_variant and settings.variant_dtypes is not None and dtype not in settings.variant_dtypes:
                        reason = VARIANT_DTYPES.format(dtypes=list(settings.variant_dtypes))
                    else:
                        reason = None
                    found.append((cell, reason))
    return found


def plan_cells(matrix: Matrix, model_attention: Callable[[ModelSpec], str] | None = None,
               ) -> tuple[list[Cell], list[tuple[Cell, str]]]:
    """The planned cells of the matrix, grouped by model (a model's cells stay together), and the cells of
    its axes left out, each with the reason.

    ``model_attention(spec)`` is the attention the model runs by default: a model without sdpa gets no
    sdpa cells, and its eager cells are its default path. Variant cells (a cache other than dynamic, or
    an attention other than the model's default) run in ``variant_dtypes`` when set.
    """
    planned, unplanned = [], []
    for spec in matrix.models:
        model_attn = model_attention(spec) if model_attention and spec.family == CAUSAL_LM else DEFAULT_ATTENTION
        for cell, reason in _candidates(spec, model_attn):
            if reason is None:
                planned.append(cell)
            else:
                unplanned.append((cell, reason))
    return planned, unplanned


def expand_cells(matrix: Matrix, model_attention: Callable[[ModelSpec], str] | None = None) -> list[Cell]:
    """Every planned cell of the matrix (:func:`plan_cells`)."""
    return plan_cells(matrix, model_attention)[0]


def plan_field(planned: Iterable[Cell], unplanned: Iterable[tuple[Cell, str]],
               skipped: Iterable[Mapping[str, Any]], selection: list[str]) -> dict[str, Any]:
    """The ``plan`` field of a report (``kvconform.plan``) from the planned cells, the left-out cells with
    reasons, the skipped result rows (``cell_id``, ``check``, ``reason``) and the narrowing options."""
    planned, unplanned = list(planned), list(unplanned)
    by_checks: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for cell in planned:
        by_checks[tuple(check for check in CHECK_ORDER if check_applies(check, cell))].append(cell.id)
    left_out: dict[str, list[str]] = defaultdict(list)
    for cell, reason in unplanned:
        left_out[reason].append(cell.id)
    not_applicable: dict[str, list[str]] = defaultdict(list)
    for row in skipped:
        if str(row.get("reason", "")).startswith(NOT_APPLICABLE):
            not_applicable[row["reason"]].append(f"{row['cell_id']}::{row['check']}")
    return {
        "models": {cell.spec.id: {"attention": cell.model_attn} for cell in [*planned, *(cell for cell, _ in unplanned)]},
        "planned": [{"checks": list(checks), "cells": sorted(ids)} for checks, ids in sorted(by_checks.items())],
        "unplanned": [{"reason": reason, "cells": sorted(ids)} for reason, ids in sorted(left_out.items())],
        "not_applicable": [{"reason": reason, "keys": sorted(keys)} for reason, keys in sorted(not_applicable.items())],
        "selection": selection,
    }


def shard(matrix: Matrix, index: int, count: int) -> Matrix:
    """The ``index``-th of ``count`` deterministic shards, split by model (1-based index)."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: need count >= 1 and 1 <= index <= count")
    return replace(matrix, models=tuple(m for n, m in enumerate(matrix.models) if n % count == index - 1))
