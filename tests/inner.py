"""Inner pytest runs of the real suite on tiny matrices, through pytest's own ``pytester`` fixture.

An inner run works in a folder under the test's ``pytester.path`` holding ``suites/conftest.py`` and
``suites/test_conformance.py`` (read at test time, so the tests follow the suite), a matrix from ``tests/data``
and a ``pytest.ini`` that pins the rootdir there; reports go to that folder's ``reports/``, never to the
repository's. ``Inner.run`` runs pytest in-process (``pytester.runpytest_inprocess``: no re-import of torch and
transformers, an ``-n 0`` run takes about a second; ``-n 2`` still starts two worker processes), and pytester
restores ``sys.modules``, ``sys.path``, the cwd and the environment afterwards. Its ``sys.modules`` snapshot
drops what a run imported first (kvconform.runner, xdist's controller modules) and the next run imports them again,
which is harmless; a test that monkeypatches such a module imports it itself before the run, so the run sees the
patch. transformers' modules a run (or the test around it) imported first are kept (``KeepingTransformers``, in place
for every pytester test: tests/conftest.py): transformers' auto mappings cache each module they import, so a dropped
modeling module, imported again later, gives a second class of the same name (MusicGen-Melody's model refused the
config ``AutoConfig`` built, "has to be of type", in the test after ``--list-models``' inner run).
``Inner.process`` runs
``python -m pytest`` in a fresh interpreter (``pytester.runpytest_subprocess``) for what only a real process
shows: signals, exit status, nothing imported beforehand.

pytester is per test; ``SharedRuns`` lets the tests of one module read one run instead of repeating it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from _pytest import pytester as pytester_module

from kvconform.report import load_document
from tests.schema import schema_problems

DATA = Path(__file__).resolve().parent / "data"
SUITE = Path(__file__).resolve().parents[1] / "suites"

#: Outer environment the inner runs must not see (the step summary would get the inner reports, options and
#: plugins would change the run; pytester drops PYTEST_ADDOPTS too).
HIDDEN_ENV = ("GITHUB_STEP_SUMMARY", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")
#: Every inner run: the plugin, CPU cells only (the tests expect no cuda cells), nothing cached between runs.
PLUGIN_ARGS = ("-p", "kvconform.plugin", "-p", "no:cacheprovider", "--device", "cpu")
#: In-process only: kvconform.plugin is imported by the outer run already, so pytest cannot rewrite its asserts.
IN_PROCESS_ARGS = ("-W", "ignore::pytest.PytestAssertRewriteWarning")
#: Top-level module names of the suite's files in an inner folder: a module another folder's run left under these
#: names must not be seen by an in-process run (pytest would call its copy an "import file mismatch").
SUITE_MODULES = ("conftest", "test_conformance")


class KeepingTransformers(pytester_module.SysModulesSnapshot):
    """pytester's ``sys.modules`` snapshot that also keeps every ``transformers`` module an inner run imported."""

    def __init__(self, preserve: Callable[[str], bool] | None = None) -> None:
        super().__init__(preserve=lambda name: name.startswith("transformers") or (preserve is not None and preserve(name)))

Shared = TypeVar("Shared")


@dataclass(frozen=True)
class Run:
    """One finished inner pytest run in ``dir``, with its reports in ``dir/reports``."""

    dir: Path
    result: pytest.RunResult

    @property
    def ret(self) -> int:
        return int(self.result.ret)

    @property
    def out(self) -> str:
        return "\n".join(self.result.outlines)

    @property
    def err(self) -> str:
        return "\n".join(self.result.errlines)

    @property
    def output(self) -> str:
        return "\n".join([*self.result.outlines, *self.result.errlines])

    @property
    def report_dir(self) -> Path:
        return self.dir / "reports"

    def doc(self) -> dict[str, Any]:
        """The run's conformance.json, checked against the published schema."""
        path = self.report_dir / "conformance.json"
        assert path.is_file(), f"no report was written; inner output:\n{self.output[-4000:]}"
        doc = load_document(path)
        problems = schema_problems(doc)
        assert not problems, f"{path} breaks the report schema:\n" + "\n".join(problems[:20])
        return doc

    def rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {(r["cell_id"], r["check"]): r for r in self.doc()["results"]}

    def outcomes(self) -> dict[tuple[str, str], str]:
        return {key: row["outcome"] for key, row in self.rows().items()}


