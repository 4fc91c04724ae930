"""Cells: one model × dtype × device × cache implementation, with ids a person can type into ``-k``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvconform.families import CAUSAL_LM, EXTRA_CHECKS, family_checks
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


#: Checks that run only on some cells: the cell's setting of that name enables them; generate runs in float32.
OPTIONAL_CHECKS = ("ragged", "prefix_reuse", "generate")


def check_applies(check: str, cell: Cell) -> bool:
    """Whether ``check`` runs on ``cell`` (optional checks are enabled per model; family cells run their family's)."""
    if cell.spec.family != CAUSAL_LM:
        return check in family_checks(cell.spec.family)
    if any(check in extra for extra in EXTRA_CHECKS.values()):
        return False
    if check not in OPTIONAL_CHECKS:
        return True
    return bool(getattr(cell.spec.settings, check)) and (check != "generate" or cell.dtype == "float32")


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
