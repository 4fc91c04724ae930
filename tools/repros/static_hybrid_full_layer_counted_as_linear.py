#!/usr/bin/env python3
"""transformers 5.23: the full-attention mask of a StaticCache whose layers are all "hybrid" is sized by a sliding layer.

Expected (model bug, transformers 5.23.0 only): 5.23 picks the layer whose sizes the full-attention mask takes with
find_first_full_attention_index (masking_utils.py:886-900, called by create_causal_mask at :967), the first layer that
is not sliding, not linear and not dummy. Cache.is_linear (cache_utils.py:1894-1902 in 5.23.0) counts as linear every
LinearAttentionCacheLayerMixin except LinearAttentionAndFullAttentionLayer, the *dynamic* hybrid; the static one,
LinearAttentionAndStaticFullAttentionLayer (:1321, a LinearAttentionLayer and a StaticLayer), is counted linear. Inkling's
layers are all "hybrid_sliding" / "hybrid" (linear short convolutions and attention), so a StaticCache has no "full"
layer and the function falls back to layer 0, a hybrid_sliding layer (the published pattern: five sliding layers, then
one full, configuration_inkling.py:158-165): create_causal_mask builds the full layers' mask with the sliding layer's
get_mask_sizes (its window, not max_cache_len), and the full layers raise on the shapes once max_cache_len exceeds the
window (sdpa: "The size of tensor a (W) must match the size of tensor b (max_cache_len)" in create_position_bias_mask,
sdpa_attention.py:87; eager: the mask add). Every forward on such a StaticCache raises, prefill included, and so does
generate(cache_implementation="static") (which also meets the static "hybrid_sliding" mask mapping of 5.22-5.24, see
inkling_static_generate_mask_mismatch.py; with that mapping fixed, 5.23's generate() still raises here).
5.22 took the first non-sliding layer (is_sliding.index(False), masking_utils.py:915 in 5.22.2); 5.24 counts a layer
linear only if it is no CacheLayerMixin (cache_utils.py:1945-1951 in 5.24.0). Control: with 5.24's is_linear patched
into 5.23.0 the static forward runs and matches the uncached forward (prefill and the first decode step).
Exit 1 when the static forward raises and the control runs and matches; 0 when it runs; 2 when the control fails.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, StaticCache, cache_utils, masking_utils

TRANSFORMERS = ">=5.23,<5.24"  # 5.22.2 and 5.24.0 exit 0

SEED, BATCH, WINDOW, PROMPT, STEPS = 0, 2, 512, 520, 3  # the published window (sliding_window_size 512)
ATOL, RTOL = 1e-5, 3e-5


def build():
    """InklingTextConfig's published layer pattern (5 hybrid_sliding, 1 hybrid) and window, shrunk widths."""
    config = AutoConfig.for_model(
        "inkling_text", vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
        num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4,
        swa_num_key_value_heads=2, swa_head_dim=16, d_rel=16, n_routed_experts=4, num_experts_per_tok=2,
        sliding_window_size=WINDOW, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():  # seeded noise for zero-initialised weights, so the logits are not flat
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * 0.15)
    return model


def static_forward(model, prompt):
    """Prefill and one decode step on a StaticCache; the largest |cached - uncached| of those logits."""
    cache = StaticCache(config=model.config, max_cache_len=PROMPT + STEPS)
    print(f"static cache layers: {sorted({type(layer).__name__ for layer in cache.layers})}; "
          f"is_sliding {cache.is_sliding}, is_linear {cache.is_linear}")
    if hasattr(masking_utils, "find_first_full_attention_index"):
        print(f"find_first_full_attention_index -> layer {masking_utils.find_first_full_attention_index(cache)}")
    mask = torch.ones_like(prompt)
    prefill = model(prompt, attention_mask=mask, past_key_values=cache, use_cache=True).logits
    token = prefill[:, -1:].argmax(-1)
    step = model(token, attention_mask=torch.cat([mask, torch.ones_like(token)], 1), past_key_values=cache,
                 use_cache=True).logits
    full = torch.cat([prompt, token], 1)
    reference = model(full, attention_mask=torch.ones_like(full), use_cache=False).logits
    cached = torch.cat([prefill, step], 1)
    delta = (cached - reference).abs().max().item()
    limit = ATOL + RTOL * reference.abs().max().item()
    print(f"static prefill + decode step 0 vs uncached: max |delta| {delta:.3g} (limit {limit:.3g})")
    return delta <= limit


def static_generate(model, prompt):
    try:
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS, min_new_tokens=STEPS,
                       do_sample=False, eos_token_id=None, pad_token_id=0, cache_implementation="static")
        return "runs"
    except RuntimeError as exc:
        return f"raises RuntimeError: {exc}"


def is_linear_of_524(self):
    return [isinstance(layer, cache_utils.LinearAttentionCacheLayerMixin)
            and not isinstance(layer, cache_utils.CacheLayerMixin) for layer in self.layers]


@torch.inference_mode()
def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    model = build()
    print(f"layer_types {model.config.layer_types}, sliding_window_size {model.config.sliding_window_size}")
    prompt = torch.randint(3, 256, (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    mapping = masking_utils.LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING
    fixed_mapping = dict(mapping.get("hybrid_sliding", {}), sliding_attention=masking_utils.create_sliding_window_causal_mask)
    try:
        static_forward(model, prompt)
        print("the static forward runs")
        return 0
    except RuntimeError as exc:
        print(f"the static forward raises RuntimeError: {exc}")
    print(f"generate(cache_implementation='static') {static_generate(model, prompt)}")
    original_mapping = mapping.get("hybrid_sliding")
    mapping["hybrid_sliding"] = fixed_mapping
    print(f"  with 'hybrid_sliding' -> create_sliding_window_causal_mask (5.25's mapping): {static_generate(model, prompt)}")
    mapping["hybrid_sliding"] = original_mapping
    original = cache_utils.Cache.is_linear
    cache_utils.Cache.is_linear = property(is_linear_of_524)
    try:
        print("control (5.24's Cache.is_linear: a layer is linear only if it is no CacheLayerMixin):")
        agrees = static_forward(model, prompt)
    except RuntimeError as exc:
        print(f"control raises RuntimeError: {exc}; this script shows nothing here")
        return 2
    finally:
        cache_utils.Cache.is_linear = original
    if not agrees:
        print("control runs but leaves the uncached forward; this script shows nothing here")
        return 2
    print("BUG: the static hybrid full-attention layers are counted as linear, so their mask takes a sliding layer's sizes")
    return 1


if __name__ == "__main__":
    sys.exit(main())
