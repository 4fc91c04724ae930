#!/usr/bin/env python3
"""generate(prefill_chunk_size=...) in transformers 5.2 gives every prompt chunk the last chunk's positions.

5.2.0's generate() puts the whole prompt's ``position_ids`` into ``model_kwargs`` (``_prepare_position_ids_for_generation``,
generation/utils.py:2564-2567, new in 5.2), and GenerationMixin._prefill's chunked branch (unchanged since 5.1) passes
them unsliced with each chunk to ``prepare_inputs_for_generation``, which keeps their last ``len(chunk)`` columns
(generation/utils.py:661): every chunk but the last is embedded at the last chunk's positions, so the prefill's cache
and the greedy tokens part from generate() without chunking on every model whose forward reads position_ids. 5.3.0
slices them per chunk (``position_ids[:, past_length:current_length]``); 5.1.0 has none in ``model_kwargs``.
Exit 1 while the bug is there (the chunked generate() returns other tokens), 0 when both agree.
"""
import sys

import torch
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

TRANSFORMERS = ">=5.2,<5.3"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, max_position_embeddings=64, initializer_range=0.15)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "num_beams": 1, "pad_token_id": 0}
    mask = torch.ones_like(prompt)
    with torch.no_grad():
        plain = model.generate(prompt, attention_mask=mask, generation_config=GenerationConfig(**settings))
        chunked = model.generate(prompt, attention_mask=mask, generation_config=GenerationConfig(**settings, prefill_chunk_size=2))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"generate():                     {plain[:, 6:].tolist()}")
    print(f"generate(prefill_chunk_size=2): {chunked[:, 6:].tolist()}")
    if not torch.equal(plain, chunked):
        print("BUG: the chunked prefill's tokens part from the unchunked generate()'s")
        return 1
    print("ok: both return the same tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
