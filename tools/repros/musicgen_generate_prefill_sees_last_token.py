#!/usr/bin/env python3
"""MusicgenForCausalLM's cached generate() prefills only the last prompt token: cached and uncached tokens part at once.

Expected (model bug, transformers 5.24): MusicgenForCausalLM.prepare_inputs_for_generation keeps only the last
token whenever a cache is passed (`if cache is not None: input_ids = input_ids[:, -1:]`, modeling_musicgen.py:794-795),
but generate() builds the cache before the first forward (_prepare_cache_for_generation, modeling_musicgen.py:1014),
so the prefill gets one token and an empty cache: the prompt never enters the cache and the first generated token
already differs from uncached generate(). MusicgenMelodyForCausalLM slices by next_sequence_length instead
(modeling_musicgen_melody.py:802), and its cached and uncached generate() agree.
Found behind the crash of musicgen_generate_config_without_defaults.py: num_beams=1 and num_return_sequences=1 are
given here so that generate() runs. Control: a plain greedy loop that prefills the whole (delay-patterned) prompt into
a DynamicCache gives uncached generate()'s tokens.
Exit 1 when the cached generate() prefill gets fewer tokens than the prompt and its tokens differ from uncached
generate() while the control agrees; 0 when they agree; 2 when the control disagrees (then this script shows nothing).
"""
import inspect
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

# 5.0-5.14 crash before the prefill (musicgen_causal_generate_reads_shape_of_an_int.py); exits 1 on 5.15.1-5.25.0
TRANSFORMERS = ">=5.15"

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


def generate(model, prompt, use_cache):
    """Greedy generate(); returns the generated tokens and the input_ids length of every forward it made."""
    lengths = []
    forward = model.forward

    def recording(*args, **kwargs):
        lengths.append(kwargs["input_ids"].shape[-1])
        return forward(*args, **kwargs)

    model.forward = recording
    try:
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS, min_new_tokens=STEPS,
                             do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=use_cache, num_beams=1,
                             num_return_sequences=1)
    finally:
        del model.forward
    return out.reshape(BATCH, -1)[:, PROMPT:], lengths


def greedy_loop(model, prompt):
    """The control: prefill the prompt as generate() feeds it (start token first) into a DynamicCache, then decode."""
    step, _ = model.build_delay_pattern_mask(prompt, pad_token_id=model.generation_config.decoder_start_token_id,
                                             max_length=PROMPT + STEPS)
    cache, tokens = transformers.DynamicCache(config=model.config), []
    # the keyword is `cache` from transformers 5.24, `past_key_values` before (which ignore an unknown `cache`)
    keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    for _ in range(STEPS):
        out = model(input_ids=step, use_cache=True, **{keyword: cache})
        step = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(step)
    return torch.cat(tokens, dim=1)


@torch.inference_mode()
def main():
    model = build()
    prompt = torch.randint(3, model.config.vocab_size, (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    cached, lengths = generate(model, prompt, use_cache=True)
    uncached, _ = generate(model, prompt, use_cache=False)
    control = greedy_loop(model, prompt)
    print(f"cached generate(): input_ids lengths of its forwards {lengths} (prompt {PROMPT})")
    print(f"cached   {cached.tolist()}")
    print(f"uncached {uncached.tolist()}")
    print(f"control  {control.tolist()} (a greedy loop that prefills the whole prompt)")
    if not torch.equal(control, uncached):
        print("the control disagrees with uncached generate(): this script shows nothing")
        return 2
    if torch.equal(cached, uncached):
        print("cached and uncached generate() agree")
        return 0
    part = int((cached != uncached).any(dim=0).nonzero()[0])
    print(f"cached and uncached generate() part at generated token {part}")
    return 1 if lengths[0] < PROMPT else 0


if __name__ == "__main__":
    sys.exit(main())
