#!/usr/bin/env python3
"""transformers 5.15-5.17: UMT5's decoder self-attention is not causal under SDPA (the default from 5.15), so any
decoder forward of several tokens with no padding (an uncached generate() step, a decoder prompt's prefill, training)
lets every position see the tokens after it.

5.15 moved UMT5Attention onto the attention interface (ALL_ATTENTION_FUNCTIONS, modeling_umt5.py:351-365 in 5.15.1)
and made UMT5 support SDPA (`_supports_sdpa = True`, :516), with a new `is_causal` argument defaulting to False
(:193-199); unlike T5 and MT5 (`is_causal=config.is_decoder`, modeling_t5.py:379, modeling_mt5.py:386 in 5.17.0)
UMT5LayerSelfAttention never passes it (`UMT5Attention(config, has_relative_attention_bias=True, layer_idx=layer_idx)`,
modeling_umt5.py:375 in 5.15.1-5.17.0). create_causal_mask drops the mask under SDPA when nothing is padded and the
queries cover the keys (or the cache is empty: `_ignore_causal_mask_sdpa`, masking_utils.py:236-279 in 5.17.0),
trusting the kernel's `is_causal`; sdpa_attention_forward reads it from the module (`getattr(module, "is_causal",
True)`, integrations/sdpa_attention.py:108) and, with False, builds the additive mask from the position bias alone
(`create_position_bias_mask`, :148-152): no causal mask at all. One-token cached steps are unaffected, so cached and
uncached generate() disagree. 5.18 passes `is_causal=config.is_decoder` (modeling_umt5.py:375-380 in 5.18.0): the same
script exits 0; 5.14 had no SDPA path for UMT5 (eager, with a materialised mask) and exits 0 too.

On google/umt5-small's shape (d_model 512, d_kv 64, 6 heads, gated-gelu, untied head; the vocabulary narrowed to
1024 and the stacks to 4 layers), seeded random weights, default attention implementation: greedy generate() after a
6-token decoder prefix with and without the cache, compared step by step (output_logits; the cached prefill and every
uncached step are multi-token forwards, each seeing different future tokens, so they part from the second step), and the decoder's causality directly (position 0's
logits of a teacher-forced forward must not depend on the decoder tokens after it). Exit 1 when either differs by
more than 1e-3 (float32), else 0.
"""
import sys

import torch
import transformers
from transformers import UMT5Config, UMT5ForConditionalGeneration

TRANSFORMERS = ">=5.15,<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

TOLERANCE = 1e-3  # float32 noise here is below 1e-4 (up to 8.2e-05 on 5.24.0); the bug moves logits by 0.3 and more


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    config = UMT5Config(vocab_size=1024, d_model=512, d_kv=64, d_ff=1024, num_heads=6, num_layers=4,
                        num_decoder_layers=4, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                        relative_attention_num_buckets=32, relative_attention_max_distance=128,
                        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    model = UMT5ForConditionalGeneration(config).eval()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"attention {model.config._attn_implementation}")
    source = torch.randint(3, 1024, (2, 12), generator=torch.Generator().manual_seed(0))
    decoder = torch.tensor([[0, 17, 230, 500, 41, 9]] * 2)  # a forced decoder prefix, as users pass one
    runs = {}
    for use_cache in (True, False):
        out = model.generate(source, decoder_input_ids=decoder, max_new_tokens=8, do_sample=False, use_cache=use_cache,
                             min_new_tokens=8, output_logits=True, return_dict_in_generate=True)
        runs[use_cache] = out
    cached, uncached = runs[True], runs[False]
    steps = min(len(cached.logits), len(uncached.logits))
    deltas = [(cached.logits[i] - uncached.logits[i]).abs().max().item() for i in range(steps)]
    print("generate() cached tokens:  ", cached.sequences[0].tolist())
    print("generate() uncached tokens:", uncached.sequences[0].tolist())
    print("per-step max |Δlogit| cached vs uncached:", ", ".join(f"{d:.2e}" for d in deltas))

    changed = decoder[:1].clone()
    changed[:, 1:] = torch.tensor([801, 3, 77, 640, 12])
    first = model(source[:1], decoder_input_ids=decoder[:1]).logits[:, 0]
    other = model(source[:1], decoder_input_ids=changed).logits[:, 0]
    leak = (first - other).abs().max().item()
    print(f"decoder position 0's logits when only the later decoder tokens change: max |Δ| {leak:.2e}")

    if max(deltas) > TOLERANCE or leak > TOLERANCE:
        print("BUG: the decoder self-attention sees later tokens (not causal)")
        return 1
    print("OK: cached and uncached generate() agree; the decoder is causal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
