#!/usr/bin/env python3
"""Cache.crop(-n) with n larger than the stored length leaves a negative length (transformers 5.24).

StaticLayer.crop subtracts the tokens to remove from cumulative_length without a bound (cache_utils.py:521), and a
DynamicSlidingWindowLayer that records its past and went beyond its window subtracts them from its
cumulative_length (cache_utils.py:307): after crop(-12) of a 7-token prefill, get_seq_length() is -5. A
DynamicLayer in the same call empties to 0 (its slice keys[..., :-12, :] is empty). No documented behaviour
covers removing more tokens than are stored, and transformers' own paths never make the call (assisted decoding
crops at most the drafted tokens), so kvconform's checks do not judge it: a finding, docs/cache-paths.md.
Exit 1 while a crop past the stored length leaves a negative length.
"""
import sys

import torch
import transformers
from transformers import DynamicCache, LlamaConfig, MistralConfig, StaticCache


def config(cls, **extra):
    return cls(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
               vocab_size=64, **extra)


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    keys = torch.randn(1, 2, 7, 8, generator=torch.Generator().manual_seed(0))
    caches = {
        "DynamicCache (DynamicLayer)": DynamicCache(config=config(LlamaConfig)),
        "StaticCache (StaticLayer)": StaticCache(config=config(LlamaConfig), max_cache_len=16),
        "DynamicCache recording (DynamicSlidingWindowLayer, window 4)": DynamicCache(config=config(MistralConfig, sliding_window=4)),
    }
    caches["DynamicCache recording (DynamicSlidingWindowLayer, window 4)"].activate_past_recording()
    negative = []
    for name, cache in caches.items():
        cache.update(keys, keys.clone(), 0)
        cache.crop(-12)
        length = int(cache.get_seq_length())
        print(f"{name}: 7 tokens stored, crop(-12): get_seq_length() {length}")
        negative += [name] if length < 0 else []
    if negative:
        print(f"negative length after removing more tokens than stored: {negative}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
