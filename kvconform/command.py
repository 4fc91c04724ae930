"""The ``kvconform`` command: the shipped suites in the current folder, ``pytest --pyargs kvconform.suites ARGS``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the conformance suites with pytest's own arguments (``--model ./ckpt``, ``-n auto``, ``-k``…)."""
    import pytest

    from kvconform.run_scope import SUITES_PACKAGE

    arguments = sys.argv[1:] if argv is None else argv
    return int(pytest.main(["-p", "kvconform.plugin", "--pyargs", SUITES_PACKAGE, *arguments]))
