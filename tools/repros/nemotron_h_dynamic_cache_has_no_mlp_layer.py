#!/usr/bin/env python3
"""transformers 5.14: DynamicCache(config) has no layer class for NemotronH's "mlp" blocks.

5.14 builds a DynamicCache's layers from config.layer_types through DYNAMIC_LAYER_TYPE_MAPPING
(``DYNAMIC_LAYER_TYPE_MAPPING[layer_type](**layer_kwargs)``, cache_utils.py:1709 in 5.14.1), which maps "moe" but
not "mlp" (cache_utils.py:1156-1171), while NemotronHConfig's layer_types may hold "mlp" (its own default
["linear_attention", "moe", "full_attention", "mlp"], configuration_nemotron_h.py:165; every hybrid_override_pattern
with a "-", as the published Nemotron-H checkpoints have): NemotronHModel.forward builds DynamicCache(config=...)
whenever use_cache is on (modeling_nemotron_h.py:1097), so every cached forward, generate() included, raises
KeyError: 'mlp'. 5.15 maps "mlp" too (cache_utils.py:1237 in 5.15.1).
Exit 1 while the bug is there (generate() raises KeyError), 0 when generate() runs.
"""
import sys

import torch
import transformers
from transformers import NemotronHConfig, NemotronHForCausalLM

TRANSFORMERS = ">=5.14,<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = NemotronHConfig(
        vocab_size=256, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
        mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=1, chunk_size=8, max_position_embeddings=64,
        hybrid_override_pattern="M*-",  # a Mamba2 block, an attention block and an MLP block, as the checkpoints mix them
    )
    print(f"layer types: {config.layer_types}")
    torch.manual_seed(0)
    model = NemotronHForCausalLM(config).eval()
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10]])
    try:
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                                 pad_token_id=0)
    except KeyError as exc:
        print(f"BUG: generate() raised KeyError: {exc} (DynamicCache(config) has no layer class for it)")
        return 1
    print(f"generate() ran: {out[0, 6:].tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
