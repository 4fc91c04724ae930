"""Cells: one model × dtype × device × cache implementation, with ids a person can type into ``-k``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvconform.check_table import CHECKS
from kvconform.matrix import Matrix, ModelSpec, Tolerance


@dataclass(frozen=True)
class Cell:
    """One probe run: every check of the cell reads the same record."""

    spec: ModelSpec
    dtype: str
    device: str
    cache: str

    @property
    def id(self) -> str:
        return f"{self.spec.id}[{self.dtype}-{self.device}-{self.cache}]"

    @property
    def tolerance(self) -> Tolerance:
        return self.spec.settings.tolerances[self.dtype]


def check_applies(check: str, cell: Cell) -> bool:
    """Whether ``check`` runs on ``cell`` (see the check table: its families, setting and dtypes)."""
    return CHECKS[check].applies(cell.spec.settings, cell.dtype, cell.spec.family)


def ragged_row_lengths(batch_size: int, prompt_length: int) -> list[int]:
    """Unpadded prompt lengths of the ragged path's rows: P, P-1, … (at least 2 tokens each)."""
    return [max(2, prompt_length - row) for row in range(batch_size)]


def untestable(check: str, cell: Cell) -> str | None:
    """Why an enabled check could not fail on ``cell`` (it is skipped with this reason), or ``None``."""
    settings = cell.spec.settings
    lengths = ragged_row_lengths(settings.batch_size, settings.prompt_length)
    if check == "ragged" and len(set(lengths)) < 2:
        return (f"ragged: batch_size {settings.batch_size} and prompt_length {settings.prompt_length} give rows of "
                f"lengths {lengths}, so no row is padded; it needs batch_size >= 2 and prompt_length >= 3")
    return None


def expand_cells(matrix: Matrix) -> list[Cell]:
    """Every cell of the matrix, grouped by model (a model's cells stay together)."""
    return [
        Cell(spec, dtype, device, cache)
        for spec in matrix.models
        for device in spec.settings.devices
        for dtype in spec.settings.dtypes
        for cache in spec.settings.caches
    ]


def shard(matrix: Matrix, index: int, count: int) -> Matrix:
    """The ``index``-th of ``count`` deterministic shards, split by model (1-based index)."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: need count >= 1 and 1 <= index <= count")
    return replace(matrix, models=tuple(m for n, m in enumerate(matrix.models) if n % count == index - 1))
