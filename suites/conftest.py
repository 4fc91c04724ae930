"""Fixtures shared by the conformance suites: one probe record per cell, verdicts into reports.

The runner (torch, transformers' cache classes) is imported by the first cell a process runs: an xdist controller
runs none, so it starts its workers without paying those imports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, NoReturn

import pytest

from kvconform.cells import Cell
from kvconform.families import half
from kvconform.known_failures import ExpectedFailure, known_failure
from kvconform.plugin import MODEL_KEY, RESULT_KEY, STATE, TIMING_KEY
from kvconform.results import CheckResult

if TYPE_CHECKING:
    from kvconform.runner import CellOutcome


@pytest.fixture
def outcome(cell: Cell, request: pytest.FixtureRequest) -> CellOutcome:
    """The cell's probe record (run once per cell per worker); a model that can't run fails its cells."""
    from kvconform.build.models import ModelRefused, ModelUnavailable
    from kvconform.runner import CellRunner

    state = request.config.stash[STATE]
    if state.runner is None:
        state.runner = CellRunner()
    first = cell.id not in state.runner.outcomes
    result = state.runner.outcome(cell)
    if first:
        timings = {"load_s": round(result.load_s, 4), "loads": state.runner.loads}
        if result.record is not None:
            timings.update({k: round(v, 4) for k, v in result.record.timings.items()})
        request.node.user_properties.append((TIMING_KEY, timings))
        if result.model_type is not None:
            request.node.user_properties.append((MODEL_KEY, {"model_type": result.model_type}))
    if isinstance(result.error, ModelUnavailable):
        if request.config.getoption("require_models"):
            pytest.fail(f"{result.error} (--require-models: a missing model fails its cells)", pytrace=False)
        if request.config.getoption("kvconform_models"):
            pytest.fail(f"{result.error} (named by --model: a model that is not available fails its cells)", pytrace=False)
        pytest.skip(str(result.error))
    if result.not_applicable is not None:
        pytest.skip(f"not applicable: {result.not_applicable}")
    reason = result.family.not_applicable.get(_check_name(request)) if result.family is not None else None
    if reason is not None:  # a check of the family the cell cannot take (FamilyProbe.not_applicable)
        pytest.skip(f"not applicable: {reason}")
    if result.path_failure is not None:
        return result  # the model ran up to this cell's path: its checks fail in the call (pytest_pyfunc_call)
    if result.error is not None:
        kind = "refused" if isinstance(result.error, ModelRefused) else f"{type(result.error).__name__}"
        _fail(cell, _check_name(request), f"{cell.id}: model could not be built, loaded or run ({kind}): {_summary(result.error)}")
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A cell whose cache path raised fails each of its checks (a FAIL, not a setup error) with the path's message."""
    from kvconform.runner import CellOutcome

    result = pyfuncitem.funcargs.get("outcome")
    if isinstance(result, CellOutcome) and result.path_failure is not None:
        _fail(pyfuncitem.funcargs["cell"], _check_name(pyfuncitem), result.path_failure)
    return None


def _check_name(request: pytest.FixtureRequest | pytest.Function) -> str:
    node = request if isinstance(request, pytest.Function) else request.node
    mark = node.get_closest_marker("kvconform_check")
    return mark.args[0] if mark else node.originalname.removeprefix("test_")


def _fail(cell: Cell, check: str, message: str) -> NoReturn:
    """Fail the test; the failure its known-failure entry expects is raised as ``ExpectedFailure`` (an xfail)."""
    known = known_failure(cell.spec.xfail, check, cell.dtype, cell.cache, cell.attn)
    if known is not None and known.matches(message):
        raise ExpectedFailure(message)
    if known is not None:
        message += f"\n(not the known failure: the matrix expects a failure mentioning {known.expect!r})"
    pytest.fail(message, pytrace=False)


def _summary(error: BaseException) -> str:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return (text or repr(error))[:500]


@pytest.fixture
def verdict(cell: Cell, request: pytest.FixtureRequest) -> Callable[[CheckResult], None]:
    """Record a check's result for the reports, then assert it with its diagnosis."""

    def judge(result: CheckResult) -> None:
        which = half(cell.spec.family, result.name)
        if which is not None:  # encoder-decoder rows say which cache half they describe
            result = replace(result, details={**result.details, "half": which})
        request.node.user_properties.append((RESULT_KEY, result.to_dict()))
        if not result.passed:
            _fail(cell, result.name, f"{result.name}: {result.message}")

    return judge
