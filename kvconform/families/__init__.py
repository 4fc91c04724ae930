"""Generative families beyond causal LMs: vision-language, audio-language, encoder-decoder (text and speech) and
codebook decoders (text-to-audio).

This module is plain data (no torch): which families exist and which cache half a check's row
describes; which checks each family runs is in ``kvconform.checks.table``. Building, inputs,
probing, geometry and the family-only checks live in the submodules.
"""

from __future__ import annotations

CAUSAL_LM = "causal-lm"
VISION_LANGUAGE = "image-text-to-text"
SEQ2SEQ = "seq2seq"
SPEECH_SEQ2SEQ = "speech-seq2seq"
AUDIO_LANGUAGE = "audio-text-to-text"
#: Codebook decoders (text-to-audio): K codebook streams per row, one logits head per codebook.
TEXT_TO_AUDIO = "text-to-audio"
FAMILIES = (CAUSAL_LM, VISION_LANGUAGE, SEQ2SEQ, SPEECH_SEQ2SEQ, AUDIO_LANGUAGE, TEXT_TO_AUDIO)
#: Decoder-only families over another modality: media placeholders in the prompt, plus a text-only prompt.
MULTIMODAL = (VISION_LANGUAGE, AUDIO_LANGUAGE)
ENCODER_DECODER = (SEQ2SEQ, SPEECH_SEQ2SEQ)

#: The integer-quantized cache kinds (``matrix.INT_QUANTIZED``'s keys; plain data here, as the matrix reads this module).
INT_CACHES = ("quanto-int4", "quanto-int2", "hqq-int4", "hqq-int2")
#: The caches a family cell runs, of its settings' (the cache-path axes beyond them are built for causal LMs only): the
#: static cache, as generate(cache_implementation="static") builds it, for the families whose drivers take a cache; the
#: quantized caches (fp8, quanto, HQQ) where generate() builds one, decoder-only models (it raises for encoder-decoders,
#: generation/utils.py:2310-2315 in 5.24), judged by their design as causal cells are. Codebook decoders run the static
#: cache where their own generate(cache_implementation="static") builds one for the stage the cell decodes
#: (``codebook.STATIC_CODEBOOK_TYPES``; the others' static cells are not applicable, with the reason).
MULTIMODAL_CACHES = ("dynamic", "static", "quantized", *INT_CACHES)
FAMILY_CACHES = {VISION_LANGUAGE: MULTIMODAL_CACHES, AUDIO_LANGUAGE: MULTIMODAL_CACHES,
                 SEQ2SEQ: ("dynamic", "static"), SPEECH_SEQ2SEQ: ("dynamic", "static"), TEXT_TO_AUDIO: ("dynamic", "static")}

#: Suffix of a family sweep's ids (``t5-s2s``): a model_type can be in several families (bart: causal-lm and seq2seq).
ID_SUFFIX = {VISION_LANGUAGE: "vl", SEQ2SEQ: "s2s", SPEECH_SEQ2SEQ: "speech", AUDIO_LANGUAGE: "al", TEXT_TO_AUDIO: "ta"}

SELF_HALF = "self-attention (decoder)"
CROSS_HALF = "cross-attention"


def half(family: str, check: str) -> str | None:
    """Which cache half an encoder-decoder check's row describes (``None`` for other families)."""
    if family not in ENCODER_DECODER:
        return None
    if check.startswith("cross_"):
        return CROSS_HALF
    return SELF_HALF if check in ("growth", "shapes", "bytes") else None
