#!/usr/bin/env python3
"""generate(prefill_chunk_size=...) does not prefill the inputs_embeds it is given (transformers 5.1 to at least 5.25).

A decoder-only model's generate() takes the prompt as ``inputs_embeds`` (with its ``input_ids``) where rows of it are not
token embeddings: BLIP-2, InstructBLIP and InstructBLIP-Video scatter the image's query outputs into them and call
``language_model.generate(inputs_embeds=..., input_ids=..., attention_mask=...)`` (modeling_blip_2.py:1814-1818 in
5.24.0). The unchunked prefill hands them to the forward (prepare_inputs_for_generation, generation/utils.py:690-696);
the chunked branch of GenerationMixin._prefill splits ``input_ids`` only:
- 5.1-5.22 call ``prepare_inputs_for_generation(input_chunk, **model_kwargs)`` without ``is_first_iteration``
  (generation/utils.py:4344 in 5.22.2), which then embeds each chunk's ids: the embeddings given (the image) are
  dropped silently and the tokens part from plain generate();
- 5.23 on pass ``is_first_iteration=True`` (generation/utils.py:4399-4400 in 5.24.0), and every chunk gets the whole
  ``inputs_embeds`` (no ``next_sequence_length`` to slice them by): the first chunk's forward raises on the mask.
OPT (BLIP-2's language model) here, with four rows of the prompt's embeddings replaced as an image's would be.
Exit 1 while the bug is there (the chunked generate() raises or returns other tokens), else 0.
"""
import sys

import torch
import transformers
from transformers import OPTConfig, OPTForCausalLM

TRANSFORMERS = ">=5.1"  # 5.0 refuses every chunked prefill ("Cannot use prefill chunking without a cache")


def main() -> int:
    torch.manual_seed(0)
    model = OPTForCausalLM(OPTConfig(vocab_size=256, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                                     max_position_embeddings=64, word_embed_proj_dim=64, init_std=0.15)).eval()
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        embeds[:, 2:6] = torch.randn(2, 4, 64, generator=torch.Generator().manual_seed(2))  # an image's rows
        given = {"input_ids": ids, "inputs_embeds": embeds, "attention_mask": torch.ones_like(ids), "max_new_tokens": 3,
                 "min_new_tokens": 3, "do_sample": False, "pad_token_id": 1}
        plain = model.generate(**given)[:, ids.shape[1]:].tolist()
        embedded = model.generate(**{**given, "inputs_embeds": model.get_input_embeddings()(ids)})[:, ids.shape[1]:].tolist()
        print(f"torch {torch.__version__}, transformers {transformers.__version__}")
        print(f"generate(inputs_embeds=...): {plain}; with the ids' own embeddings instead: {embedded}")
        try:
            chunked = model.generate(**given, prefill_chunk_size=3)[:, ids.shape[1]:].tolist()
        except Exception as exc:  # the bug on 5.23+
            print(f"BUG: generate(inputs_embeds=..., prefill_chunk_size=3) raised {type(exc).__name__}: {str(exc)[:120]}")
            return 1
    print(f"generate(inputs_embeds=..., prefill_chunk_size=3): {chunked}")
    if chunked != plain:
        print("BUG: the chunked generate() parts from generate()" + (": it generated from the ids' own embeddings" if chunked == embedded else ""))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
