#!/usr/bin/env python3
"""transformers 5.5-5.12: a Mamba's second generate(cache_implementation="static") with the same arguments raises.

Expected (model bug, transformers >= 5.5, < 5.13): generate() keeps the static cache it built on the model and, on the
next call, asks the kept cache whether it is large enough to reuse, reading max_cache_len from its layers; a Mamba's
static cache holds LinearAttentionLayer objects, which have no max_cache_len, so the second call with the very same
arguments raises AttributeError while the first one ran (the state a call leaves on the instance breaks the next one).
Exit 1 when the second call raises that AttributeError; 0 when both calls run and agree.
"""
import sys

import torch
import transformers
from transformers import MambaConfig, MambaForCausalLM

TRANSFORMERS = ">=5.5,<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = MambaConfig(vocab_size=256, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4)
    torch.manual_seed(0)
    model = MambaForCausalLM(config).eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    settings = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": 4, "do_sample": False, "pad_token_id": 0,
                "cache_implementation": "static"}
    first = model.generate(prompt, **settings)
    print(f"transformers {transformers.__version__}: the first generate(cache_implementation='static') runs")
    try:
        second = model.generate(prompt, **settings)
    except AttributeError as exc:
        print(f"the second call with the same arguments raised AttributeError: {exc}")
        return 1
    print(f"the second call runs and {'gives' if torch.equal(first, second) else 'parts from'} the first one's tokens")
    return 0 if torch.equal(first, second) else 1


if __name__ == "__main__":
    sys.exit(main())
