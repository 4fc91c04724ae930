"""The conformance checks, one test per matrix cell each; all read the cell's single probe record."""

from __future__ import annotations

import pytest

from kvconform import checks, path_checks


def test_parity(cell, outcome, verdict):
    """Cached next-token logits match one uncached pass at every decode step."""
    verdict(checks.parity(outcome.record, cell.tolerance))


def test_growth(cell, outcome, verdict):
    """The cache grows by exactly one position per step; each layer keeps what its type keeps."""
    verdict(checks.growth(outcome.record, outcome.geometry))


def test_shapes(cell, outcome, verdict):
    """Every layer's K/V is [B, H_kv, S_layer, head_dim] with H_kv and head_dim from the config."""
    verdict(checks.shapes(outcome.record, outcome.geometry, outcome.explanation))


def test_bytes(cell, outcome, verdict):
    """Measured K/V bytes equal 2 × L × H_kv × d_head × N × B × bytes."""
    verdict(checks.cache_bytes(outcome.record, outcome.geometry))


@pytest.mark.kvconform_check("generate")
def test_generate(cell, outcome, verdict):
    """generate() with and without the cache picks the same greedy tokens."""
    verdict(checks.generate(outcome.record, cell.tolerance))


@pytest.mark.kvconform_check("ragged")
def test_ragged(cell, outcome, verdict):
    """A left-padded ragged batch: every row matches its own unpadded uncached pass; growth and shapes hold."""
    verdict(checks.path_check(outcome.record, "ragged", cell.tolerance, outcome.geometry))


@pytest.mark.kvconform_check("prefix_reuse")
def test_prefix_reuse(cell, outcome, verdict):
    """Continuing a copied prefilled prefix cache equals a fresh run; growth and shapes hold."""
    verdict(checks.path_check(outcome.record, "prefix_reuse", cell.tolerance, outcome.geometry))


@pytest.mark.kvconform_check("crop")
def test_crop(cell, outcome, verdict):
    """A prefilled cache cropped back k tokens and decoded again equals a fresh run; growth and shapes hold."""
    _skip_not_applicable(outcome, "crop")
    verdict(checks.path_check(outcome.record, "crop", cell.tolerance, outcome.geometry))


@pytest.mark.kvconform_check("beam")
def test_beam(cell, outcome, verdict):
    """Beam search with and without the cache returns the same beams with the same scores."""
    beam = outcome.extras.get("beam")
    if beam is not None and beam.not_applicable:
        pytest.skip(f"not applicable: {beam.not_applicable}")
    verdict(path_checks.beam(outcome.extras.get("beam"), cell.tolerance, outcome.record.logit_scale))


@pytest.mark.kvconform_check("reorder")
def test_reorder(cell, outcome, verdict):
    """reorder_cache on a prefilled cache equals prefilling the rows in the new order (beam search's cache operation)."""
    _skip_not_applicable(outcome, "reorder")
    verdict(checks.path_check(outcome.record, "reorder", cell.tolerance, outcome.geometry))


@pytest.mark.kvconform_check("padded_generate")
def test_padded_generate(cell, outcome, verdict):
    """Batched left-padded generate() with and without the cache picks the same greedy tokens."""
    verdict(checks.generate(outcome.record, cell.tolerance, outcome.extras["padded_generate"], "padded_generate"))


@pytest.mark.kvconform_check("attn_agreement")
def test_attn_agreement(cell, outcome, verdict):
    """The cell's attention implementation and the model's default agree on uncached logits (float32)."""
    verdict(path_checks.attention_agreement(outcome.extras["attn_agreement"], cell.tolerance))


@pytest.mark.kvconform_check("quantized_kv")
def test_quantized_kv(cell, outcome, verdict):
    """The fp8 cache stores what its documented design stores (frozen scale, float8 round trip of every value)."""
    verdict(path_checks.quantized_kv(outcome.record.quantized))


def _skip_not_applicable(outcome, name: str) -> None:
    path = outcome.record.paths.get(name)
    if path is not None and path.not_applicable:
        pytest.skip(f"not applicable: {path.not_applicable}")
