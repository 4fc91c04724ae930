#!/usr/bin/env python3
"""transformers 5.0-5.1: models that build their causal mask with `_prepare_4d_causal_attention_mask` cannot run a
StaticCache: the mask is sized to the tokens seen, not to the cache's max_cache_len keys.

Expected (model bug, transformers 5.0.0-5.1.0): XGLMModel.forward builds its 4-D mask with
`_prepare_4d_causal_attention_mask(attention_mask, input_shape, inputs_embeds, past_key_values_length)`
(modeling_xglm.py:466-468 in 5.0.0), whose key length is past + new tokens; a StaticCache hands attention all
max_cache_len preallocated keys, so eager attention refuses the mask (modeling_xglm.py:203-206, "Attention mask should
be of size (2, 1, 6, 16)"), and generate(cache_implementation="static") raises the same way ("Incorrect 4D
attention_mask shape"). mpt, mvp, trocr, speecht5, seamless_m4t, clvp and musicgen build it the same way in 5.0-5.1;
5.2 moves them to masking_utils.create_causal_mask (modeling_xglm.py:472 in 5.2.0), which sizes the mask by the cache.
Exit 1 when the prefill into a StaticCache raises on the mask's size; 0 when it runs.
"""
import sys

import torch
import transformers
from transformers import StaticCache, XGLMConfig, XGLMForCausalLM

TRANSFORMERS = "<5.2"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = XGLMConfig(vocab_size=256, d_model=64, ffn_dim=128, num_layers=2, attention_heads=4, max_position_embeddings=64)
    torch.manual_seed(0)
    model = XGLMForCausalLM(config).eval()  # XGLM's attention is eager (no sdpa class)
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    model(input_ids=prompt, use_cache=True)  # the control: a DynamicCache runs
    print(f"transformers {transformers.__version__}: a prefill with the default (dynamic) cache runs")
    try:
        model(input_ids=prompt, attention_mask=torch.ones_like(prompt), past_key_values=StaticCache(config=config, max_cache_len=16),
              use_cache=True)
    except ValueError as exc:
        print(f"the prefill into a StaticCache(max_cache_len=16) raised ValueError: {exc}")
        return 1
    print("the prefill into a StaticCache runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
