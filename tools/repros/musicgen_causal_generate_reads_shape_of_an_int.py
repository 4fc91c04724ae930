#!/usr/bin/env python3
"""transformers 5.0-5.14: MusicgenForCausalLM.generate() reads `.shape` of an int: every generate() call raises.

Expected (model bug, transformers 5.0.0-5.14.1): MusicgenForCausalLM.generate() sets `input_ids_length =
input_ids.shape[-1]` (an int) and, sizing the cache, tests `input_ids_length.shape[1] != input_ids_length`
(modeling_musicgen.py:1114 in 5.3.0, :1010 in 5.14.1; :1189 in 5.0.0), the first operand of the `and`, so it runs
on every call: generate() raises AttributeError: 'int' object has no attribute 'shape' before the first forward,
whatever the cache, num_beams or assistant. 5.15 drops the test (modeling_musicgen.py:990-1005 in 5.15.1).
The call gives num_beams and num_return_sequences explicitly, so the later release's other generate() bug
(musicgen_generate_config_without_defaults.py) stays out of the way; the control is a plain cached forward.
Exit 1 when generate() raises that AttributeError; 0 when it runs.
"""
import sys

import torch
from transformers import MusicgenDecoderConfig, MusicgenForCausalLM

TRANSFORMERS = "<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = MusicgenDecoderConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   ffn_dim=128, num_codebooks=1, max_position_embeddings=64, pad_token_id=255,
                                   bos_token_id=254, decoder_start_token_id=256)
    torch.manual_seed(0)
    model = MusicgenForCausalLM(config).eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    model(input_ids=prompt, use_cache=True)  # the control: the model itself runs
    raised = 0
    for implementation in ({}, {"cache_implementation": "static"}):
        name = implementation.get("cache_implementation", "dynamic")
        try:
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, min_new_tokens=4,
                                 do_sample=False, num_beams=1, num_return_sequences=1, pad_token_id=255,
                                 eos_token_id=None, decoder_start_token_id=256, **implementation)
            print(f"{name}: generate() ran: {tuple(out.shape)}")
        except AttributeError as exc:
            if "'int' object has no attribute 'shape'" not in str(exc):
                raise
            print(f"{name}: generate() raised AttributeError: {exc}")
            raised += 1
    return 1 if raised else 0


if __name__ == "__main__":
    sys.exit(main())
