"""Cells: one model × dtype × device × cache × attention implementation, with ids a person can type into ``-k``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvconform.checks.table import CHECKS
from kvconform.families import CAUSAL_LM
from kvconform.matrix import QUANTIZED, Matrix, ModelSpec, Tolerance
from kvconform.probe.variants import ragged_row_lengths

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
    settings = cell.spec.settings
    lengths = ragged_row_lengths(settings.batch_size, settings.prompt_length)
    if check == "ragged" and len(set(lengths)) < 2:
        return (f"ragged: batch_size {settings.batch_size} and prompt_length {settings.prompt_length} give rows of "
                f"lengths {lengths}, so no row is padded; it needs batch_size >= 2 and prompt_length >= 3")
    return None


def cache_axes(spec: ModelSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The caches and attentions ``spec`` runs: its settings' for causal LMs; the dynamic cache with the model's
    own attention for the other families (the cache-path axes are built for causal LMs only)."""
    if spec.family == CAUSAL_LM:
        return spec.settings.caches, spec.settings.attentions
    return ("dynamic",), (DEFAULT_ATTENTION,)


def expand_cells(matrix: Matrix, model_attention: Callable[[ModelSpec], str] | None = None) -> list[Cell]:
    """Every cell of the matrix, grouped by model (a model's cells stay together).

    ``model_attention(spec)`` is the attention the model runs by default: a model without sdpa gets no
    sdpa cells, and its eager cells are its default path. Variant cells (a cache other than dynamic, or
    an attention other than the model's default) run in ``variant_dtypes`` when set.
    """
    cells = []
    for spec in matrix.models:
        settings = spec.settings
        caches, wanted = cache_axes(spec)
        model_attn = model_attention(spec) if model_attention and spec.family == CAUSAL_LM else DEFAULT_ATTENTION
        attentions = [a for a in wanted if model_attn == DEFAULT_ATTENTION or a != DEFAULT_ATTENTION]
        if model_attn != DEFAULT_ATTENTION and DEFAULT_ATTENTION in wanted and model_attn not in attentions:
            attentions.append(model_attn)
        for device in settings.devices:
            for dtype in settings.dtypes:
                for cache in caches:
                    # The fp8 layer hands dequantized K/V to whatever attention runs: one attention suffices.
                    for attn in attentions if cache != QUANTIZED else [a for a in attentions if a == model_attn][:1]:
                        cell = Cell(spec, dtype, device, cache, attn, model_attn)
                        if not cell.is_variant or settings.variant_dtypes is None or dtype in settings.variant_dtypes:
                            cells.append(cell)
    return cells


def shard(matrix: Matrix, index: int, count: int) -> Matrix:
    """The ``index``-th of ``count`` deterministic shards, split by model (1-based index)."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: need count >= 1 and 1 <= index <= count")
    return replace(matrix, models=tuple(m for n, m in enumerate(matrix.models) if n % count == index - 1))
