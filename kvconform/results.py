"""Plain-data records that flow from the checks to the reports (no torch, no pytest)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1

#: Outcomes a cell/check can have in a report.
OUTCOMES = ("pass", "fail", "skip", "xfail", "xpass", "error", "crashed")
"""``xpass``: a check marked as a known failure passed (the model may have been fixed)."""


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check on one probe record.

    ``measured`` and ``limit`` are short human-readable figures (e.g. ``"3.1e-05"`` vs ``"1.2e-03"``);
    ``details`` holds plain builtin data for reports (e.g. per-step deltas).
    """

    name: str
    passed: bool
    measured: str
    limit: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
