#!/usr/bin/env python3
"""transformers 5.0-5.1: generate(cache_implementation="static") on MoshiForCausalLM raises at the prefill of a prompt
longer than the sliding window.

Expected (model bug, transformers 5.0.0-5.1.0; 5.2 fixes it): with a StaticCache, MoshiModel._update_causal_mask sizes
the 4-D causal mask by `past_key_values.get_max_cache_shape()` (modeling_moshi.py:1356-1358 in 5.0.0), which is layer
0's length, for Moshi's sliding layers `min(sliding_window, max_cache_len)` (StaticSlidingWindowLayer.__init__,
cache_utils.py:379-381). But a prefill longer than the window gets all its keys back from the layer
(StaticSlidingWindowLayer.update's "fast prefill path", cache_utils.py:440-443 and :463 in 5.0.0: `full_key_states =
key_states`), so the attention adds a mask of `sliding_window` columns to `prompt length` keys and raises RuntimeError
("The size of tensor a (3001) must match the size of tensor b (3000) at non-singleton dimension 3"). Latent in the
published configs (sliding_window = max_position_embeddings = 3000: a prompt longer than the window is longer than
the positions too, and generate() warns so), shown by any config whose window is shorter than the prompt (the kvconform
cell's window of 4 from a 6-token prompt); generate() with the dynamic cache runs on the same prompt (its mask is sized
by the attention mask). 5.2 builds the mask with masking_utils.create_causal_mask, sized by the layer's get_mask_sizes
(modeling_moshi.py:1097-1104 in 5.2.0).
Exit 1 when the static generate() raises on the prompt one longer than the window (and the dynamic one runs); 0 when
it runs.
"""
import sys

import torch
import transformers
from transformers import MoshiConfig, MoshiForCausalLM

TRANSFORMERS = "<5.2"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

# The published window and positions (kyutai/moshiko-pytorch-bf16: sliding_window 3000, max_position_embeddings 3000);
# only the widths are small.
SHRUNK = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
              ffn_dim=128, audio_vocab_size=64, num_codebooks=2, depth_hidden_size=32, depth_num_hidden_layers=1,
              depth_num_attention_heads=2, depth_ffn_dim=64, initializer_range=0.2)


@torch.inference_mode()
def main() -> int:
    config = MoshiConfig(**SHRUNK, sliding_window=3000, max_position_embeddings=3000)
    torch.manual_seed(0)
    model = MoshiForCausalLM(config).eval()
    prompt = torch.randint(3, 256, (1, config.sliding_window + 1), generator=torch.Generator().manual_seed(0))
    settings = {"max_new_tokens": 2, "do_sample": False, "eos_token_id": None, "pad_token_id": 0}
    dynamic = model.generate(prompt, attention_mask=torch.ones_like(prompt), **settings)
    print(f"transformers {transformers.__version__}: a {prompt.shape[1]}-token prompt (window {config.sliding_window}); "
          f"dynamic generate() runs: {dynamic[0, prompt.shape[1]:].tolist()}")
    try:
        static = model.generate(prompt, attention_mask=torch.ones_like(prompt), cache_implementation="static", **settings)
    except RuntimeError as exc:
        print(f"static generate() raised RuntimeError: {exc}")
        return 1
    print(f"static generate() runs: {static[0, prompt.shape[1]:].tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
