#!/usr/bin/env python3
"""transformers 5.4.0: config classes that annotate boolean fields as int refuse their own saved config.

In 5.4.0 several config dataclasses type a boolean field as ``int`` (configuration_cohere2.py:77 ``use_cache: int = True``,
configuration_olmo.py:80 ``tie_word_embeddings: int = False``, configuration_mbart.py:68 ``scale_embedding: int = False``,
...), and loading a config validates the field types strictly: a config.json with ``"use_cache": true`` (what
save_pretrained writes, and published checkpoints carry) raises StrictDataclassFieldValidationError ("Field 'use_cache'
expected int, got bool"), so ``from_pretrained`` cannot load these models' checkpoints. 5.5.0 annotates them ``bool``.
Exit 1 while the bug is there (a saved default config of one of these types does not load), else 0.
"""
import sys
import tempfile

import transformers
from transformers import AutoConfig

TRANSFORMERS = ">=5.4,<5.5"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

#: The types tools/history.py found refused on 5.4.0 (causal LMs, vision-language models whose text config is one of
#: them, encoder-decoders).
TYPES = ("aya_vision", "big_bird", "chameleon", "cohere2", "cohere2_vision", "encoder-decoder", "ernie4_5", "ernie4_5_moe",
         "ernie4_5_vl_moe", "falcon_h1", "m2m_100", "mbart", "mvp", "olmo", "olmo2", "olmo3", "olmoe", "paddleocr_vl", "phimoe",
         "speech-encoder-decoder")


def main() -> int:
    print(f"transformers {transformers.__version__}")
    refused = []
    for model_type in TYPES:
        parts = {"encoder": {"model_type": "bert"}, "decoder": {"model_type": "bert"}} if "encoder-decoder" in model_type else {}
        try:  # the default config (a composite one from the defaults of its parts), saved and loaded as a checkpoint's
            folder = tempfile.mkdtemp()
            AutoConfig.for_model(model_type, **parts).save_pretrained(folder)
            AutoConfig.from_pretrained(folder)
        except Exception as exc:
            if type(exc).__name__ != "StrictDataclassFieldValidationError":
                raise
            refused.append(model_type)
            print(f"BUG {model_type}: its saved config does not load: {str(exc).splitlines()[-1].strip()}")
    print(f"{len(refused)} of {len(TYPES)} types refuse their own saved config")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
