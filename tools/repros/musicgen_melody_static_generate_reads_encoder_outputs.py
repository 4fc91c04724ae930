#!/usr/bin/env python3
"""transformers 5.0-5.1 and 5.4+: MusicgenMelodyForConditionalGeneration.generate(cache_implementation="static") raises.

Expected (model bug, two of them; 5.2-5.3 run the call):
- 5.4.0-5.25.0: MusicgenMelodyConfig sets is_encoder_decoder = True (configuration_musicgen_melody.py:151 in 5.24.0),
  though the model prepends its text and chroma conditioning to the decoder input and has no encoder output for
  cross-attention; its generate() prepares the cache before it has conditioned anything
  (modeling_musicgen_melody.py:1966-1972), and GenerationMixin._prepare_static_cache, for an is_encoder_decoder config,
  sizes a cross-attention StaticCache by model_kwargs["encoder_outputs"] (generation/utils.py:2193-2197), which holds
  no such key: KeyError: 'encoder_outputs' before the first forward.
- 5.0.0-5.1.0: the decoder builds its 4-D mask for the tokens seen
  (_prepare_4d_causal_attention_mask_for_sdpa(attention_mask, input_shape, inputs_embeds, past_key_values_length),
  modeling_musicgen_melody.py:605-611 in 5.0.0), while a StaticCache hands attention all its preallocated keys: sdpa
  raises RuntimeError "The size of tensor a ... must match the size of tensor b" (sdpa_attention.py:92), as the legacy
  masks of legacy_causal_mask_sized_without_the_static_cache.py do; 5.2 sizes the mask by the cache.
The control: the same call with the default cache runs. The model is shrunk as kvconform shrinks it (as
musicgen_melody_generate_drops_conditioning_at_cached_prefill.py), greedy with the published guidance_scale 3.0.
Exit 1 when the static generate() raises either; 0 when it runs; 2 when it raises anything else.
"""
import os
import sys
import tempfile
from typing import Any

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = "<5.2 || >=5.4"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SEED, STEPS, GUIDANCE = 0, 8, 3.0
ZERO_INIT_STD = 0.15