class Inner:
    """Suite folders under one test's ``pytester`` and pytest runs in them (``--report-dir FOLDER/reports``).

    ``env`` of ``run``/``process`` sets variables for that run only (``None`` unsets one); HIDDEN_ENV is unset
    for the whole test, and kvconform's cache folder stays the outer run's (``cache_dir``) although pytester
    points HOME at its temporary folder, so prepared artefacts (a dequantized GGUF) are made once per machine.
    """

    def __init__(self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
        self.pytester = pytester
        for name in HIDDEN_ENV:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("KVCONFORM_CACHE_DIR", str(cache_dir))

    @property
    def path(self) -> Path:
        """The test's own pytester folder (suites are made in subfolders of it)."""
        return self.pytester.path

    def suite(self, name: str = "suite", matrix: str = "main.yaml", extra_conftest: str = "") -> Path:
        """Folder ``name``: the suite (its conftest.py followed by ``extra_conftest``), ``matrix.yaml`` copied from
        tests/data ``matrix``, and a pytest.ini."""
        self.pytester.makepyfile(**{f"{name}/conftest": (SUITE / "conftest.py").read_text() + extra_conftest,
                                    f"{name}/test_conformance": (SUITE / "test_conformance.py").read_text()})
        self.pytester.makefile(".yaml", **{f"{name}/matrix": (DATA / matrix).read_text()})
        self.pytester.makefile(".ini", **{f"{name}/pytest": "[pytest]"})
        return self.path / name

    def run(self, workdir: Path, *args: str, env: Mapping[str, str | None] | None = None, as_typed: bool = False) -> Run:
        """``pytest -p kvconform.plugin ARGS`` in-process with ``workdir`` as cwd (a Ctrl-C inside is the result);
        ``as_typed``: without ``--device cpu`` and ``--report-dir``, as a user types the command."""
        fixed = PLUGIN_ARGS[:4] if as_typed else (*PLUGIN_ARGS, "--report-dir", str(workdir / "reports"))
        with inside(workdir, env) as patch:
            for name in SUITE_MODULES:
                patch.delitem(sys.modules, name, raising=False)
            result = self.pytester.runpytest_inprocess(*fixed, *IN_PROCESS_ARGS, *args, no_reraise_ctrlc=True)
        return Run(workdir, result)

    def process(self, workdir: Path, *args: str, env: Mapping[str, str | None] | None = None, timeout: float = 300) -> Run:
        """``python -m pytest -p kvconform.plugin ARGS`` in a fresh interpreter with ``workdir`` as cwd."""
        with inside(workdir, env):
            result = self.pytester.runpytest_subprocess(*PLUGIN_ARGS, "--report-dir", str(workdir / "reports"), *args,
                                                        timeout=timeout)
        return Run(workdir, result)


@contextlib.contextmanager
def inside(workdir: Path, env: Mapping[str, str | None] | None) -> Iterator[pytest.MonkeyPatch]:
    """cwd ``workdir`` and ``env`` applied (``None`` unsets); what the body patches too is undone afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        for name, value in (env or {}).items():
            if value is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        yield patch


class SharedRuns:
    """The runs several tests of one module read: each is made by the first test that asks and kept for the others.

    pytester (so ``Inner``) is per test, while an inner run costs seconds: tests ask ``get(name, make)`` from a
    function-scoped fixture, and the module-scoped ``shared_runs`` fixture keeps one instance per module (and per
    xdist worker), as module-scoped run fixtures would. A run's folder stays under the pytester folder of the
    test that made it. A ``make`` that raises is not kept, so each test that asks fails with it.
    """

    def __init__(self) -> None:
        self._runs: dict[str, Any] = {}

    def get(self, name: str, make: Callable[[], Shared]) -> Shared:
        if name not in self._runs:
            self._runs[name] = make()
        return self._runs[name]
