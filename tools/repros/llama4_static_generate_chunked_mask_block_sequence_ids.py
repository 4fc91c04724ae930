#!/usr/bin/env python3
"""``generate(cache_implementation="static")`` on Llama 4 raises TypeError in transformers 5.9-5.19.

From 5.9 ``create_masks_for_generate`` puts ``block_sequence_ids`` into the keywords it hands every layer type's mask
function (masking_utils.py mask_kwargs, ``"block_sequence_ids": block_sequence_ids``; generation/utils.py passes it on a
compileable cache's mask step), but ``create_chunked_causal_mask``, the function of Llama 4's "chunked_attention" layers
(``LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING``), takes no such keyword until 5.20 (masking_utils.py
``create_chunked_causal_mask`` signature in 5.19.0 against 5.20.2): every static ``generate()`` of a Llama 4 config
with chunked-attention layers, as every published one has (``attention_chunk_size`` 8192), raises before its first
forward. Exit 1 while the static ``generate()`` raises or picks other tokens than the dynamic one, 0 when they agree.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.9,<5.20"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
CONFIG = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "intermediate_size_mlp": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "max_position_embeddings": 64, "initializer_range": 0.15, "num_experts_per_tok": 1, "num_local_experts": 4,
          "interleave_moe_layer_step": 1, "no_rope_layers": [1, 0], "attention_chunk_size": 4, "pad_token_id": 0}


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = transformers.Llama4TextConfig(**CONFIG)
    print(f"layer_types {getattr(config, 'layer_types', None)}")
    torch.manual_seed(0)
    model = transformers.Llama4ForCausalLM(config).float().eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    runs = {}
    for implementation in (None, "static"):
        try:
            runs[implementation] = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                                  do_sample=False, pad_token_id=0, cache_implementation=implementation)
        except Exception as exc:  # the raise is the finding
            print(f"generate(cache_implementation={implementation!r}) raised {type(exc).__name__}: {exc}")
    if len(runs) == 2:
        print(f"dynamic {runs[None][:, 6:].tolist()}, static {runs['static'][:, 6:].tolist()}")
    bad = len(runs) < 2 or not torch.equal(runs[None], runs["static"])
    print("static generate() raises or parts from the dynamic one" if bad else "static generate() agrees with dynamic")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