CONFIG_JSON = '{\n  "audio_encoder": {\n    "_name_or_path": "",\n    "architectures": null,\n    "audio_channels": 1,\n    "chunk_length_s": null,\n    "chunk_size_feed_forward": 0,\n    "codebook_dim": 128,\n    "codebook_size": 1024,\n    "compress": 2,\n    "dilation_growth_rate": 2,\n    "dtype": null,\n    "hidden_size": 64,\n    "id2label": {\n      "0": "LABEL_0",\n      "1": "LABEL_1"\n    },\n    "is_encoder_decoder": false,\n    "kernel_size": 7,\n    "label2id": {\n      "LABEL_0": 0,\n      "LABEL_1": 1\n    },\n    "last_kernel_size": 7,\n    "model_type": "encodec",\n    "norm_type": "weight_norm",\n    "normalize": false,\n    "num_filters": 32,\n    "num_lstm_layers": 2,\n    "num_residual_layers": 1,\n    "output_attentions": false,\n    "output_hidden_states": false,\n    "overlap": null,\n    "pad_mode": "reflect",\n    "problem_type": null,\n    "residual_kernel_size": 3,\n    "return_dict": true,\n    "sampling_rate": 24000,\n    "target_bandwidths": [\n      1.5,\n      3.0,\n      6.0,\n      12.0,\n      24.0\n    ],\n    "trim_right_ratio": 1.0,\n    "upsampling_ratios": [\n      8,\n      5,\n      4,\n      2\n    ],\n    "use_causal_conv": true,\n    "use_conv_shortcut": true\n  },\n  "chroma_length": 235,\n  "decoder": {\n    "_name_or_path": "",\n    "activation_dropout": 0.0,\n    "activation_function": "gelu",\n    "add_cross_attention": false,\n    "architectures": null,\n    "attention_dropout": 0.0,\n    "audio_channels": 1,\n    "bos_token_id": 254,\n    "chunk_size_feed_forward": 0,\n    "decoder_start_token_id": 256,\n    "dropout": 0.1,\n    "dtype": null,\n    "eos_token_id": null,\n    "ffn_dim": 128,\n    "hidden_size": 64,\n    "id2label": {\n      "0": "LABEL_0",\n      "1": "LABEL_1"\n    },\n    "initializer_factor": 0.15,\n    "is_decoder": false,\n    "is_encoder_decoder": false,\n    "label2id": {\n      "LABEL_0": 0,\n      "LABEL_1": 1\n    },\n    "layerdrop": 0.0,\n    "max_position_embeddings": 64,\n    "model_type": "musicgen_melody_decoder",\n    "num_attention_heads": 4,\n    "num_codebooks": 1,\n    "num_hidden_layers": 2,\n    "output_attentions": false,\n    "output_hidden_states": false,\n    "pad_token_id": 255,\n    "problem_type": null,\n    "return_dict": true,\n    "scale_embedding": false,\n    "tie_word_embeddings": false,\n    "use_cache": true,\n    "vocab_size": 256\n  },\n  "model_type": "musicgen_melody",\n  "num_chroma": 12,\n  "text_encoder": {\n    "_name_or_path": "",\n    "architectures": null,\n    "chunk_size_feed_forward": 0,\n    "classifier_dropout": 0.0,\n    "d_ff": 128,\n    "d_kv": 64,\n    "d_model": 64,\n    "dense_act_fn": "relu",\n    "dropout_rate": 0.1,\n    "dtype": null,\n    "eos_token_id": 1,\n    "feed_forward_proj": "relu",\n    "id2label": {\n      "0": "LABEL_0",\n      "1": "LABEL_1"\n    },\n    "initializer_factor": 1.0,\n    "is_decoder": false,\n    "is_encoder_decoder": true,\n    "is_gated_act": false,\n    "label2id": {\n      "LABEL_0": 0,\n      "LABEL_1": 1\n    },\n    "layer_norm_epsilon": 1e-06,\n    "model_type": "t5",\n    "num_decoder_layers": 2,\n    "num_heads": 4,\n    "num_layers": 2,\n    "output_attentions": false,\n    "output_hidden_states": false,\n    "pad_token_id": 0,\n    "problem_type": null,\n    "relative_attention_max_distance": 128,\n    "relative_attention_num_buckets": 32,\n    "return_dict": true,\n    "scale_decoder_outputs": true,\n    "tie_word_embeddings": true,\n    "use_cache": true,\n    "vocab_size": 256\n  },\n  "tie_encoder_decoder": false,\n  "transformers_version": "5.3.0"\n}\n'


def build() -> Any:
    """The shrunk model: seeded float32 weights, all-zero weights given seeded noise (as kvconform does), eval mode."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            handle.write(CONFIG_JSON)
        config = AutoConfig.from_pretrained(folder)
    config.audio_encoder.codebook_dim, config.audio_encoder.num_filters = 64, 4
    config.chroma_length = 4
    for source in (config, config.decoder):
        source.pad_token_id = source.decoder_start_token_id = 256
    config.decoder.bos_token_id = 256
    torch.manual_seed(SEED)
    model = transformers.MusicgenMelodyForConditionalGeneration(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
    return model.float().eval()


@torch.inference_mode()
def main() -> int:
    model = build()
    text = torch.randint(3, 250, (2, 5), generator=torch.Generator().manual_seed(SEED + 2))
    settings = {"do_sample": False, "max_new_tokens": STEPS, "guidance_scale": GUIDANCE}
    plain = model.generate(input_ids=text, **settings)  # the control: the default (dynamic) cache runs
    print(f"generate(): ran, codes {tuple(plain.shape)}")
    try:
        static = model.generate(input_ids=text, cache_implementation="static", **settings)
    except Exception as exc:  # which error it is decides the exit status
        print(f"generate(cache_implementation='static'): raised {type(exc).__name__}: {exc}")
        known = {KeyError: "encoder_outputs", RuntimeError: "The size of tensor a"}.get(type(exc))
        return 1 if known is not None and known in str(exc) else 2
    print(f"generate(cache_implementation='static'): ran, codes {tuple(static.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
