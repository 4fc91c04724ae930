"""The conformance checks, one test per matrix cell each; all read the cell's single probe record."""

from __future__ import annotations

import pytest

from kvconform import checks
from kvconform.cells import Cell
from kvconform.runner import CellOutcome


def run(check: str, cell: Cell, outcome: CellOutcome) -> checks.CheckResult:
    """One check of the table on the cell's probe record."""
    return checks.run_check(check, outcome.record, outcome.geometry, outcome.explanation, cell.tolerance)


def test_parity(cell, outcome, verdict):
    """Cached next-token logits match one uncached pass at every decode step."""
    verdict(run("parity", cell, outcome))


def test_growth(cell, outcome, verdict):
    """The cache grows by exactly one position per step; each layer keeps what its type keeps."""
    verdict(run("growth", cell, outcome))


def test_shapes(cell, outcome, verdict):
    """Every layer's K/V is [B, H_kv, S_layer, head_dim] with H_kv and head_dim from the config."""
    verdict(run("shapes", cell, outcome))


def test_bytes(cell, outcome, verdict):
    """Measured K/V bytes equal 2 × L × H_kv × d_head × N × B × bytes."""
    verdict(run("bytes", cell, outcome))


@pytest.mark.kvconform_check("generate")
def test_generate(cell, outcome, verdict):
    """generate() with and without the cache picks the same greedy tokens."""
    verdict(run("generate", cell, outcome))


@pytest.mark.kvconform_check("ragged")
def test_ragged(cell, outcome, verdict):
    """A left-padded ragged batch: every row matches its own unpadded uncached pass; growth and shapes hold."""
    verdict(run("ragged", cell, outcome))


@pytest.mark.kvconform_check("prefix_reuse")
def test_prefix_reuse(cell, outcome, verdict):
    """Continuing a copied prefilled prefix cache equals a fresh run; growth and shapes hold."""
    verdict(run("prefix_reuse", cell, outcome))
