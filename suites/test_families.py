"""Checks only vision-language and encoder-decoder cells have; the core checks run in test_conformance.py."""

from __future__ import annotations

import pytest

from kvconform.families import checks


@pytest.mark.kvconform_check("cross_growth")
def test_cross_growth(cell, outcome, verdict):
    """The cross-attention cache holds the encoder length from the prefill on and never grows."""
    _skip_not_applicable(outcome, "cross_growth")
    verdict(checks.cross_growth(outcome.family))


@pytest.mark.kvconform_check("cross_shapes")
def test_cross_shapes(cell, outcome, verdict):
    """Cross-attention K/V are [B, H_kv, encoder length, head_dim] with the decoder's heads from the config."""
    _skip_not_applicable(outcome, "cross_shapes")
    verdict(checks.cross_shapes(outcome.family))


@pytest.mark.kvconform_check("cross_bytes")
def test_cross_bytes(cell, outcome, verdict):
    """Cross-attention K/V bytes equal the formula with the encoder length."""
    _skip_not_applicable(outcome, "cross_bytes")
    verdict(checks.cross_bytes(outcome.family))


@pytest.mark.kvconform_check("encoder_once")
def test_encoder_once(cell, outcome, verdict):
    """The encoder runs once; the cross-attention K/V written at the prefill are reused at every step."""
    _skip_not_applicable(outcome, "encoder_once")
    verdict(checks.encoder_once(outcome.family))


@pytest.mark.kvconform_check("text_only")
def test_text_only(cell, outcome, verdict):
    """A text-only prompt on a vision-language model: parity and growth as for a causal LM."""
    _skip_not_applicable(outcome, "text_only")
    verdict(checks.text_only(outcome.family, cell.tolerance))


@pytest.mark.kvconform_check("media_calls")
def test_media_calls(cell, outcome, verdict):
    """generate() through one instance: text, an image, another image, text again, as requests reach a served model."""
    _skip_not_applicable(outcome, "media_calls")
    verdict(checks.media_calls(outcome.family, cell.tolerance))


@pytest.mark.kvconform_check("codebook_parity")
def test_codebook_parity(cell, outcome, verdict):
    """Every codebook head of a codebook decoder: cached logits match the uncached pass at every step."""
    verdict(checks.codebook_parity(outcome.family, cell.tolerance))


@pytest.mark.kvconform_check("codebook_generate")
def test_codebook_generate(cell, outcome, verdict):
    """generate() on the text prompt returns the same codes (MusicGen: waveform) with and without the cache."""
    verdict(checks.codebook_generate(outcome.family, cell.tolerance))


def _skip_not_applicable(outcome, name: str) -> None:
    """Skip with the reason a family check the cell cannot take (``FamilyProbe.not_applicable``)."""
    reason = outcome.family.not_applicable.get(name) if outcome.family is not None else None
    if reason is not None:
        pytest.skip(f"not applicable: {reason}")
