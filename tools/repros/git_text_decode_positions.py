#!/usr/bin/env python3
"""transformers 5.0-5.17: GIT's text-only cached decoding raises or goes to the wrong positions.

- 5.1-5.17: a one-token cached forward without pixel_values adds the cache length to position_ids
  (``position_ids = position_ids + past_key_values_length``, modeling_git.py:794-795 in 5.14.1): without position_ids
  it raises TypeError (None + int), and with generate()'s position_ids, which already count the cached tokens, every
  decoded token is embedded at twice its position, so generate() with the cache parts from generate(use_cache=False).
- 5.0: the same one-token cached forward widens the attention mask without checking there is one
  (``attention_mask.shape[0]``, modeling_git.py:1123 in 5.0.0): without an attention_mask it raises AttributeError.
- 5.0-5.3: GitEncoder hands its layers output_attentions where they take cache_position (positional arguments,
  modeling_git.py:446-452 in 5.3.0), so a StaticCache gets cache_position=False and its update raises TypeError
  (index_copy_ ... must be Tensor, not bool); generate(cache_implementation="static") raises alike.
5.18 removes the position shift and widens the mask only when there is one (modeling_git.py:837-851 in 5.18.0).
Exit 1 while any of these is there, 0 when cached decoding runs and generate() agrees with and without the cache.
"""
import sys

import torch
import transformers
from transformers import GitConfig, GitForCausalLM, StaticCache

TRANSFORMERS = "<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = GitConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                       max_position_embeddings=64,
                       vision_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                      "intermediate_size": 64, "image_size": 32, "patch_size": 16})
    torch.manual_seed(0)
    model = GitForCausalLM(config).eval()
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10]])
    bugs = []
    with torch.no_grad():
        kwargs = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
        cached = model.generate(prompt, **kwargs)[0, 6:].tolist()
        uncached = model.generate(prompt, use_cache=False, **kwargs)[0, 6:].tolist()
        print(f"generate(): cached {cached}, uncached {uncached}")
        if cached != uncached:
            bugs.append(f"generate() with the cache parts from generate(use_cache=False): {cached} vs {uncached}")
        out = model(prompt, use_cache=True)
        try:
            model(torch.tensor([[3]]), past_key_values=out.past_key_values, use_cache=True)
            print("a one-token cached forward (no position_ids, no attention_mask) runs")
        except (TypeError, AttributeError) as exc:
            bugs.append(f"a one-token cached forward raised {type(exc).__name__}: {exc}")
        try:
            static = StaticCache(config=config, max_cache_len=16)
            model(prompt, past_key_values=static, use_cache=True, cache_position=torch.arange(6))
            print("a StaticCache prefill runs")
        except TypeError as exc:
            bugs.append(f"a StaticCache prefill raised TypeError: {exc}")
    for bug in bugs:
        print(f"BUG: {bug}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
