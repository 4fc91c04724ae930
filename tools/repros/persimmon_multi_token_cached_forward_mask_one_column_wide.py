#!/usr/bin/env python3
"""transformers 5.0-5.1: Persimmon (and Fuyu, whose language model it is) sizes its causal mask past + new + 1 keys
without an attention_mask, so a cached forward of several tokens raises under SDPA, the default attention.

PersimmonModel._update_causal_mask ("Copied from transformers.models.gptj.modeling_gptj.GPTJModel._update_causal_mask")
takes target_length = past_seen_tokens + sequence_length + 1 when no 2-D attention_mask is given
(modeling_persimmon.py:583-587 in 5.1.0, the same in 5.0.0), one column more than the keys a DynamicCache returns.
The eager attention cuts the mask to the keys (attention_mask[:, :, :, : key.shape[-2]], :191); 5.0-5.1's
sdpa_attention_forward (integrations/sdpa_attention.py) passes it whole, so a forward of several tokens over a filled
cache (a cached prefix extended by 2 tokens, a prompt prefilled in chunks) raises RuntimeError: The size of tensor a (6)
must match the size of tensor b (7) here. A one-token decode step takes SDPA's shortcut (_ignore_causal_mask_sdpa) and runs,
and generate() always passes a 2-D mask, so neither shows it. Mllama's and Kosmos-2.5's text models built their masks the
same way (mllama_multi_token_cached_forward_mask_one_column_wide.py), and StableLM copies the same function
(modeling_stablelm.py:570-611 in 5.0.0 and 5.1.0). 5.2 builds the masks with masking_utils.create_causal_mask
(modeling_persimmon.py:492-498, modeling_stablelm.py:518 in 5.2.0), sized by the cache, and the script exits 0.

Prefill 4 tokens of a 6-token prompt, extend the cache by the last 2 at once without an attention_mask (as
model(input_ids, past_key_values=cache) is called), and compare those 2 positions' logits with one uncached forward of
the 6 tokens, for PersimmonForCausalLM, a text-only FuyuForCausalLM and StableLmForCausalLM (adept/persimmon-8b's,
adept/fuyu-8b's and stabilityai/stablelm-3b-4e1t's configs narrowed). Exit 1 when a model raises or the logits
differ, else 0.
"""
import sys

import torch
import transformers
from transformers import (
    DynamicCache,
    FuyuConfig,
    FuyuForCausalLM,
    PersimmonConfig,
    PersimmonForCausalLM,
    StableLmConfig,
    StableLmForCausalLM,
)

TRANSFORMERS = "<5.2"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

# adept/persimmon-8b's config with its widths narrowed (relu2, qk_layernorm, partial_rotary_factor 0.5 kept)
TEXT = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "hidden_act": "relu2", "max_position_embeddings": 64, "qk_layernorm": True, "partial_rotary_factor": 0.5,
        "initializer_range": 0.15, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def gap(model: torch.nn.Module, prompt: torch.Tensor) -> float:
    """max |Δlogit| of the 2 positions a cached forward of 2 tokens (no attention_mask) adds after a 4-token prefill."""
    with torch.no_grad():
        reference = model(input_ids=prompt, use_cache=False).logits[:, 4:]
        cache = DynamicCache(config=model.config)
        model(input_ids=prompt[:, :4], past_key_values=cache, use_cache=True)
        extended = model(input_ids=prompt[:, 4:], past_key_values=cache, use_cache=True).logits
    return float((extended - reference).abs().max())


def main() -> int:
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    persimmon = PersimmonForCausalLM(PersimmonConfig(**TEXT)).eval()
    torch.manual_seed(0)
    fuyu = FuyuForCausalLM(FuyuConfig(text_config={"model_type": "persimmon", **TEXT}, vocab_size=256, hidden_size=64,
                                      patch_size=30, num_channels=3)).eval()
    torch.manual_seed(0)
    stablelm = StableLmForCausalLM(StableLmConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=64, partial_rotary_factor=0.25, initializer_range=0.15,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)).eval()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    found = False
    for name, model in (("persimmon", persimmon), ("fuyu (text only)", fuyu), ("stablelm", stablelm)):
        attention = model.config._attn_implementation
        try:
            delta = gap(model, prompt)
        except RuntimeError as exc:
            print(f"BUG {name} ({attention}): the cached forward of 2 tokens raised RuntimeError: {exc}")
            found = True
            continue
        print(f"{name} ({attention}): max |cached extend - uncached| = {delta:.3g}")
        if delta > 1e-4:
            print(f"BUG {name}: the cached forward of 2 tokens leaves the uncached forward")
            found = True
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
