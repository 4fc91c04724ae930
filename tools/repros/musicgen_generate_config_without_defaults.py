#!/usr/bin/env python3
"""MusicgenForCausalLM.generate() drops the generation-config defaults: greedy generate() raises, dynamic or static cache.

Expected (model bug, transformers 5.24): MusicgenForCausalLM.generate() deep-copies the given GenerationConfig, or
model.generation_config (modeling_musicgen.py:966), where GenerationMixin.generate() and MusicgenMelodyForCausalLM.generate()
(modeling_musicgen_melody.py:974) call _prepare_generation_config, which fills unset fields with the model's and the
global defaults (generation/utils.py:2113-2115). GenerationConfig() leaves num_return_sequences and num_beams None,
so greedy generate() raises
- with the dynamic cache, in _expand_inputs_for_generation(expand_size=None) (modeling_musicgen.py:1061-1064,
  generation/utils.py:1227): TypeError: repeat_interleave() received an invalid combination of arguments - got
  (NoneType, dim=int);
- with cache_implementation="static", in _prepare_cache_for_generation (generation/utils.py:2302,
  max(num_beams, num_return_sequences)): TypeError: '>' not supported between instances of 'NoneType' and 'NoneType'.
A GenerationConfig passed by the caller loses the model's decoder_start_token_id the same way, and the delay pattern
then raises first (modeling_musicgen.py:1024-1027). The decoder config carries decoder_start_token_id as published
checkpoints do (their generation config sets 2048 = vocab_size; here 256 = the shrunk vocab_size).
Control: the same calls with num_beams=1 and num_return_sequences=1 given explicitly run (their tokens show another
bug, musicgen_generate_prefill_sees_last_token.py). Exit 1 when the plain calls raise while the control runs; 0 when
they run; 2 when the control fails too (then this script shows nothing).
"""
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = ">=5.15"  # 5.0-5.14 raise first (musicgen_causal_generate_reads_shape_of_an_int.py); tests/test_repros.py skips it there
SEED, BATCH, PROMPT, STEPS = 0, 2, 6, 8
ZERO_INIT_STD = 0.15

CONFIG_JSON = '{\n  "audio_encoder": {\n    "audio_channels": 1,\n    "chunk_length_s": null,\n    "codebook_dim": 128,\n    "codebook_size": 1024,\n    "compress": 2,\n    "dilation_growth_rate": 2,\n    "hidden_size": 64,\n    "kernel_size": 7,\n    "last_kernel_size": 7,\n    "model_type": "encodec",\n    "norm_type": "weight_norm",\n    "normalize": false,\n    "num_filters": 32,\n    "num_lstm_layers": 2,\n    "num_residual_layers": 1,\n    "overlap": null,\n    "pad_mode": "reflect",\n    "residual_kernel_size": 3,\n    "sampling_rate": 24000,\n    "target_bandwidths": [\n      1.5,\n      3.0,\n      6.0,\n      12.0,\n      24.0\n    ],\n    "trim_right_ratio": 1.0,\n    "upsampling_ratios": [\n      8,\n      5,\n      4,\n      2\n    ],\n    "use_causal_conv": true,\n    "use_conv_shortcut": true\n  },\n  "decoder": {\n    "activation_dropout": 0.0,\n    "activation_function": "gelu",\n    "add_cross_attention": false,\n    "attention_dropout": 0.0,\n    "audio_channels": 1,\n    "bos_token_id": 254,\n    "decoder_start_token_id": 256,\n    "cross_attention_hidden_size": null,\n    "dropout": 0.1,\n    "eos_token_id": null,\n    "ffn_dim": 128,\n    "hidden_size": 64,\n    "initializer_factor": 0.15,\n    "is_decoder": false,\n    "layerdrop": 0.0,\n    "max_position_embeddings": 64,\n    "model_type": "musicgen_decoder",\n    "num_attention_heads": 4,\n    "num_codebooks": 1,\n    "num_hidden_layers": 2,\n    "pad_token_id": 255,\n    "scale_embedding": false,\n    "tie_word_embeddings": false,\n    "use_cache": true,\n    "vocab_size": 256\n  },\n  "initializer_factor": 0.02,\n  "is_encoder_decoder": true,\n  "model_type": "musicgen",\n  "text_encoder": {\n    "classifier_dropout": 0.0,\n    "d_ff": 128,\n    "d_kv": 64,\n    "d_model": 64,\n    "dense_act_fn": "relu",\n    "dropout_rate": 0.1,\n    "eos_token_id": 1,\n    "feed_forward_proj": "relu",\n    "initializer_factor": 1.0,\n    "is_decoder": false,\n    "is_gated_act": false,\n    "layer_norm_epsilon": 1e-06,\n    "model_type": "t5",\n    "num_decoder_layers": 2,\n    "num_heads": 4,\n    "num_layers": 2,\n    "pad_token_id": 0,\n    "relative_attention_max_distance": 128,\n    "relative_attention_num_buckets": 32,\n    "scale_decoder_outputs": true,\n    "tie_word_embeddings": true,\n    "use_cache": true,\n    "vocab_size": 256\n  },\n  "transformers_version": "5.24.0"\n}\n'
SUB_CONFIG, MODEL_CLASS = 'decoder', 'MusicgenForCausalLM'

def build():
    """The shrunk decoder as kvconform builds it: seeded float32 weights, eval mode."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            handle.write(CONFIG_JSON)
        config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(SEED)
    model = getattr(transformers, MODEL_CLASS)._from_config(getattr(config, SUB_CONFIG), dtype=torch.float32)
    # kvconform gives all-zero weights (not biases) seeded noise, so selections do not tie (see kvconform/synthetic.py).
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
    return model.float().eval()


def generate(model, prompt, cache, use_cache, **fields):
    """Greedy generate() with keyword arguments, as users call it (generate() starts from model.generation_config)."""
    implementation = {"cache_implementation": cache} if use_cache and cache != "dynamic" else {}
    return model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS, min_new_tokens=STEPS,
                          do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=use_cache, **implementation, **fields)


@torch.inference_mode()
def main():
    model = build()
    print(f"model.generation_config: decoder_start_token_id {model.generation_config.decoder_start_token_id}, "
          f"num_beams {model.generation_config.num_beams}, num_return_sequences {model.generation_config.num_return_sequences}")
    prompt = torch.randint(3, model.config.vocab_size, (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    raised = 0
    for cache in ("dynamic", "static"):
        try:
            generate(model, prompt, cache, use_cache=True)
            print(f"{cache}: generate() ran")
        except TypeError as exc:
            print(f"{cache}: generate() raised TypeError: {str(exc).splitlines()[0]}")
            raised += 1
        defaults = {"num_beams": 1, "num_return_sequences": 1}
        try:
            generate(model, prompt, cache, use_cache=True, **defaults)
        except Exception as exc:  # the control must run, or this script shows nothing
            print(f"{cache}: control with {defaults} raised {type(exc).__name__}: {exc}")
            return 2
        print(f"{cache}: control with {defaults} runs")
    return 1 if raised else 0


if __name__ == "__main__":
    sys.exit(main())
