#!/usr/bin/env python3
"""transformers 5.0-5.1: generate(cache_implementation="static") on a Bark causal stage raises: its forward flattens the
4-D causal mask generate() builds for a static cache.

Expected (model bug, transformers < 5.2; 5.2 fixes it): for a compileable cache, GenerationMixin.prepare_inputs_for_generation
turns the 2-D attention mask into the 4-D causal mask ``[B, 1, q, max_cache_len]`` (``create_masks_for_generate``);
BarkCausalModel.forward reads any mask as a 2-D padding mask, ``attention_mask.view(batch_size, -1)`` then
``_prepare_4d_attention_mask(..., tgt_len=1)`` (modeling_bark.py:504-507 in 5.0.0), so the eager attention adds a
``[B, 1, 1, q * max_cache_len]`` mask to ``[B, H, q, max_cache_len]`` weights and raises on the size (modeling_bark.py:137).
BarkModel.generate hands ``cache_implementation`` to both causal stages, so a user's static Bark call raises too. 5.2
builds the mask with ``create_bidirectional_mask``, which takes the 4-D mask as it is.
Exit 1 when the static call raises (or its tokens differ from the dynamic call's); 0 otherwise.
Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
import transformers
from transformers import BarkSemanticConfig
from transformers.models.bark.modeling_bark import BarkCausalModel

TRANSFORMERS = "<5.2"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.no_grad()
def main() -> int:
    torch.manual_seed(0)
    config = BarkSemanticConfig(input_vocab_size=256, output_vocab_size=256, hidden_size=64, num_layers=2, num_heads=4,
                                block_size=64)
    model = BarkCausalModel(config).eval()
    prompt = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    settings = {"max_new_tokens": 4, "do_sample": False, "eos_token_id": None, "pad_token_id": 0,
                "attention_mask": torch.ones_like(prompt)}
    dynamic = model.generate(prompt, **settings)
    try:
        static = model.generate(prompt, cache_implementation="static", **settings)
    except RuntimeError as exc:
        print(f"transformers {transformers.__version__}: generate(cache_implementation='static') raised {exc}")
        return 1
    print(f"transformers {transformers.__version__}: static {static[:, -4:].tolist()} vs dynamic {dynamic[:, -4:].tolist()}")
    return 0 if torch.equal(static, dynamic) else 1


if __name__ == "__main__":
    sys.exit(main())
