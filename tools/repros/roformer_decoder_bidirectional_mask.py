#!/usr/bin/env python3
"""transformers 5.9-5.17: RoFormerForCausalLM (and BigBird, MegatronBert, RemBert) attend to later tokens: a bidirectional mask.

Expected (model bug, transformers 5.9.0-5.17.0): 5.9 moves RoFormerModel.forward from
`get_extended_attention_mask(attention_mask, input_shape)` (causal when `config.is_decoder`, modeling_roformer.py:718
in 5.8.1) to masking_utils, but calls `create_bidirectional_mask` whatever `is_decoder` says (modeling_roformer.py:723
in 5.9.0, :727 in 5.17.0). A RoFormerForCausalLM (is_decoder=True) then lets every prompt position attend to the
positions after it: a position's logits change when a later token changes, and greedy generate() with the cache
(one token per step: the new token cannot see the future) parts from generate(use_cache=False) (the whole sequence
every step, each position seeing the tokens after it). 5.18 builds `create_causal_mask` when `config.is_decoder`
(modeling_roformer.py:729 in 5.18.0). BigBird, MegatronBert and RemBert move to masking_utils the same way in 5.9
(create_bidirectional_mask whatever is_decoder says: modeling_big_bird.py:1674, modeling_megatron_bert.py:639,
modeling_rembert.py:571 in 5.9.0; :1629, :637, :569 in 5.17.0; up to 5.8 get_extended_attention_mask, :1667, :632,
:564 in 5.8.1) and 5.18 fixes them alike (modeling_big_bird.py:1631, modeling_megatron_bert.py:637,
modeling_rembert.py:569 in 5.18.0).
Exit 1 when an earlier position's logits depend on a later token in any of them (and say whether the two generate()
calls part); 0 when every decoder is causal.
"""
import sys

import torch
import transformers
from transformers import (
    BigBirdConfig,
    BigBirdForCausalLM,
    MegatronBertConfig,
    MegatronBertForCausalLM,
    RemBertConfig,
    RemBertForCausalLM,
    RoFormerConfig,
    RoFormerForCausalLM,
)

TRANSFORMERS = ">=5.9,<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def leaks(name: str, model: torch.nn.Module) -> bool:
    """Whether an earlier position's logits depend on a later token (and whether cached and uncached generate() part)."""
    prompt = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(0))
    changed = prompt.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 256
    logits = model(input_ids=prompt, use_cache=False).logits
    logits_changed = model(input_ids=changed, use_cache=False).logits
    leak = float((logits[0, :-1] - logits_changed[0, :-1]).abs().max())
    settings = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "attention_mask": torch.ones_like(prompt)}
    cached = model.generate(prompt, use_cache=True, **settings)[0, 6:].tolist()
    uncached = model.generate(prompt, use_cache=False, **settings)[0, 6:].tolist()
    print(f"{name}: changing the last of 6 prompt tokens moves the logits of positions 0-4 by up to {leak:.3g}; greedy "
          f"generate(): use_cache=True {cached}, use_cache=False {uncached} ({'equal' if cached == uncached else 'they part'})")
    return leak > 1e-4


@torch.inference_mode()
def main() -> int:
    print(f"transformers {transformers.__version__}")
    sizes = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
             "max_position_embeddings": 64, "is_decoder": True, "initializer_range": 0.2, "attn_implementation": "eager"}
    found = []
    for name, config_class, model_class, extra in (
        ("RoFormer", RoFormerConfig, RoFormerForCausalLM, {}),
        ("BigBird", BigBirdConfig, BigBirdForCausalLM, {"attention_type": "original_full"}),
        ("MegatronBert", MegatronBertConfig, MegatronBertForCausalLM, {}),
        ("RemBert", RemBertConfig, RemBertForCausalLM, {"input_embedding_size": 64, "output_embedding_size": 64}),
    ):
        torch.manual_seed(0)
        found.append(leaks(name, model_class(config_class(**sizes, **extra)).eval()))
    return 1 if any(found) else 0


if __name__ == "__main__":
    sys.exit(main())
