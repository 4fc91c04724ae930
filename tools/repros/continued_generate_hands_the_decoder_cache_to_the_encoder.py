#!/usr/bin/env python3
"""transformers 5.0-5.3: generate() continued from a returned cache hands that cache to an encoder that takes **kwargs,
whose self-attention layers write the encoder's positions into the decoder's self-attention cache.

Expected (model bug, transformers < 5.4; 5.4 fixes it): `generate(input_values, decoder_input_ids=out.sequences,
past_key_values=out.past_key_values)` runs the encoder on the audio again; the encoder must not touch the decoder's
cache. `_prepare_encoder_decoder_kwargs_for_generation` drops only the `decoder_`, `cross_attn` and `use_cache`
arguments (`irrelevant_prefix`, generation/utils.py:919 in 5.2.0, :766 in 5.3.0) and passes everything else to an
encoder whose forward takes **kwargs; Moonshine's encoder forwards them to its layers (modeling_moonshine.py:603-610 in
5.2.0), whose self-attention updates `past_key_values.self_attention_cache` at the decoder's layer indices
(:300-308, :335). The cache that held 4 decoder positions holds 4 + the encoder length, so the continued prefill's
`cache_position` is empty and generate() raises IndexError (`_cache_dependant_input_preparation`,
generation/utils.py:521 in 5.2.0); on 5.3 the continuation runs on the corrupted cache. 5.4 adds `past_key_values`
and `cache_params` to `irrelevant_prefix` (generation/utils.py:774 in 5.4.0).
Exit 1 when the encoder call of the continued generate() changes the decoder cache's length; 0 otherwise.
"""
import sys

import torch
import transformers
from transformers import MoonshineConfig, MoonshineForConditionalGeneration

TRANSFORMERS = "<5.4"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = MoonshineConfig(vocab_size=256, hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2,
                             decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
                             encoder_num_key_value_heads=4, decoder_num_key_value_heads=4)
    torch.manual_seed(0)
    model = MoonshineForConditionalGeneration(config).eval()
    audio = torch.randn(1, 4000, generator=torch.Generator().manual_seed(0))
    settings = {"do_sample": False, "return_dict_in_generate": True, "eos_token_id": None}
    short = model.generate(input_values=audio, max_new_tokens=4, **settings)
    cache = short.past_key_values
    held = cache.self_attention_cache.get_seq_length()
    after_encoder: list[int] = []
    model.get_encoder().register_forward_hook(
        lambda module, args, out: after_encoder.append(cache.self_attention_cache.get_seq_length()))
    try:
        model.generate(input_values=audio, decoder_input_ids=short.sequences, past_key_values=cache, max_new_tokens=4,
                       **settings)
        outcome = "ran"
    except IndexError as exc:
        outcome = f"raised IndexError: {exc}"
    print(f"transformers {transformers.__version__}: the decoder cache held {held} position(s); after the continued "
          f"generate()'s encoder call {after_encoder}; the continued generate() {outcome}")
    return 1 if after_encoder and after_encoder[0] != held else 0


if __name__ == "__main__":
    sys.exit(main())
