#!/usr/bin/env python3
"""T5Gemma's generate(cache_implementation="static") keeps only the last sliding_window encoder positions in the
cross-attention cache of the decoder's sliding layers, in transformers 5.0-5.9.

For an encoder-decoder, generate()'s static cache (_get_cache in 5.0, _prepare_static_cache from 5.1) builds the
cross-attention half as StaticCache(config=<the decoder config>, max_cache_len=<encoder length>) (generation/utils.py:
1896-1902 in 5.0.0, :1773-1779 in 5.3.0, :1756-1762 in 5.4.0), so T5Gemma's sliding_attention layers get a
StaticSlidingWindowLayer there too, sized min(sliding_window, encoder length). The cross-attention stores the encoder's
keys and values in it and reads them back at every decode step (modeling_t5gemma.py:362-376 in 5.3.0), so once the
encoder input is longer than sliding_window (4096 in the published T5Gemma configs, which allow 8192 positions) it sees
only sliding_window of them: 5.0-5.3 raise in SDPA (their cross mask, create_causal_mask with a bidirectional
or_mask_function over the encoder output, modeling_t5gemma.py:834-848 in 5.3.0, has a column per encoder position; the
keys are sliding_window), 5.4-5.9 build it with create_bidirectional_mask (:794-802 in 5.4.0), which SDPA gets as None
without padding (masking_utils.py:1047-1081 in 5.4.0), and decode silently from the truncated encoder output. 5.10
adds T5GemmaForConditionalGeneration._prepare_cache_for_generation, which rebuilds the cross half of full layers, for
StaticCache too (modeling_t5gemma.py:1084-1109 in 5.10.4).
The dynamic cache's twin (from 5.1): t5gemma_generate_cross_attention_cache_has_sliding_layers.py.
Exit 1 while generate() raises or its logits leave a teacher-forced pass over its own tokens; 0 when they agree.
The config is the published one's attention shape (sliding_window 4096, sliding and full layers), shrunk elsewhere.
"""
import sys

import torch
import transformers
from transformers import T5GemmaConfig, T5GemmaForConditionalGeneration, T5GemmaModuleConfig

TRANSFORMERS = "<5.10"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
WINDOW = 4096  # google/t5gemma-* config.json: "sliding_window": 4096


@torch.inference_mode()
def main() -> int:
    module = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, sliding_window=WINDOW, max_position_embeddings=8192,
                  layer_types=["sliding_attention", "full_attention"])
    config = T5GemmaConfig(encoder=T5GemmaModuleConfig(**module), decoder=T5GemmaModuleConfig(**module), vocab_size=256)
    torch.manual_seed(0)
    model = T5GemmaForConditionalGeneration(config).eval()
    for layer in model.modules():  # weights large enough that 4 of 4100 encoder positions move the logits
        if isinstance(layer, torch.nn.Linear):
            torch.nn.init.normal_(layer.weight, std=0.15, generator=torch.Generator().manual_seed(1))
    source = torch.randint(3, 200, (1, WINDOW + 4), generator=torch.Generator().manual_seed(0))
    print(f"transformers {transformers.__version__}: generate(cache_implementation='static') from an encoder input of "
          f"{source.shape[1]} tokens (sliding_window {WINDOW})")
    try:
        out = model.generate(source, max_new_tokens=3, do_sample=False, cache_implementation="static",
                             output_logits=True, return_dict_in_generate=True)
    except RuntimeError as exc:
        print(f"generate() raised RuntimeError: {exc}")
        return 1
    cross = out.past_key_values.cross_attention_cache.layers
    print("cross-attention cache layers:", [f"{type(layer).__name__} {layer.keys.shape[-2]} positions" for layer in cross])
    reference = model(input_ids=source, decoder_input_ids=out.sequences[:, :-1], use_cache=False).logits
    per_step = (torch.stack(out.logits, 1) - reference).abs().amax(dim=(0, 2))
    print(f"generate()'s logits vs a teacher-forced pass, max |Δ| per generated token: {[f'{d:.1e}' for d in per_step.tolist()]}")
    bad = float(per_step.max()) > 2e-5 or any(layer.keys.shape[-2] != source.shape[1] for layer in cross)
    print("bug: the cross-attention reads a truncated encoder output" if bad else "fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
