#!/usr/bin/env python3
"""transformers 5.0-5.17: MoshiForCausalLM builds no causal mask when it is given no attention_mask.

Expected (model bug, transformers 5.0.0-5.17.0): MoshiModel.forward builds its causal mask only
`if attention_mask is not None` (modeling_moshi.py:855-863 in 5.17.0, `_update_causal_mask` at :1259-1263 in 5.0.0)
and hands attention `None` otherwise. Eager attention adds no mask at all, so model(input_ids) attends to the tokens
after each position (its logits move when a later token changes, and differ from the same call with an all-ones
attention_mask); SDPA falls back to `is_causal=True`, which torch aligns top-left, so a multi-token forward over a
filled cache (a prefill in chunks) hides from each query the cached keys past its own index. 5.18 always calls
`create_causal_mask` (modeling_moshi.py:855 in 5.18.0). generate() passes an attention_mask and is not affected.
Exit 1 when the eager forward without attention_mask differs from the one with an all-ones mask, or the SDPA chunk
leaves one prefill; 0 when both agree.
"""
import sys

import torch
import transformers
from transformers import DynamicCache, MoshiConfig, MoshiForCausalLM

TRANSFORMERS = "<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SHRUNK = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
              ffn_dim=128, max_position_embeddings=64, audio_vocab_size=64, num_codebooks=2, depth_hidden_size=32,
              depth_num_hidden_layers=1, depth_num_attention_heads=2, depth_ffn_dim=64, initializer_range=0.2)


@torch.inference_mode()
def main() -> int:
    print(f"transformers {transformers.__version__}")
    prompt = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(0))
    changed = prompt.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 256
    torch.manual_seed(0)
    eager = MoshiForCausalLM(MoshiConfig(**SHRUNK, sliding_window=64, attn_implementation="eager")).eval()
    bare = eager(input_ids=prompt).logits
    masked = eager(input_ids=prompt, attention_mask=torch.ones_like(prompt)).logits
    leak = float((bare[0, :-1] - eager(input_ids=changed).logits[0, :-1]).abs().max())
    unmasked = float((bare - masked).abs().max())
    print(f"eager, no attention_mask: changing the last token moves positions 0-4 by up to {leak:.3g}; "
          f"|Δ| to the same call with an all-ones attention_mask {unmasked:.3g}")
    torch.manual_seed(0)
    sdpa = MoshiForCausalLM(MoshiConfig(**SHRUNK, sliding_window=64, attn_implementation="sdpa")).eval()
    whole = sdpa(input_ids=prompt).logits
    cache = DynamicCache()
    sdpa(input_ids=prompt[:, :2], past_key_values=cache, use_cache=True)
    chunk = sdpa(input_ids=prompt[:, 2:4], past_key_values=cache, use_cache=True).logits
    chunked = float((chunk - whole[:, 2:4]).abs().max())
    print(f"sdpa, no attention_mask: the second 2-token chunk over the cache leaves one prefill by {chunked:.3g}")
    return 1 if unmasked > 1e-4 or chunked > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
