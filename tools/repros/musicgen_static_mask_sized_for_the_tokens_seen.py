#!/usr/bin/env python3
"""transformers 5.0-5.1: MusicGen's decoder sizes its causal mask for the tokens seen, so a StaticCache decode attends to
the cache's unwritten slots, and a multi-token forward over it raises.

MusicgenDecoder builds its 4-D mask with _prepare_4d_causal_attention_mask_for_sdpa / _prepare_4d_causal_attention_mask
over past_key_values_length = the tokens seen (modeling_musicgen.py:637-662 in 5.1.0; MusicgenMelodyDecoder alike,
modeling_musicgen_melody.py:608-632), while a StaticCache hands attention all max_cache_len preallocated keys: under
SDPA a one-token decode gets no mask (the is_causal shortcut) and attends to every slot, the zeros after the written
ones included, so the cached logits leave one uncached forward from the first decode step; a forward of several tokens
over the filled cache (a chunked prefill, a prefix extended at once) gets a mask narrower than the keys and raises. 5.2
builds the mask with masking_utils.create_causal_mask, sized by the cache (modeling_musicgen.py:551 in 5.2.0,
modeling_musicgen_melody.py:537): the same script exits 0. The legacy-mask finding of xglm, mpt, mvp, trocr
(legacy_causal_mask_sized_without_the_static_cache.py), where the attention refuses the mask instead.
Prefill 6 seeded random tokens (batch 2) into a StaticCache, decode 8 greedy steps feeding the cache back, and compare
every step's logits with ONE uncached forward over the whole sequence. Exit 1 when some step differs by more than
atol + rtol * max|reference logit| (or the model raises), else 0.
"""
import inspect
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, StaticCache

TRANSFORMERS = "<5.2"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = 'float32', 0, 2, 6, 8, 'static', 'sdpa'
ATOL, RTOL = 1e-05, 3e-05
CONFIG_JSON = '{\n  "audio_encoder": {\n    "_name_or_path": "",\n    "architectures": null,\n    "audio_channels": 1,\n    "chunk_length_s": null,\n    "chunk_size_feed_forward": 0,\n    "codebook_dim": 128,\n    "codebook_size": 1024,\n    "compress": 2,\n    "dilation_growth_rate": 2,\n    "dtype": null,\n    "hidden_size": 64,\n    "id2label": {\n      "0": "LABEL_0",\n      "1": "LABEL_1"\n    },\n    "is_encoder_decoder": false,\n    "kernel_size": 7,\n    "label2id": {\n      "LABEL_0": 0,\n      "LABEL_1": 1\n    },\n    "last_kernel_size": 7,\n    "model_type": "encodec",\n    "norm_type": "weight_norm",\n    "normalize": false,\n    "num_filters": 32,\n    "num_lstm_layers": 2,\n    "num_residual_layers": 1,\n    "output_attentions": false,\n    "output_hidden_states": false,\n    "overlap": null,\n    "pad_mode": "reflect",\n    "problem_type": null,\n    "residual_kernel_size": 3,\n    "return_dict": true,\n    "sampling_rate": 24000,\n    "target_bandwidths": [\n      1.5,\n      3.0,\n      6.0,\n      12.0,\n      24.0\n    ],\n    "trim_right_ratio": 1.0,\n    "upsampling_ratios": [\n      8,\n      5,\n      4,\n      2\n    ],\n    "use_causal_conv": true,\n    "use_conv_shortcut": true\n  },\n  "decoder": {\n    "_name_or_path": "",\n    "activation_dropout": 0.0,\n    "activation_function": "gelu",\n    "add_cross_attention": false,\n    "architectures": null,\n    "attention_dropout": 0.0,\n    "audio_channels": 1,\n    "bos_token_id": 254,\n    "chunk_size_feed_forward": 0,\n    "cross_attention_hidden_size": null,\n    "decoder_start_token_id": 256,\n    "dropout": 0.1,\n    "dtype": null,\n    "eos_token_id": null,\n    "ffn_dim": 128,\n    "hidden_size": 64,\n    "id2label": {\n      "0": "LABEL_0",\n      "1": "LABEL_1"\n    },\n    "initializer_factor": 0.15,\n    "is_decoder": false,\n    "is_encoder_decoder": false,\n    "label2id": {\n      "LABEL_0": 0,\n      "LABEL_1": 1\n    },\n    "layerdrop": 0.0,\n    "max_position_embeddings": 64,\n    "model_type": "musicgen_decoder",\n    "num_attention_heads": 4,\n    "num_codebooks": 1,\n    "num_hidden_layers": 2,\n    "output_attentions": false,\n    "output_hidden_states": false,\n    "pad_token_id": 255,\n    "problem_type": null,\n    "return_dict": true,\n    "scale_embedding": false,\n    "tie_word_embeddings": false,\n    "use_cache": true,\n    "vocab_size": 256\n  },\n  "initializer_factor": 0.15,\n  "is_encoder_decoder": true,\n  "model_type": "musicgen",\n  "text_encoder": {\n    "_name_or_path": "",\n    "architectures": null,\n    "chunk_size_feed_forward": 0,\n    "classifier_dropout": 0.0,\n    "d_ff": 128,\n    "d_kv": 64,\n    "d_model": 64,\n    "dense_act_fn": "relu",\n    "dropout_rate": 0.1,\n    "dtype": null,\n    "eos_token_id": 1,\n    "feed_forward_proj": "relu",\n    "id2label": {\n      "0": "LABEL_0",\n      "1": "LABEL_1"\n    },\n    "initializer_factor": 1.0,\n    "is_decoder": false,\n    "is_encoder_decoder": true,\n    "is_gated_act": false,\n    "label2id": {\n      "LABEL_0": 0,\n      "LABEL_1": 1\n    },\n    "layer_norm_epsilon": 1e-06,\n    "model_type": "t5",\n    "num_decoder_layers": 2,\n    "num_heads": 4,\n    "num_layers": 2,\n    "output_attentions": false,\n    "output_hidden_states": false,\n    "pad_token_id": 0,\n    "problem_type": null,\n    "relative_attention_max_distance": 128,\n    "relative_attention_num_buckets": 32,\n    "return_dict": true,\n    "scale_decoder_outputs": true,\n    "tie_word_embeddings": true,\n    "use_cache": true,\n    "vocab_size": 256\n  },\n  "tie_encoder_decoder": false,\n  "transformers_version": "5.0.0"\n}\n'
SUB_CONFIG, MODEL_CLASS = 'decoder', 'MusicgenForCausalLM'
ZERO_INIT_STD = 0.15


