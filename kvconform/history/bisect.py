"""Bisect one cell and check over a list of releases: the first release whose verdict differs from the first's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvconform.diff import parity_peak
from kvconform.report import Doc

#: Outcomes of a check that holds (an xpass holds; its known-failure entry is what is wrong).
GOOD = ("pass", "xpass")


@dataclass(frozen=True)
class Step:
    """One release's verdict on the bisected cell and check."""

    release: str
    outcome: str
    """The result's outcome, or ``absent`` when the release's report has no such result."""
    peak: float | None
    """The largest per-step parity Δ, where the check records one."""
    limit: str
    message: str

    @property
    def good(self) -> bool:
        return self.outcome in GOOD

    def line(self) -> str:
        delta = f"Δ {self.peak:.3g}" if self.peak is not None else "Δ —"
        limit = f" (limit {self.limit})" if self.limit else ""
        first = self.message.strip().splitlines()[0][:120] if self.message.strip() else ""
        return f"{self.release:>8}  {'good' if self.good else 'BAD ':4}  {self.outcome:7} {delta}{limit}  {first}".rstrip()


def step_of(doc: Doc, release: str, cell_id: str, check: str) -> Step:
    """The verdict of ``(cell_id, check)`` in one release's report."""
    result: dict[str, Any] | None = next((r for r in doc.get("results", []) if r["cell_id"] == cell_id and r["check"] == check),
                                         None)
    if result is None:
        return Step(release, "absent", None, "", "the release's run has no such result (not planned or unknown there)")
    return Step(release, result["outcome"], parity_peak(result), result.get("limit", ""), result.get("message", ""))


def bisect(releases: Sequence[str], verdict: Callable[[str], Step], on_step: Callable[[Step], None] = lambda step: None
           ) -> tuple[list[Step], Step | None]:
    """Every step run and the first release whose good/bad state differs from the first release's (``None`` when
    the last release agrees with the first: no change to find). Assumes one change in the range, as bisection does;
    a release whose result is absent stops the search with a ``ValueError``."""
    if len(releases) < 2:
        raise ValueError(f"bisect needs at least two releases, got {list(releases)}")
    steps: list[Step] = []

    def run(index: int) -> Step:
        step = verdict(releases[index])
        steps.append(step)
        on_step(step)
        if step.outcome == "absent":
            raise ValueError(f"{step.release}: {step.message}; bisect a range where the cell runs")
        return step

    low, high = 0, len(releases) - 1
    start, end = run(low), run(high)
    if start.good == end.good:
        return steps, None
    found = end
    while high - low > 1:
        middle = (low + high) // 2
        step = run(middle)
        if step.good == start.good:
            low = middle
        else:
            high, found = middle, step
    return steps, found
