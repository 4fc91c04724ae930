#!/usr/bin/env python3
"""transformers 5.2.0: XGLM adds its position offset to position_ids in place, and 5.2's generate() without a cache
hands the model the very position_ids tensor it keeps across steps, so every step shifts the stored positions by 2.

Expected (model bug, transformers 5.2.0 only): `generate(use_cache=False)` feeds every forward the positions
0 .. n-1 of the sequence so far, as the cached run does. XGLM's sinusoidal embedding does `position_ids += self.offset`
(modeling_xglm.py:93 in 5.0.0-5.2.0). Up to 5.1 generate() made fresh position_ids each step; 5.2 keeps them in
`model_kwargs["position_ids"]` (generation/utils.py:2564-2567, extended at :1061-1066) and, with no cache, passes that
tensor itself (the slice and clone run only `if past_key_values is not None or use_cache`, :663-672), so the offset
accumulates in it: the forward of step k sees positions shifted by 2 k, and uncached beam search (num_beams 3) returns
other tokens than the cached one. 5.3 writes `position_ids = position_ids + self.offset` (:93).
Exit 1 when a forward of the uncached generate() gets positions other than 0 .. n-1; 0 otherwise.
"""
import sys

import torch
import transformers
from transformers import XGLMConfig, XGLMForCausalLM

TRANSFORMERS = ">=5.2,<5.3"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = XGLMConfig(vocab_size=256, d_model=64, num_layers=2, attention_heads=4, ffn_dim=128, max_position_embeddings=64)
    torch.manual_seed(0)
    model = XGLMForCausalLM(config).eval()
    ids = torch.randint(4, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    settings = {"attention_mask": torch.ones_like(ids), "do_sample": False, "max_new_tokens": 3, "eos_token_id": None,
                "pad_token_id": 1, "num_beams": 3}
    fed: list[list[int]] = []
    model.model.embed_positions.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append((args[0] if args else kwargs["position_ids"])[0].tolist()), with_kwargs=True)
    uncached = model.generate(ids, use_cache=False, **settings)
    wrong = [(step, positions) for step, positions in enumerate(fed) if positions != list(range(len(positions)))]
    fed.clear()
    cached = model.generate(ids, use_cache=True, **settings)
    print(f"transformers {transformers.__version__}: uncached generate() forwards with positions other than 0..n-1: "
          f"{wrong or 'none'}; beam tokens cached {cached[:, 6:].tolist()} vs uncached {uncached[:, 6:].tolist()}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
