"""Generative families beyond causal LMs: vision-language and encoder-decoder (text and speech).

This module is plain data (no torch): which families exist, the checks each adds to the core
four (parity, growth, shapes, bytes), and which cache half a check's row describes. Building,
inputs, probing and geometry per family live in the submodules.
"""

from __future__ import annotations

CAUSAL_LM = "causal-lm"
VISION_LANGUAGE = "image-text-to-text"
SEQ2SEQ = "seq2seq"
SPEECH_SEQ2SEQ = "speech-seq2seq"
FAMILIES = (CAUSAL_LM, VISION_LANGUAGE, SEQ2SEQ, SPEECH_SEQ2SEQ)
ENCODER_DECODER = (SEQ2SEQ, SPEECH_SEQ2SEQ)

#: Suffix of a family sweep's ids (``t5-s2s``): a model_type can be in several families (bart: causal-lm and seq2seq).
ID_SUFFIX = {VISION_LANGUAGE: "vl", SEQ2SEQ: "s2s", SPEECH_SEQ2SEQ: "speech"}

#: Checks a family adds to the core ones (``suites/test_families.py``).
CROSS_CHECKS = ("cross_growth", "cross_shapes", "cross_bytes", "encoder_once")
EXTRA_CHECKS = {VISION_LANGUAGE: ("text_only",), SEQ2SEQ: CROSS_CHECKS, SPEECH_SEQ2SEQ: CROSS_CHECKS}
#: Core checks a family cell runs (the optional cache paths and generate() are causal-LM only for now).
CORE_CHECKS = ("parity", "growth", "shapes", "bytes")

SELF_HALF = "self-attention (decoder)"
CROSS_HALF = "cross-attention"


def family_checks(family: str) -> tuple[str, ...]:
    """Every check a cell of ``family`` runs besides causal-LM-only ones."""
    return CORE_CHECKS + EXTRA_CHECKS.get(family, ())


def half(family: str, check: str) -> str | None:
    """Which cache half an encoder-decoder check's row describes (``None`` for other families)."""
    if family not in ENCODER_DECODER:
        return None
    if check.startswith("cross_"):
        return CROSS_HALF
    return SELF_HALF if check in ("growth", "shapes", "bytes") else None
