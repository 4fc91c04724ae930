#!/usr/bin/env python3
"""transformers 5.0.0: CTRL's generate() gives other tokens when the prompt has extra masked left padding.

CTRLLMHeadModel.prepare_inputs_for_generation (modeling_ctrl.py:480-506 in 5.0.0) passes input_ids, the cache and
the attention mask but no position_ids, and CTRLModel.forward then numbers the tokens from the cache length
(``torch.arange(past_length, input_shape[-1] + past_length)``, modeling_ctrl.py:289-292): a row with k masked pad
columns on its left has its real tokens at positions k, k+1, ... instead of 0, 1, ..., so the same prompt decodes
to other tokens once padded (the attention mask hides the pads, not their positions). 5.1.0 takes
GenerationMixin.prepare_inputs_for_generation, which derives position_ids from the attention mask's cumsum, and the
padded and unpadded prompts give the same tokens. Exit 1 while they differ, 0 when they agree.
"""
import sys

import torch
import transformers
from transformers import CTRLConfig, CTRLLMHeadModel

TRANSFORMERS = "<5.1"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
PAD = 0


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = CTRLConfig(vocab_size=256, n_embd=64, n_layer=2, n_head=4, dff=128, n_positions=64, pad_token_id=PAD)
    torch.manual_seed(0)
    model = CTRLLMHeadModel(config).eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(1))
    padded = torch.cat([torch.full((2, 3), PAD), prompt], dim=1)
    mask = torch.cat([torch.zeros(2, 3, dtype=torch.long), torch.ones_like(prompt)], dim=1)
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": PAD}
    with torch.no_grad():
        plain = model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)[:, prompt.shape[1]:]
        shifted = model.generate(padded, attention_mask=mask, **kwargs)[:, padded.shape[1]:]
        uncached = model.generate(padded, attention_mask=mask, use_cache=False, **kwargs)[:, padded.shape[1]:]
    print(f"unpadded prompt:                    {plain.tolist()}")
    print(f"3 masked pad columns on the left:   {shifted.tolist()}")
    print(f"the same, generate(use_cache=False): {uncached.tolist()}")
    if torch.equal(plain, shifted):
        print("the padded prompt gives the unpadded prompt's tokens")
        return 0
    print("BUG: masked left padding changes CTRL's greedy tokens (positions counted from the pads)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
