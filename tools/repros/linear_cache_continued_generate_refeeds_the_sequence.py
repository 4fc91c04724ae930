#!/usr/bin/env python3
"""transformers 5.0-5.24: a Mamba's generate() continued from the cache a previous generate() returned feeds the whole
sequence to the recurrent state again.

Expected (model bug, transformers < 5.25): `generate(out.sequences, <cache keyword>=out.past_key_values)` must feed
the model only the token the cache lacks (transformers' test_generate_continue_from_past_key_values). 5.24's prefill
slices the ids by the cache's length only when the cache has a non-linear layer (`if cache is not None and not
all(cache.is_linear)`, generation/utils.py:4307 in 5.24.0); a cache of linear-attention (SSM) layers alone, Mamba's,
Mamba2's and FalconMamba's, gets all of the ids again, which run through the conv and SSM states that already hold
them: the continued call's logits leave one long call's (0.0035 here, 0.15-0.34 on kvconform's shrunk builds). 5.25.0
drops the `is_linear` condition and slices (exit 0). Before 5.5 the same continuation meets MambaCache (5.0-5.3: the
whole sequence fed as well) or raises (5.4.0: the conv state refuses the 10 tokens).
Exit 1 when the continued call feeds more tokens than the cache lacks and its logits differ, or raises; 0 otherwise.
"""
import inspect
import sys

import torch
import transformers
from transformers import MambaConfig, MambaForCausalLM

TRANSFORMERS = "<5.25"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = MambaConfig(vocab_size=256, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4)
    torch.manual_seed(0)
    model = MambaForCausalLM(config).eval()
    prompt = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(0))
    settings = {"do_sample": False, "return_dict_in_generate": True, "output_logits": True, "eos_token_id": None, "pad_token_id": 0}
    long = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, **settings)
    fed: list[int] = []

    def record(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        fed.append(ids.shape[1])

    model.backbone.register_forward_pre_hook(record, with_kwargs=True)
    short = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, **settings)
    # The release's cache keyword: `cache_params` (MambaCache, then a DynamicCache) up to 5.23, `past_key_values` on.
    keyword = "cache_params" if "cache_params" in inspect.signature(model.forward).parameters else "past_key_values"
    cache, sequences = short.past_key_values, short.sequences
    fed.clear()
    try:
        rest = model.generate(sequences, attention_mask=torch.ones_like(sequences), max_new_tokens=4, **{keyword: cache}, **settings)
    except RuntimeError as exc:
        print(f"transformers {transformers.__version__}: the continued call fed {fed[0]} token(s) and raised: {exc}".splitlines()[0])
        return 1
    delta = max(float((rest.logits[k] - long.logits[4 + k]).abs().max()) for k in range(4))
    print(f"transformers {transformers.__version__}: {type(cache).__name__}; the continued call fed {fed[0]} token(s) of a "
          f"{sequences.shape[1]}-token sequence whose first {sequences.shape[1] - 1} the state holds; max |Δlogit| against one "
          f"long generate(): {delta:.3g}")
    return 1 if fed[0] > 1 and delta > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
