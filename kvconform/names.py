"""Close matches for a mistyped name: "did you mean" for every enum value, field and key (no dependencies)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: Common spellings of the values the matrix and the options take (``--dtype fp16``, ``--cache fp8``).
ALIASES = {"fp32": "float32", "f32": "float32", "float": "float32", "fp16": "float16", "f16": "float16",
           "half": "float16", "bf16": "bfloat16", "gpu": "cuda", "fp8": "quantized", "flex": "flex_attention"}


def close_matches(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Known names ``name`` probably meant: its alias (``fp16`` -> ``float16``), the same name in another case,
    then difflib's close matches."""
    known = list(known)
    alias = ALIASES.get(name.lower())
    first = [match for match in (alias, *[k for k in known if k.lower() == name.lower()]) if match in known]
    return list(dict.fromkeys([*first, *difflib.get_close_matches(name, known, n=n, cutoff=0.6)]))[:n]
