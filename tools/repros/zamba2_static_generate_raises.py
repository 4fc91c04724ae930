#!/usr/bin/env python3
"""``generate(cache_implementation="static")`` on Zamba2 raises in transformers 5.5-5.14.

5.5-5.13: ``StaticCache(config)`` builds a plain attention layer for each of Zamba2's ``hybrid`` layers (every layer type
that is not mamba/conv/linear_attention/moe becomes a ``StaticLayer``, cache_utils.py:1355-1368 in 5.5.4), and the hybrid
layer's Mamba mixer asks that layer ``has_previous_state`` (modeling_zamba2.py:668 in 5.8.1), which raises ValueError on
an attention layer (cache_utils.py:1099-1118 in 5.8.1); ``generate()`` itself raises (KeyError 'mamba' on 5.5-5.12, the
same ValueError on 5.13). 5.14 builds a hybrid layer, but ``generate()``'s static path hands the forward its dict of
per-layer-type masks as ``attention_mask``, which ``Zamba2Model.forward`` passes to ``create_causal_mask``
(modeling_zamba2.py:1203 in 5.14.1), reading ``attention_mask.ndim`` (masking_utils.py:830): AttributeError. 5.15 runs
it and picks the dynamic cache's tokens (5.4 ignores ``cache_implementation`` for this model). Exit 1 while static
``generate()`` raises or parts from the dynamic one, 0 when they agree.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.5,<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
CONFIG = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "layers_block_type": ["mamba", "hybrid"],
          "intermediate_size": 128, "attention_hidden_size": 128, "attention_head_dim": 32, "num_attention_heads": 4,
          "num_key_value_heads": 2, "n_mamba_heads": 8, "mamba_headdim": 16, "mamba_d_state": 8, "mamba_d_conv": 4,
          "mamba_expand": 2, "mamba_ngroups": 1, "num_mem_blocks": 1, "use_mem_rope": False, "initializer_range": 0.15,
          "max_position_embeddings": 64}


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.manual_seed(0)
    model = transformers.Zamba2ForCausalLM(transformers.Zamba2Config(**CONFIG)).float().eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    runs = {}
    for implementation in (None, "static"):
        try:
            runs[implementation] = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                                  do_sample=False, pad_token_id=0, cache_implementation=implementation)
        except Exception as exc:  # the raise is the finding
            print(f"generate(cache_implementation={implementation!r}) raised {type(exc).__name__}: {exc}")
    bad = len(runs) < 2 or not torch.equal(runs[None], runs["static"])
    if len(runs) == 2:
        print(f"static generate() against the dynamic one: the same tokens {not bad}")
    print("BUG: Zamba2's static generate() does not run" if bad else "ok: Zamba2's static generate() runs")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
