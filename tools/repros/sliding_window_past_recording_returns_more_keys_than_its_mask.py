#!/usr/bin/env python3
"""Assisted decoding on a sliding-window model raises in transformers 5.15-5.17: a past-recording sliding layer returns
more keys than the mask it advertises.

Expected (model bug, transformers 5.15.x-5.17.x): 5.15 makes DynamicSlidingWindowLayer croppable. Assisted decoding
turns on past recording (cache.activate_past_recording(), generation/utils.py:415 in 5.17.0), and then update() keeps
every key and returns them all (cache_utils.py:255-261 in 5.15.1, :257-263 in 5.17.0: "we keep them all for now,
they'll be restricted to the window size in crop"), while get_mask_sizes() still advertises sliding_window - 1 +
query_length keys (:269 / :271). When several forwards run between two crops (the assistant's own generate() on its
past-recording cache), the attention gets more keys than mask columns: RuntimeError in sdpa (and eager). 5.18 returns
only the keys the mask advertises (cache_utils.py, DynamicSlidingWindowLayer.update); 5.14.1 and 5.18.0 return
greedy's tokens here.
A tiny Mistral (sliding_window 4) and a second random Mistral as its assistant, 3 drafts a burst, a 2-token prompt,
10 new tokens (the window rolls during the run). Exit 1 when assisted generate() raises that size mismatch; 0 when it
returns greedy's tokens.
"""
import sys

import torch
import transformers
from transformers import MistralConfig, MistralForCausalLM

TRANSFORMERS = ">=5.15,<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

CONFIG = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4, "max_position_embeddings": 64}


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    model = MistralForCausalLM(MistralConfig(**CONFIG)).eval()
    torch.manual_seed(1)
    assistant = MistralForCausalLM(MistralConfig(**CONFIG)).eval()
    assistant.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant",
                                       assistant_confidence_threshold=0.0)
    prompt = torch.randint(3, 256, (1, 2), generator=torch.Generator().manual_seed(0))
    settings = {"max_new_tokens": 10, "min_new_tokens": 10, "do_sample": False, "eos_token_id": None, "pad_token_id": 0,
                "attention_mask": torch.ones_like(prompt)}
    greedy = model.generate(prompt, **settings)
    try:
        assisted = model.generate(prompt, assistant_model=assistant, **settings)
    except RuntimeError as exc:
        print(f"transformers {transformers.__version__}: assisted generate() raised RuntimeError: {exc}")
        return 1 if "must match the size of tensor" in str(exc) else 2
    same = torch.equal(assisted, greedy)
    print(f"transformers {transformers.__version__}: assisted generate() {'returns' if same else 'does not return'} greedy's tokens")
    return 0 if same else 2


if __name__ == "__main__":
    sys.exit(main())
