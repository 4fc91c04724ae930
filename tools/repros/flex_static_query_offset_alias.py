"""transformers 5.24, flex_attention with a StaticCache: decoded tokens attend one slot too far.

create_causal_mask hands the flex mask the cache's query offset (masking_utils.py:840-843); for a StaticLayer
that is the layer's own cumulative_length tensor (cache_utils.py:504; .to() on the same device returns the
same tensor). flex_attention evaluates the BlockMask's mask_mod again inside the attention call, after
StaticLayer.update() has incremented that tensor in place (cache_utils.py:483), so every decode step sees
q_offset + 1: each query also attends to the next, unwritten slot. Prefill is right (the offset is the int 0
there); sdpa and the dynamic cache are right; handing the mask a copy of the counter fixes it (Δ 4e-6).
Run: python flex_static_query_offset_alias.py  (torch + transformers only; exits 1 while the bug is there).
Exits 2 where it cannot tell: where compiled flex_attention itself disagrees with the math at the lengths used
(torch 2.13's kernel for the avx2 vector ISA is wrong at key lengths 8 and 24; without a vector ISA inductor
refuses flex on CPU), the cached runs would differ for the compiler's sake.
"""
import sys

import torch
import transformers
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from transformers import DynamicCache, StaticCache

TRANSFORMERS = ">=5.24"  # flex + StaticCache checked on 5.24 only

CONFIG = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, vocab_size=256, initializer_range=0.15)
PROMPT, TOTAL = 6, 13


def max_delta(model, cache):
    """Prefill PROMPT tokens, decode the rest one by one; max |Δlogit| against one uncached pass."""
    ids = torch.randint(3, 256, (2, TOTAL), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        steps = [model(input_ids=ids[:, :PROMPT], cache=cache, use_cache=True).logits[:, -1]]
        for position in range(PROMPT, TOTAL - 1):
            steps.append(model(input_ids=ids[:, position : position + 1], cache=cache, use_cache=True).logits[:, -1])
        reference = model(input_ids=ids[:, : TOTAL - 1], use_cache=False).logits[:, PROMPT - 1 :]
    return max(float((step - reference[:, k]).abs().max()) for k, step in enumerate(steps))


def compiler_fault():
    """Why compiled flex_attention is itself wrong here at this script's lengths (against eager flex), or None."""
    def checked_flex(*args, **kwargs):  # a code object of its own: flex_attention's compiled graphs stay transformers'
        return flex_attention(*args, **kwargs)

    compiled = torch.compile(checked_flex, dynamic=True)
    generator = torch.Generator().manual_seed(0)
    for q_len, kv_len in [(n, n) for n in (PROMPT, TOTAL - 1)] + [(1, n) for n in range(PROMPT + 1, TOTAL + 1)]:
        q = torch.randn(2, 4, q_len, 16, generator=generator)
        k, v = (torch.randn(2, 2, kv_len, 16, generator=generator) for _ in range(2))
        causal = create_block_mask(lambda b, h, qi, ki: qi >= ki, 2, None, q_len, kv_len, device="cpu", _compile=False)
        mask = causal if q_len > 1 else None  # one query at the end attends to every key
        try:
            out = compiled(q, k, v, block_mask=mask, enable_gqa=True)
        except Exception as exc:  # inductor refusing flex on this CPU
            return f"it does not compile ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]})"
        delta = float((out - flex_attention(q, k, v, block_mask=mask, enable_gqa=True)).abs().max())
        if not delta < 1e-4:
            return f"Δ {delta:.3g} against eager flex at query length {q_len}, key length {kv_len}"
    return None


def main():
    fault = compiler_fault()
    if fault is not None:
        print(f"cannot show the bug on this CPU: compiled flex_attention is itself wrong here: {fault}")
        return 2
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM._from_config(CONFIG, attn_implementation="flex_attention").eval()
    dynamic = max_delta(model, DynamicCache(config=CONFIG))
    static = max_delta(model, StaticCache(config=CONFIG, max_cache_len=TOTAL))
    print(f"flex_attention, max |Δlogit| cached vs uncached: DynamicCache {dynamic:.2e}, StaticCache {static:.2e}")
    return 1 if static > 1e-3 and dynamic < 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
