#!/usr/bin/env python3
"""transformers 5.0-5.12: CTRL in half precision, and CTRL with a StaticCache, raise in their first forward.

- CTRLModel keeps its sinusoidal position table as a plain float32 attribute (``self.pos_encoding``, not a buffer,
  so neither from_pretrained(dtype=...) nor .to() casts it) and moves it to the device only
  (``self.pos_encoding = self.pos_encoding.to(device)``, modeling_ctrl.py:328 in 5.12.1): a float16 model adds float32
  positions to its float16 embeddings, and its first LayerNorm gets float32 input with float16 weights
  (RuntimeError "mixed dtype (CPU)" on CPU), so generate() cannot run.
- CTRLModel builds its causal mask for the tokens seen (``torch.triu(torch.ones(seq_len + past_length, ...))``,
  modeling_ctrl.py:323 in 5.12.1) while a StaticCache hands attention all max_cache_len preallocated keys:
  generate(cache_implementation="static") raises on the shapes from the prefill on.
5.13 casts the table to the embeddings' dtype (modeling_ctrl.py:317 in 5.13.1) and builds the mask with
masking_utils.create_causal_mask (:306). Exit 1 while either is there, 0 when both generate() calls run.
"""
import sys
import tempfile

import torch
import transformers
from transformers import CTRLConfig, CTRLLMHeadModel

TRANSFORMERS = "<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = CTRLConfig(vocab_size=256, n_embd=64, n_layer=2, n_head=4, dff=128, n_positions=64)
    torch.manual_seed(0)
    model = CTRLLMHeadModel(config).eval()
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10]])
    kwargs = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": 4, "do_sample": False, "pad_token_id": 0}
    bugs = []
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        half = CTRLLMHeadModel.from_pretrained(folder, dtype=torch.float16).eval()
    try:
        with torch.no_grad():
            print(f"float16 generate(): {half.generate(prompt, **kwargs)[0, 6:].tolist()}")
    except RuntimeError as exc:
        bugs.append(f"float16 generate() raised RuntimeError: {exc} (position table {half.transformer.pos_encoding.dtype})")
    try:
        with torch.no_grad():
            print(f"static generate(): {model.generate(prompt, cache_implementation='static', **kwargs)[0, 6:].tolist()}")
    except RuntimeError as exc:
        bugs.append(f"generate(cache_implementation='static') raised RuntimeError: {exc}")
    for bug in bugs:
        print(f"BUG: {bug}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
