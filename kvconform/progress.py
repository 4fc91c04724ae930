"""Progress that means something: models done of models planned, and an estimate of the time left.

pytest's percentage counts test items, and a model's items cost anything from milliseconds (a shrunk sweep model)
to minutes (Gemma's cells), so the controller (the only process, or xdist's) counts models instead: a model is
done when every check the run planned for it has reported. A line at most once every ``INTERVAL_S`` (none in a
shorter run), and one in the terminal summary.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import pytest

#: Seconds between two progress lines: none in a shorter run.
INTERVAL_S = 60.0


def format_duration(seconds: float) -> str:
    """``45 s``, ``3 min 05 s``, ``1 h 02 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def progress_line(models_done: int, models: int, checks_done: int, checks: int, elapsed_s: float) -> str:
    """``12 of 196 models done (1,020 of 9,733 checks) in 2 min 10 s; about 18 min 30 s left at this pace``.

    The estimate assumes the checks left cost what the finished ones cost on average."""
    text = f"{models_done} of {models} models done ({checks_done:,} of {checks:,} checks) in {format_duration(elapsed_s)}"
    if 0 < checks_done < checks and elapsed_s > 0:
        text += f"; about {format_duration(elapsed_s * (checks - checks_done) / checks_done)} left at this pace"
    return text


class ModelProgress:
    """Checks left per model, fed with the planned ``(model, test)`` keys and each finished test's key."""

    def __init__(self, planned: Iterable[tuple[str, str]]) -> None:
        self.left: dict[str, set[str]] = defaultdict(set)
        for model, key in planned:
            self.left[model].add(key)
        self.models = len(self.left)
        self.checks = sum(map(len, self.left.values()))
        self.checks_done = 0

    @property
    def models_done(self) -> int:
        return sum(1 for keys in self.left.values() if not keys)

    def finish(self, model: str, key: str) -> bool:
        """Count ``key`` done; whether it was planned and not counted before."""
        keys = self.left.get(model)
        if keys is None or key not in keys:
            return False
        keys.discard(key)
        self.checks_done += 1
        return True


class ProgressReporter:
    """Controller-side pytest plugin: a progress line now and then while the run lasts.

    ``planned`` gives the ``(model, test key)`` pairs once collection has finished (under xdist, once every worker
    has sent its ids); ``key_of`` maps a conformance test's report to its ``(model, test key)`` and whether the
    report ends that test (its teardown, or the crash of its worker), or gives ``None`` for any other test."""

    def __init__(self, config: pytest.Config, planned: Callable[[], Iterable[tuple[str, str]]],
                 key_of: Callable[[pytest.TestReport], tuple[str, str, bool] | None], interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.planned = planned
        self.key_of = key_of
        self.interval_s = interval_s
        self.clock = clock
        self.progress: ModelProgress | None = None
        self.started = 0.0
        self.last_line = 0.0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = self.key_of(report)
        if found is None:
            return
        model, key, ends = found
        now = self.clock()
        if self.progress is None:
            self.progress = ModelProgress(self.planned())
            self.started = self.last_line = now - report.duration
        if not ends or not self.progress.finish(model, key) or now - self.last_line < self.interval_s:
            return
        self.last_line = now
        terminal: Any = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None and self.config.get_verbosity() >= -1:  # -q shows it too, -qq not
            if getattr(getattr(terminal, "_tw", None), "width_of_current_line", 0):
                terminal.write("\n")  # after a row of dots (xdist sets no current file, so write_line would not break it)
            terminal.write_line(f"kvconform: {self.summary(now)}")

    def summary(self, now: float | None = None) -> str | None:
        """The progress line for now, or ``None`` before any conformance test reported."""
        if self.progress is None:
            return None
        progress = self.progress
        return progress_line(progress.models_done, progress.models, progress.checks_done, progress.checks,
                             (self.clock() if now is None else now) - self.started)
