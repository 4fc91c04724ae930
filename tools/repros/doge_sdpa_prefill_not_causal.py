#!/usr/bin/env python3
"""transformers 5.0-5.17: Doge under SDPA attends to later tokens when the causal mask is skipped.

Expected (model bug, transformers 5.0.0-5.17.0): DogeModel.forward calls ``create_causal_mask`` with its default
``allow_is_causal_skip=True`` (modeling_doge.py:589-596 in 5.3.0, :573-580 in 5.17.0), which under SDPA returns
``None`` for an unpadded prompt (generate()'s all-ones attention_mask included), leaving causality to SDPA's
``is_causal``. But DogeAttention then builds its own float mask from the values' ``dt_states``
(``prepare_dynamic_mask``, :346-380 in 5.3.0), which only gets the causal mask added ``if attention_mask is not None``,
and hands it to attention as ``attn_mask``: SDPA then runs with that mask and ``is_causal=False``, so every prompt
position attends to the tokens after it. A cached decode step (one query) sees only the past, so greedy generate()
with the cache parts from generate(use_cache=False), and the logits of a prefix change with the tokens after it.
5.18 passes ``allow_is_causal_skip=False`` ("Always materialize the mask: the dynamic mask is added onto it",
modeling_doge.py:576-584 in 5.18.0). Eager attention always gets the materialised mask and is not affected.
Exit 1 when the first 4 positions' logits move with the tokens after them (SDPA), 0 when they do not.
"""
import sys

import torch
import transformers
from transformers import DogeConfig, DogeForCausalLM

TRANSFORMERS = "<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = DogeConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                        attn_implementation="sdpa")
    torch.manual_seed(0)
    model = DogeForCausalLM(config).eval()
    for layer in model.model.layers:  # trained checkpoints have non-zero selection scales; the init leaves them 0
        layer.self_attn.A.copy_(torch.randn_like(layer.self_attn.A))
    prompt = torch.randint(3, 256, (1, 8), generator=torch.Generator().manual_seed(0))
    whole = model(input_ids=prompt, attention_mask=torch.ones_like(prompt)).logits[:, :4]
    prefix = model(input_ids=prompt[:, :4], attention_mask=torch.ones_like(prompt[:, :4])).logits
    leak = float((whole - prefix).abs().max())
    print(f"logits of positions 0-3: an 8-token forward vs a 4-token forward differ by {leak:.3g}")
    kwargs = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False, pad_token_id=0)
    cached = model.generate(prompt, use_cache=True, **kwargs)[0, 8:].tolist()
    uncached = model.generate(prompt, use_cache=False, **kwargs)[0, 8:].tolist()
    print(f"greedy generate(): cached {cached}, uncached {uncached}")
    if leak > 1e-4:
        print("BUG: the prompt's positions attend to the tokens after them")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