def build():
    """The model as kvconform builds it: seeded float32 weights, then from_pretrained(dtype=...) as users load."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            handle.write(CONFIG_JSON)
        config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(SEED)
    model_class = getattr(transformers, MODEL_CLASS)
    if SUB_CONFIG:  # a composite config whose causal-LM class takes one of its sub-configs
        model = model_class._from_config(getattr(config, SUB_CONFIG), dtype=torch.float32)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # kvconform gives all-zero weights (not biases) seeded noise, so selections do not tie (see kvconform/build/synthetic.py).
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
    model = model.float().eval()
    if DTYPE != "float32":
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            model = model_class.from_pretrained(folder, dtype=getattr(torch, DTYPE)).eval()
    if model.config._attn_implementation != ATTN:  # the cell's attention implementation, as users switch it
        model.set_attn_implementation(ATTN)
    return model


def forward(model, keyword, cache, **inputs):
    """A use_cache forward; a model that returns no cache object gets an explicit DynamicCache."""
    output = model(use_cache=True, **inputs, **({keyword: cache} if cache is not None else {}))
    returned = getattr(output, "cache", None) or getattr(output, "past_key_values", None) or cache
    if returned is None:
        returned = transformers.DynamicCache(config=model.config)
        output = model(use_cache=True, **inputs, **{keyword: returned})
    return returned, output


@torch.inference_mode()
def main():
    model = build()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {type(model).__name__} in {DTYPE}")
    keyword = next(k for k in ("cache", "past_key_values", "cache_params") if k in inspect.signature(model.forward).parameters)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    prompt = torch.randint(3, max(4, min(vocab, 32000)), (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    total = PROMPT + STEPS
    fresh = lambda: StaticCache(config=model.config, max_cache_len=total) if CACHE == "static" else None
    try:
        cache, output = forward(model, keyword, fresh(), input_ids=prompt)
        logits, sequence = [output.logits[:, -1]], [prompt]
        for _ in range(STEPS):
            token = logits[-1].argmax(-1, keepdim=True)
            sequence.append(token)
            cache, output = forward(model, keyword, cache, input_ids=token)
            logits.append(output.logits[:, -1])
        full = torch.cat(sequence, dim=1)
        reference = model(input_ids=full, use_cache=False).logits[:, PROMPT - 1 :].float()
    except Exception as exc:  # the crash is the finding
        print(f"the model raised {type(exc).__name__}: {exc}")
        return 1
    return verdict([float((step.float() - reference[:, k]).abs().max()) for k, step in enumerate(logits)],
                   float(reference.abs().max()))


def verdict(deltas, scale):
    """Print every step's max |Δ| against the limit; 1 when some step is over it."""
    limit = ATOL + RTOL * scale
    for k, delta in enumerate(deltas):
        print(f"step {k} ({'prefill' if k == 0 else 'decode'}): max |cached - uncached| = {delta:.3g}{'  > limit' if delta > limit else ''}")
    worst = max(deltas)
    print(f"worst {worst:.3g} vs limit {limit:.3g} ({DTYPE}: {ATOL:g} + {RTOL:g} * max|logit| {scale:.3g})")
    return 1 if worst > limit else 0


if __name__ == "__main__":
    sys.exit(main())
