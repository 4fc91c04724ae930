#!/usr/bin/env python3
"""T5Gemma's generate() keeps only the last sliding_window - 1 encoder positions in the cross-attention cache of the
decoder's sliding layers, in transformers 5.1-5.9.

generate() builds an encoder-decoder's dynamic cache as EncoderDecoderCache(DynamicCache(config=...), DynamicCache(
config=...)) from the decoder config (generation/utils.py:1895-1905 in 5.3.0), and from 5.1 a DynamicCache built with
T5Gemma's decoder config gives its cross-attention half DynamicSlidingWindowLayers wherever the decoder's layer_types say
sliding_attention (5.0.0 builds that half of full layers). The cross-attention reads the encoder output from that
layer at every decode step (modeling_t5gemma.py:362-372 in 5.3.0), so once the encoder input is at least sliding_window
tokens long (4096 in the published T5Gemma configs, which allow 8192 positions) it sees only the last
sliding_window - 1 of them: 5.1-5.3 raise in SDPA (the cross mask, `create_causal_mask` over the encoder output, is
as long as the encoder; the keys are sliding_window - 1), 5.4-5.9 decode silently from the truncated encoder output.
5.10 adds T5GemmaForConditionalGeneration._prepare_cache_for_generation, which builds the cross half of full layers.
Exit 1 while generate() raises or its logits leave a teacher-forced pass over its own tokens; 0 when they agree.
The config is the published one's attention shape (sliding_window 4096, sliding and full layers), shrunk elsewhere.
"""
import sys

import torch
import transformers
from transformers import T5GemmaConfig, T5GemmaForConditionalGeneration, T5GemmaModuleConfig

TRANSFORMERS = ">=5.1,<5.10"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
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
    print(f"transformers {transformers.__version__}: generate() from an encoder input of {source.shape[1]} tokens "
          f"(sliding_window {WINDOW})")
    try:
        out = model.generate(source, max_new_tokens=3, do_sample=False, output_logits=True, return_dict_in_generate=True)
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
