"""UnlimitedOcr: generate(use_cache=False) attends to every earlier token, generate() with its cache by the R-SWA window.

transformers 5.24.0: its text layers are reference sliding window attention (R-SWA; configuration_unlimited_ocr.py:151-153:
"every token attends to the last `sliding_window` and all image and prompt tokens"). Where the prompt ends is known only
to a cache: generate() declares it on the cache before the prefill (UnlimitedOcrGenerationMixin._prefill,
generation_unlimited_ocr.py:63-77), and the mask reads it from the cache's R-SWA layer; without a cache the mask takes
every token for prompt (create_reference_sliding_window_causal_mask: prefill_length inf, modeling_unlimited_ocr.py:
1676-1680). generate(use_cache=False) so decodes with full causal attention, generate() with its cache with the window:
once more tokens are decoded than the window holds, the two are different functions by design (a model limitation, not a
cache fault). The cached steps do match one pass over the same tokens with the prompt's length declared on an empty cache
(the mask generate() uses), and with a window wider than the generated tokens both generate() calls agree.
Exit 1 when the limitation shows. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import DynamicCache, UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration


def build(window: int) -> UnlimitedOcrForConditionalGeneration:
    torch.manual_seed(0)
    text = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "n_shared_experts": 1, "sliding_window": window, "initializer_range": 0.15}
    return UnlimitedOcrForConditionalGeneration(UnlimitedOcrConfig(text_config=text)).eval()


prompt = torch.randint(3, 200, (2, 6), generator=torch.Generator().manual_seed(0))
steps = 10


def run(window: int) -> tuple[bool, float]:
    """Whether cached and uncached generate() pick the same tokens, and max |Δlogit| of the cached steps to one pass over
    their tokens with the prompt declared as the prefill."""
    model = build(window)
    with torch.no_grad():
        kwargs = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": steps, "min_new_tokens": steps,
                  "do_sample": False}
        cached = model.generate(prompt, output_logits=True, return_dict_in_generate=True, **kwargs)
        uncached = model.generate(prompt, use_cache=False, **kwargs)
        cache = DynamicCache(config=model.config)
        for layer in cache.layers:
            layer.set_prefill_length(prompt.shape[1])
        declared = model(input_ids=cached.sequences, cache=cache, use_cache=True).logits
    gap = max(float((logits - declared[:, prompt.shape[1] - 1 + k]).abs().max()) for k, logits in enumerate(cached.logits))
    same = torch.equal(cached.sequences, uncached)
    print(f"sliding_window {window}: cached and uncached generate() tokens {'agree' if same else 'differ'}; "
          f"cached steps vs one pass with the prompt declared: max |Δlogit| {gap:.1e}")
    return same, gap


narrow_same, narrow_gap = run(4)
wide_same, wide_gap = run(64)
sys.exit(1 if not narrow_same and wide_same and max(narrow_gap, wide_gap) < 1e-4 else 0)
