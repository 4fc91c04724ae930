#!/usr/bin/env python3
"""transformers 5.0.0: Qwen3OmniMoeConfig() raises: its code predictor's config reads use_sliding_window before setting it.

Expected (model bug, transformers < 5.1; 5.1 fixes it): the bare Qwen3OmniMoeConfig() (and any config.json whose
code_predictor_config omits use_sliding_window) constructs. Qwen3OmniMoeTalkerCodePredictorConfig.__init__ computes
``self.sliding_window = sliding_window if self.use_sliding_window else None`` (configuration_qwen3_omni_moe.py:592 in
5.0.0) before any line sets ``use_sliding_window``, so constructing it raises AttributeError; no Qwen3-Omni model can be
built from a config. 5.1.0 declares the field.
Exit 1 when Qwen3OmniMoeConfig() raises that AttributeError; 0 when it constructs.
"""
import sys

import transformers
from transformers import Qwen3OmniMoeConfig

TRANSFORMERS = "<5.1"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    try:
        Qwen3OmniMoeConfig()
    except AttributeError as exc:
        if "use_sliding_window" not in str(exc):
            raise
        print(f"transformers {transformers.__version__}: Qwen3OmniMoeConfig() raised AttributeError: {exc}")
        return 1
    print(f"transformers {transformers.__version__}: Qwen3OmniMoeConfig() constructs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
