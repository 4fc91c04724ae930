"""Plain-data records that flow from the checks to the reports (no torch, no pytest)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypedDict, get_args

SCHEMA_VERSION = 3

#: Outcomes a cell/check can have in a report. ``xpass``: a check marked as a known failure passed.
Outcome = Literal["pass", "fail", "skip", "xfail", "xpass", "error", "crashed"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


class _RequiredRow(TypedDict):
    cell_id: str
    model: str
    dtype: str
    device: str
    cache: str
    check: str
    outcome: Outcome
    measured: str
    limit: str
    figure: dict[str, Any] | None
    message: str
    details: dict[str, Any]
    duration_s: float
    nodeid: str


class ResultRow(_RequiredRow, total=False):
    """One check on one cell, as ``conformance.json`` stores it (``conformance.schema.json``, ``$defs/result``)."""

    attn: str
    """The attention implementation (``sdpa``, ``eager``); absent in reports written before cache paths."""
    reason: str
    """Why a check was an xfail, xpass or skip (the matrix entry's evidence)."""
    xfail_kind: str
    """The known failure's kind: ``model bug``, ``model limitation`` or ``not testable``."""
    nonfinite: list[str]
    """Paths of values that were not finite and are written as null."""

#: A figure's value: a number, or a shape (list of integers).
Value = int | float | list[int] | None
#: How a check compares its measured value with its limit.
BOUNDS = ("at_most", "equal")


@dataclass(frozen=True)
class Figure:
    """The numbers behind a check's display strings, for machines.

    ``bound`` says how the check compares them: ``at_most`` (passes when measured ≤ limit, e.g. a
    logit Δ against a tolerance) or ``equal`` (measured must equal the expected value, e.g. bytes).
    """

    measured: Value
    limit: Value
    unit: str
    bound: str = "at_most"

    @property
    def ratio(self) -> float | None:
        """``measured / limit`` when both are numbers and the limit is not zero."""
        if not (_is_number(self.measured) and _is_number(self.limit)) or self.limit == 0:
            return None
        return self.measured / self.limit  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        return {"measured": self.measured, "limit": self.limit, "unit": self.unit, "bound": self.bound,
                "ratio": self.ratio}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check on one probe record.

    ``measured`` and ``limit`` are short human-readable figures (e.g. ``"3.1e-05"`` vs ``"1.2e-03"``);
    ``figure`` holds the same as numbers with a unit; ``details`` holds plain builtin data for
    reports (e.g. per-step deltas; every field is documented in the report schema).
    """

    name: str
    passed: bool
    measured: str
    limit: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    figure: Figure | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain builtin data: a tensor a check left in its details (``get_seq_length()`` returns one in some releases)
        becomes its Python value, so the report (and xdist, which sends only builtins) can take it."""
        data = plain(asdict(self))
        data["figure"] = self.figure.to_dict() if self.figure is not None else None
        return data


def plain(value: Any) -> Any:
    """``value`` with every tensor-like (anything with ``tolist()``, such as a torch or numpy scalar or array) at any
    depth replaced by its Python value."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) and not isinstance(value, (str, bytes)) else value
