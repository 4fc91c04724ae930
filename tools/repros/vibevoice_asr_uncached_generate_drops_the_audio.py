#!/usr/bin/env python3
"""``generate(use_cache=False)`` on VibeVoice-ASR decodes every step after the first without the audio in transformers 5.3-5.17.

``VibeVoiceAsrForConditionalGeneration.prepare_inputs_for_generation`` hands ``input_values`` (and ``padding_mask``) to the
forward only ``if is_first_iteration`` (modeling_vibevoice_asr.py:431-437 in 5.3.0, :523 in 5.17.0). With the cache the
audio features are in the cached prefix; without it each step re-runs the whole sequence, whose audio placeholder
tokens then get no features (their text embeddings stand in), so the uncached greedy tokens part from the cached ones.
5.18 also passes them ``if is_first_iteration or not use_cache`` (:526 in 5.18.0). Exit 1 while a step of the uncached
generate() runs without the audio, 0 when every step gets it.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.3,<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
AUDIO, AUDIO_BOS, AUDIO_EOS, VOCAB, HOP = 250, 248, 249, 256, 3200  # one audio token per 3200 samples (24 kHz)


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    # vae_std 0: the deterministic encoding (5.3-5.22 add N(0, vae_std) noise in every forward; 5.23 adds sample=False)
    encoder = {"num_filters": 4, "depths": [1] * 7, "vae_std": 0.0}
    config = transformers.VibeVoiceAsrConfig(
        acoustic_tokenizer_encoder_config=dict(encoder), semantic_tokenizer_encoder_config=dict(encoder),
        text_config={"model_type": "qwen2", "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2},
        audio_token_id=AUDIO, audio_bos_token_id=AUDIO_BOS, audio_eos_token_id=AUDIO_EOS)
    torch.manual_seed(0)
    model = transformers.VibeVoiceAsrForConditionalGeneration(config).eval()
    audio_tokens = 3  # input_values [B, 1, samples], as its feature extractor makes them
    ids = torch.tensor([[5, 6, AUDIO_BOS, *[AUDIO] * audio_tokens, AUDIO_EOS, 7, 8]] * 2)
    audio = torch.randn(2, 1, audio_tokens * HOP, generator=torch.Generator().manual_seed(1)) * 0.1
    fed = []
    model.register_forward_pre_hook(lambda module, args, kwargs: fed.append(kwargs.get("input_values") is not None),
                                    with_kwargs=True)
    runs = {}
    for use_cache in (True, False):
        fed.clear()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), input_values=audio, max_new_tokens=4,
                                 do_sample=False, use_cache=use_cache, pad_token_id=0)
        runs[use_cache] = (out[:, ids.shape[1]:].tolist(), list(fed))
        print(f"use_cache={use_cache}: tokens {runs[use_cache][0]}, audio fed at the forwards: {runs[use_cache][1]}")
    dropped = not all(runs[False][1])
    if dropped:
        print("BUG: generate(use_cache=False) ran decode steps without the audio features")
    print("tokens", "part" if runs[True][0] != runs[False][0] else "agree")
    return 1 if dropped else 0


if __name__ == "__main__":
    sys.exit(main())
