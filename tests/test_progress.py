"""Progress that means something: models done of models planned and the time left, from the controller, under xdist."""

from __future__ import annotations

import re

import pytest

from kvconform import progress
from kvconform.progress import ModelProgress, format_duration, progress_line
from tests.inner import Inner

LINE = re.compile(r"^kvconform: (\d+) of (\d+) models done \(([\d,]+) of ([\d,]+) checks\) in [^;]+(; about .+ left at this pace)?$")


def test_durations_read_like_a_clock() -> None:
    assert [format_duration(s) for s in (0.4, 59.6, 185, 3725)] == ["0 s", "1 min 00 s", "3 min 05 s", "1 h 02 min"]


def test_the_estimate_is_the_pace_so_far_over_the_checks_left() -> None:
    assert progress_line(1, 4, 25, 100, 60) == "1 of 4 models done (25 of 100 checks) in 1 min 00 s; about 3 min 00 s left at this pace"
    assert progress_line(4, 4, 100, 100, 240) == "4 of 4 models done (100 of 100 checks) in 4 min 00 s"


def test_a_model_is_done_when_its_last_planned_check_reports() -> None:
    counted = ModelProgress([("a", "a[x]::parity"), ("a", "a[y]::parity"), ("b", "b[x]::parity")])
    assert (counted.models, counted.checks) == (2, 3)
    assert counted.finish("a", "a[x]::parity") and counted.models_done == 0
    assert not counted.finish("a", "a[x]::parity")  # a second report of the same test counts once
    assert not counted.finish("c", "c[x]::parity")  # not planned
    assert counted.finish("a", "a[y]::parity") and (counted.models_done, counted.checks_done) == (1, 2)


def test_a_distributed_run_shows_models_done_and_the_time_left(inner: Inner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over two xdist workers (the controller counts the workers' reports), a line each time a test ends when the
    interval is 0, the models counted up to all of them, and the final count in the terminal summary."""
    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "-n", "2", "-q")
    during, summary = run.out.split("kvconform ===", 1)
    lines = [match for line in during.splitlines() if (match := LINE.match(line.strip()))]
    planned = run.doc()["run"]["planned"]
    assert len(lines) >= 2, run.out[-3000:]
    assert {int(line[2]) for line in lines} == {3} and {int(line[4].replace(",", "")) for line in lines} == {planned}
    done = [(int(line[1]), int(line[3].replace(",", ""))) for line in lines]
    assert done == sorted(done) and done[-1] == (3, planned), done
    assert all(line[5] for line in lines if int(line[3].replace(",", "")) < planned)
    assert f"kvconform: 3 of 3 models done ({planned} of {planned} checks) in " in summary, summary
