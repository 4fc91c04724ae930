#!/usr/bin/env python3
"""transformers 5.24: Kyutai speech-to-text caches a sliding window of ``config.sliding_window`` positions, but its mask
is full causal, so every position past the window sees other keys with the cache than without it.

``KyutaiSpeechToTextConfig.sliding_window`` (375 in the default and in kyutai/stt-2.6b-en-trfs, the streaming context of
the original Moshi transformer) makes ``DynamicCache(config=...)`` and the static cache build sliding-window layers
(``DynamicSlidingWindowLayer``: they keep the last ``sliding_window - 1`` positions). The model builds its mask with
``create_causal_mask`` (modeling_kyutai_speech_to_text.py:593), never a sliding-window one: the decoder layer stores
``self.sliding_window`` (:367) and nothing reads it. A forward without a cache (``use_cache=False``, and
``generate(use_cache=False)``) attends to every earlier position; a decode step through the cache attends to the window
only. From the first position at ``sliding_window`` on, cached and uncached logits part (on the published config: from
the 376th frame, 30 s of audio at 12.5 frames a second).

Shown on the forward (a 6-position prefill, then one position at a time, against one uncached pass over 12 positions)
and on the path users run (``generate(**feature_extractor(audio))`` with and without the cache: the scores of every
step). Exit 1 while the bug is there (the logits or scores past the window part), else 0. Measured on every 5.x release tried
(5.0.0, 5.13.1-5.20.2, 5.24.0, 5.25.0: the forward parts on each; generate() raises RuntimeError before 5.15).
Needs only torch and transformers (random weights, no download).
"""
import inspect
import sys

import numpy as np
import torch
import transformers
from transformers import (
    DynamicCache,
    KyutaiSpeechToTextConfig,
    KyutaiSpeechToTextFeatureExtractor,
    KyutaiSpeechToTextForConditionalGeneration,
)

WINDOW = 4
LIMIT = 1e-4


def build() -> KyutaiSpeechToTextForConditionalGeneration:
    torch.manual_seed(0)
    codec = {"model_type": "mimi", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "intermediate_size": 128, "upsample_groups": 64, "max_position_embeddings": 64}
    config = KyutaiSpeechToTextConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, ffn_dim=128, max_position_embeddings=64, sliding_window=WINDOW,
                                      pad_token_id=3, bos_token_id=253, audio_pad_token_id=256 + 32 * 2049,
                                      codec_config=codec)
    return KyutaiSpeechToTextForConditionalGeneration(config).eval()


def forward_delta(model: KyutaiSpeechToTextForConditionalGeneration) -> list[float]:
    """Per position 5..11: max |Δlogit| of the cached decode against one uncached pass."""
    generator = torch.Generator().manual_seed(0)
    text = torch.randint(4, 250, (1, 12, 1), generator=generator)
    codes = torch.randint(0, 2048, (1, 12, 32), generator=generator)
    ids = torch.cat([text, codes], dim=-1)
    reference = model(input_ids=ids, use_cache=False).logits
    cache = DynamicCache(config=model.config)
    # the cache keyword: `cache` from 5.24, `past_key_values` before
    keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    logits = [model(input_ids=ids[:, :6], use_cache=True, **{keyword: cache}).logits[:, -1]]
    logits += [model(input_ids=ids[:, p:p + 1], use_cache=True, **{keyword: cache}).logits[:, -1] for p in range(6, 12)]
    return [float((got - reference[:, 5 + k]).abs().max()) for k, got in enumerate(logits)]


def generate_delta(model: KyutaiSpeechToTextForConditionalGeneration) -> float:
    """Max |Δscore| of generate() with and without the cache on 0.8 s of noise (10 frames, 10 new tokens)."""
    audio = (np.random.default_rng(0).random(19200, dtype=np.float32) - 0.5)
    inputs = KyutaiSpeechToTextFeatureExtractor()(audio, sampling_rate=24000, return_tensors="pt")
    runs = [model.generate(**inputs, use_cache=use_cache, do_sample=False, output_scores=True, return_dict_in_generate=True)
            for use_cache in (True, False)]
    return max(float((a - b).abs().max()) for a, b in zip(runs[0].scores, runs[1].scores, strict=True))


def main() -> int:
    model = build()
    print(f"transformers {transformers.__version__}; sliding_window {WINDOW}; caches "
          f"{sorted({type(layer).__name__ for layer in DynamicCache(config=model.config).layers})}")
    with torch.no_grad():
        deltas = forward_delta(model)
        print("cached vs uncached |Δlogit| at positions 5-11: " + ", ".join(f"{d:.2e}" for d in deltas))
        try:
            scores = generate_delta(model)
            print(f"generate() with vs without the cache: max |Δscore| {scores:.2e}")
        except RuntimeError as exc:  # before 5.20 generate() on this audio raises in prepare_inputs_for_generation
            scores = 0.0
            print(f"generate() raised RuntimeError: {exc}")
    broken = max(deltas) > LIMIT or scores > LIMIT
    print("BUG: the cache keeps a sliding window the full causal mask does not" if broken else "fixed: cached and uncached agree")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
