"""The conformance checks, one test per matrix cell each; all read the cell's single probe record."""

from __future__ import annotations

import pytest

from kvconform.cells import Cell
from kvconform.checks import record_checks as checks
from kvconform.runner import CellOutcome


def run(check: str, cell: Cell, outcome: CellOutcome) -> checks.CheckResult:
    """One check of the table on the cell's probe record."""
    return checks.run_check(check, outcome.record, outcome.geometry, outcome.explanation, cell.tolerance)


def test_parity(cell, outcome, verdict):
    """Cached next-token logits match one uncached pass at every decode step."""
    verdict(run("parity", cell, outcome))


@pytest.mark.kvconform_check("kv_parity")
def test_kv_parity(cell, outcome, verdict):
    """Every layer's stored K/V at every position match one fresh pass over the final sequence."""
    verdict(run("kv_parity", cell, outcome))


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
    _skip_not_applicable(outcome, "ragged")
    verdict(run("ragged", cell, outcome))


@pytest.mark.kvconform_check("prefix_reuse")
def test_prefix_reuse(cell, outcome, verdict):
    """Continuing a copied prefilled prefix cache equals a fresh run; growth and shapes hold."""
    _skip_not_applicable(outcome, "prefix_reuse")
    verdict(run("prefix_reuse", cell, outcome))


@pytest.mark.kvconform_check("crop")
def test_crop(cell, outcome, verdict):
    """A prefilled cache cropped back 3 tokens and decoded again equals a fresh run; growth and shapes hold."""
    _skip_not_applicable(outcome, "crop")
    verdict(run("crop", cell, outcome))


@pytest.mark.kvconform_check("window")
def test_window(cell, outcome, verdict):
    """Sliding-window and chunked layers decoded from prompts shorter than and equal to the window."""
    crossed = outcome.record.window if outcome.record is not None else None
    if crossed is not None and crossed.not_applicable:
        pytest.skip(f"not applicable: {crossed.not_applicable}")
    verdict(run("window", cell, outcome))


@pytest.mark.kvconform_check("chunked_prefill")
def test_chunked_prefill(cell, outcome, verdict):
    """The prompt prefilled in two or three cached forwards equals one prefill (logits, K/V, conv/recurrent states)."""
    chunked = outcome.record.chunked if outcome.record is not None else None
    if chunked is not None and chunked.not_applicable:
        pytest.skip(f"not applicable: {chunked.not_applicable}")
    verdict(run("chunked_prefill", cell, outcome))


@pytest.mark.kvconform_check("beam")
def test_beam(cell, outcome, verdict):
    """Beam search with and without the cache returns the same beams with the same scores."""
    _skip_extra_not_applicable(outcome, "beam")
    verdict(run("beam", cell, outcome))


@pytest.mark.kvconform_check("reorder")
def test_reorder(cell, outcome, verdict):
    """reorder_cache on a prefilled cache equals prefilling the rows in the new order (beam search's cache operation)."""
    _skip_not_applicable(outcome, "reorder")
    verdict(run("reorder", cell, outcome))


@pytest.mark.kvconform_check("padded_generate")
def test_padded_generate(cell, outcome, verdict):
    """Batched left-padded generate() with and without the cache picks the same greedy tokens."""
    verdict(run("padded_generate", cell, outcome))


@pytest.mark.kvconform_check("assisted")
def test_assisted(cell, outcome, verdict):
    """Assisted generate() (an assistant model, prompt lookup) returns greedy's tokens, its logits those of one uncached pass."""
    _skip_extra_not_applicable(outcome, "assisted")
    verdict(run("assisted", cell, outcome))


@pytest.mark.kvconform_check("between_calls")
def test_between_calls(cell, outcome, verdict):
    """generate() called again through the same model: continued, padded, another prompt, the same arguments twice."""
    calls = outcome.record.calls
    if calls is not None and not checks.ran("between_calls", outcome.record):
        pytest.skip(f"not applicable: {'; '.join(calls.not_made)}")
    verdict(run("between_calls", cell, outcome))


@pytest.mark.kvconform_check("attn_agreement")
def test_attn_agreement(cell, outcome, verdict):
    """The cell's attention implementation and the model's default agree on uncached logits (float32)."""
    _skip_extra_not_applicable(outcome, "attn_agreement")
    verdict(run("attn_agreement", cell, outcome))


@pytest.mark.kvconform_check("quantized_kv")
def test_quantized_kv(cell, outcome, verdict):
    """The fp8 cache stores what its documented design stores (frozen scale, float8 round trip of every value)."""
    verdict(run("quantized_kv", cell, outcome))


def _skip_extra_not_applicable(outcome: CellOutcome, name: str) -> None:
    """Skip with the reason when the record the runner added beside the probe's (``extras[name]``) is not applicable."""
    extra = outcome.record.extras.get(name) if outcome.record is not None else None
    if extra is not None and extra.not_applicable:
        pytest.skip(f"not applicable: {extra.not_applicable}")


def _skip_not_applicable(outcome: CellOutcome, name: str) -> None:
    path = outcome.record.paths.get(name) if outcome.record is not None else None
    if path is not None and path.not_applicable:
        pytest.skip(f"not applicable: {path.not_applicable}")
