#!/usr/bin/env python3
"""transformers 5.25: Zamba's (and Zaya's) Mamba mixer records no recurrent states for ``crop``, while 5.25's
``LinearAttentionLayer`` declares itself croppable, so assisted decoding crashes or continues from the wrong state.

5.25 makes linear-attention layers croppable (``LinearAttentionLayer.is_croppable = True``): after
``activate_past_recording(recurrent_states_to_keep=K)`` the mixers are to hand ``update_recurrent_state`` the states
after each of a forward's last K tokens (``cache.get_recurrent_states_to_keep(layer_idx)``, read by every other
mixer, e.g. ``modeling_mamba2.py:455-459``), and ``crop(-k)`` restores ``recurrent_states_history[-k]``
(``cache_utils.py:1204``). ZambaMambaMixer never asks for K and hands over the final state only
(``modeling_zamba.py:678``; Zaya the same at ``modeling_zaya.py:254``), so the history holds just the state from before
the forward: ``crop(-1)`` restores that (the next token is computed without the tokens of the forward), and
``crop(-k)`` for k >= 2 raises IndexError. Assisted decoding records K = the drafts per burst and crops the rejected
ones (``generation/utils.py:4002``), so ``generate(assistant_model=...)`` raises or parts from greedy ``generate()``.
5.24 marks these caches not croppable, and assisted decoding does not run on them.

Exit 1 while the bug is there (crop(-k) raises or the next token leaves one uncached pass), else 0.
Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

TRANSFORMERS = ">=5.25"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
KEEP = 3


def main() -> int:
    config = AutoConfig.for_model(
        "zamba", vocab_size=256, hidden_size=64, attention_hidden_size=128, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, attention_head_dim=32, num_key_value_heads=2, n_mamba_heads=2, attn_layer_period=6,
        attn_layer_offset=4, mamba_d_state=8, mamba_dt_rank=8, max_position_embeddings=64, initializer_range=0.15,
        layers_block_type=["linear_attention", "hybrid", "hybrid"], use_mamba_kernels=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(3, 256, (1, 10), generator=torch.Generator().manual_seed(0))
    results = []
    with torch.no_grad():
        reference = model(input_ids=ids, use_cache=False).logits
        for k in range(1, KEEP + 1):
            cache = DynamicCache(config=config)
            cache.activate_past_recording(recurrent_states_to_keep=KEEP)
            model(input_ids=ids[:, :9], past_key_values=cache, use_cache=True)
            kept = [len(h) for layer in cache.layers for h in getattr(layer, "recurrent_states_history", {}).values()]
            try:
                cache.crop(-k)
            except IndexError as exc:
                results.append(f"crop(-{k}) raised IndexError: {exc} (states kept per layer: {kept})")
                continue
            step = model(input_ids=ids[:, 9 - k : 10 - k], past_key_values=cache, use_cache=True).logits[:, -1]
            delta = float((step - reference[:, 9 - k]).abs().max())
            results.append(f"crop(-{k}): next token |Δlogit| {delta:.3g} against one uncached pass (states kept: {kept})")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; a 9-token prefill recording {KEEP} states:")
    print("\n".join(results))
    bad = [r for r in results if "raised" in r or float(r.split("|Δlogit| ")[1].split()[0]) > 1e-4]
    if bad:
        print(f"BUG: {len(bad)} of {KEEP} crops do not restore the state after the kept tokens")
        return 1
    print("ok: every crop(-k) restores the state after token 9 - k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
