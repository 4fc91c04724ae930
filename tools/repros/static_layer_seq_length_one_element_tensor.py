#!/usr/bin/env python3
"""transformers 5.4-5.12: a forward given a StaticCache and no position_ids raises in models that build positions
with torch.arange(past_length, past_length + n).

Expected (model bug, transformers 5.4.0-5.12.1): 5.4's StaticLayer counts its tokens in a one-element 1-d tensor
(`self.cumulative_length = torch.tensor([0], dtype=int)`, cache_utils.py:264 in 5.4.0, :380 in 5.12.1) and
get_seq_length() returns it; models that number their positions with `torch.arange(past_key_values_length,
past_key_values_length + n)` (modeling_xglm.py:441-446 in 5.12.1; fuyu, trocr, roformer, mvp, led, and the
Qwen-VL/GLM-V `compute_3d_position_ids` the same way) get TypeError once the cache holds a token: arange() rejects a 1-d tensor. generate() passes
position_ids, so generate(cache_implementation="static") runs (the control); a decode loop of one's own, or any
forward without position_ids, raises from the first decode step on. 5.13 makes it a 0-d tensor (`torch.tensor(0)`), which arange
takes, as 5.3's count was.
Exit 1 when the forward raises that TypeError while generate() with the static cache runs; 0 when the forward runs.
"""
import sys

import torch
import transformers
from transformers import StaticCache, XGLMConfig, XGLMForCausalLM

TRANSFORMERS = ">=5.4,<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = XGLMConfig(vocab_size=256, d_model=64, ffn_dim=128, num_layers=2, attention_heads=4, max_position_embeddings=64)
    torch.manual_seed(0)
    model = XGLMForCausalLM(config).eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False, pad_token_id=0,
                   cache_implementation="static")
    print(f"transformers {transformers.__version__}: generate(cache_implementation='static') runs")
    cache = StaticCache(config=config, max_cache_len=16)
    logits = model(input_ids=prompt, past_key_values=cache, use_cache=True).logits  # the empty cache's length is an int
    step = logits[:, -1:].argmax(-1)
    try:
        model(input_ids=step, past_key_values=cache, use_cache=True)
    except TypeError as exc:
        print(f"get_seq_length() after the prefill: {cache.get_seq_length()!r}")
        print(f"the decode step (a StaticCache, no position_ids) raised TypeError: {exc}".splitlines()[0])
        return 1 if "arange" in str(exc) else 2
    print("the decode step (a StaticCache, no position_ids) runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
