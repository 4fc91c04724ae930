"""The package keeps its shape: stages import only the stages before them, and no two modules import each other.

build (specs -> models) -> probe (run the cache paths, record) -> checks (judge a record) -> the pytest
plugin and its helpers on top; ``report/`` renders plain data only. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kvconform"
#: The plugin layer: modules that drive the stages (nothing below may import them).
PLUMBING = ("plugin", "runner", "cells", "listing", "options", "report_dir", "diff", "repro", "provenance", "cli_models",
            "run_scope", "command", "progress")
#: What each stage must not import (the stages after it, and the plumbing) ...
FORBIDDEN = {
    "build": ("probe", "checks", "report", *PLUMBING),
    "probe": ("checks", "report", *PLUMBING),
    "checks": ("report", *PLUMBING),
    "report": ("build", "probe", "checks", "families", *PLUMBING),
}
#: ... except these plain-data modules (the report's column order is the check table's).
ALLOWED = {"report": {"kvconform.checks.table"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports at run time, at the top or inside a function (not under ``TYPE_CHECKING``).

    ``from pkg import sub`` counts as importing the submodule ``pkg.sub``; ``from mod import name``, ``mod``.
    """
    names: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names if is_module(f"{node.module}.{alias.name}")}
            names.update(submodules or {node.module})
            if len(submodules) < len(node.names):
                names.add(node.module)
        pending.extend(ast.iter_child_nodes(node))
    return names


MODULES = {module_name(path): imports_of(path) for path in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("stage", sorted(FORBIDDEN))
def test_stage_imports_only_what_comes_before_it(stage: str) -> None:
    wrong = {
        module: sorted(name for name in imported if name.split(".")[1:2] and name.split(".")[1] in FORBIDDEN[stage]
                       and name.startswith("kvconform.") and name not in ALLOWED.get(stage, set()))
        for module, imported in MODULES.items() if module.startswith(f"kvconform.{stage}.") or module == f"kvconform.{stage}"
    }
    assert {module: names for module, names in wrong.items() if names} == {}


def test_report_imports_no_torch_transformers_or_pytest() -> None:
    heavy = {module: sorted(n for n in imported if n.split(".")[0] in {"torch", "transformers", "pytest"})
             for module, imported in MODULES.items() if module.startswith("kvconform.report")}
    assert {module: names for module, names in heavy.items() if names} == {}


def test_no_two_modules_import_each_other() -> None:
    pairs = sorted((a, b) for a, imported in MODULES.items() for b in imported
                   if b in MODULES and a < b and a in MODULES[b] and a != b)
    assert pairs == []


def test_imports_of_counts_imports_inside_functions_but_not_type_checking_ones(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvconform.plugin import x\n"
                      "def f():\n    from kvconform.report import views\n    import torch\n")
    assert imports_of(source) == {"typing", "kvconform.report.views", "torch"}


def test_the_layout_test_sees_the_stages() -> None:
    """Guards the test itself: every stage exists as a package with modules that import other stages."""
    for stage in FORBIDDEN:
        assert (PACKAGE / stage / "__init__.py").is_file(), stage
    assert "kvconform.build.geometry" in MODULES["kvconform.probe.decode"]
    assert "kvconform.probe.decode" in MODULES["kvconform.checks.record_checks"]
