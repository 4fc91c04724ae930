"""Cells: one model × dtype × device × cache × attention implementation, with ids a person can type into ``-k``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from kvconform.matrix import QUANTIZED, Matrix, ModelSpec, Tolerance

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


#: Checks that run only on some cells: the cell's setting of that name enables them.
OPTIONAL_CHECKS = (
    "ragged", "prefix_reuse", "generate", "beam", "reorder", "crop", "padded_generate", "attn_agreement", "quantized_kv",
)
#: Checks whose reference is a full-precision run the fp8 cache leaves by design (its frozen scale saturates), or
#: that compare with a run of another calibration (a per-batch scale: ragged; a prefix's scale: prefix_reuse);
#: quantized cells are judged against the fp8 design instead (README, "Cache paths").
FULL_PRECISION_CHECKS = ("generate", "padded_generate", "ragged", "prefix_reuse", "crop")
#: Checks that compare token choices, run in float32 only (lower precisions flip near-ties).
FLOAT32_CHECKS = ("generate", "beam", "reorder", "padded_generate", "attn_agreement")


def check_applies(check: str, cell: Cell) -> bool:
    """Whether ``check`` runs on ``cell`` (optional checks are enabled per model)."""
    if check not in OPTIONAL_CHECKS:
        return True
    if check in FLOAT32_CHECKS and cell.dtype != "float32":
        return False
    if check == "beam" and cell.cache != "dynamic":
        return False  # other caches: their reorder_cache is checked directly (reorder), see reorder.py
    if check == "reorder":
        return cell.cache != "dynamic" and cell.spec.settings.beam
    if check == "padded_generate" and cell.attn != cell.model_attn:
        return False  # the ragged path already decodes a left-padded batch with this attention (README, "Performance")
    if check == "quantized_kv":
        return cell.cache == QUANTIZED
    if cell.cache == QUANTIZED and check in FULL_PRECISION_CHECKS:
        return False
    if check == "attn_agreement":
        return cell.attn != cell.model_attn and cell.cache == "dynamic"
    return bool(getattr(cell.spec.settings, check))


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


def expand_cells(matrix: Matrix, model_attention: Callable[[ModelSpec], str] | None = None) -> list[Cell]:
    """Every cell of the matrix, grouped by model (a model's cells stay together).

    ``model_attention(spec)`` is the attention the model runs by default: a model without sdpa gets no
    sdpa cells, and its eager cells are its default path. Variant cells (a cache other than dynamic, or
    an attention other than the model's default) run in ``variant_dtypes`` when set.
    """
    cells = []
    for spec in matrix.models:
        settings = spec.settings
        model_attn = model_attention(spec) if model_attention else DEFAULT_ATTENTION
        attentions = [a for a in settings.attentions if model_attn == DEFAULT_ATTENTION or a != DEFAULT_ATTENTION]
        if model_attn != DEFAULT_ATTENTION and DEFAULT_ATTENTION in settings.attentions and model_attn not in attentions:
            attentions.append(model_attn)
        for device in settings.devices:
            for dtype in settings.dtypes:
                for cache in settings.caches:
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
