#!/usr/bin/env python3
"""transformers 5.0-5.1: Bark's causal stages, generating without a cache from prompt embeddings, drop the embeddings
after the first step and embed the placeholder ids generate() was given instead.

Expected (model bug, transformers < 5.2; 5.2 fixes it): BarkSemanticModel.generate starts its GPT from ``input_embeds``
(the text and the voice preset's history summed, placeholder ``input_ids`` of ones, modeling_bark.py:613-620 in 5.1.0).
generate() keeps embeddings for the first step only, and so forces the cache for a decoder-only model whose input is
``inputs_embeds`` (generation/utils.py:2525-2528 in 5.1.0: "decoder-only models with inputs_embeds forwarding must use
caching"); Bark's keyword is ``input_embeds``, so use_cache=False stands, and every uncached step after the first gets
``input_ids``, the placeholder ones plus the generated ids, without the prompt's embeddings: generate(use_cache=False)
decodes another sequence than the cached run from its second token. 5.2 renames the argument ``inputs_embeds``, and
generate() then runs the cache either way.
Exit 1 when an uncached forward after the first gets ids instead of the prompt's embeddings; 0 otherwise.
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
    embeds = model.input_embeds_layer(prompt)
    keyword = "input_embeds" if "input_embeds" in model.forward.__code__.co_varnames else "inputs_embeds"
    fed: list[str] = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(f"embeddings {kwargs[keyword].shape[1]}" if kwargs.get(keyword) is not None
                                                else f"ids {kwargs['input_ids'].shape[1]}"), with_kwargs=True)
    runs = {}
    for use_cache in (True, False):
        fed.clear()
        out = model.generate(torch.ones_like(prompt), **{keyword: embeds}, max_new_tokens=4, do_sample=False,
                             use_cache=use_cache, eos_token_id=None, pad_token_id=0)
        runs[use_cache] = (out[:, -4:].tolist(), list(fed))
    (cached, cached_fed), (uncached, uncached_fed) = runs[True], runs[False]
    print(f"transformers {transformers.__version__}: positions each forward was given: cached {cached_fed}, "
          f"uncached {uncached_fed}; tokens cached {cached} vs uncached {uncached}")
    # an uncached forward over the whole sequence from ids: the prompt's embeddings replaced by the placeholders'
    return 1 if any(entry == f"ids {prompt.shape[1] + k}" for k, entry in enumerate(uncached_fed[1:], start=1)) else 0


if __name__ == "__main__":
    sys.exit(main())
