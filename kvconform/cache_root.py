"""Where kvconform keeps what it prepares between runs (no torch): ``$KVCONFORM_CACHE_DIR`` or ``~/.cache/kvconform``."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "KVCONFORM_CACHE_DIR"


def cache_dir() -> Path:
    """Where prepared artefacts (dequantized GGUF, release environments) are kept between runs."""
    default = Path.home() / ".cache" / "kvconform"
    return Path(os.environ.get(CACHE_DIR_ENV, default))
