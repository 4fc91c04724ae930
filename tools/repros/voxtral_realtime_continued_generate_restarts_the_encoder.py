#!/usr/bin/env python3
"""transformers 5.24: Voxtral Realtime's generate() continued from the cache it returned restarts its streaming audio
encoder at position 0 with an empty cache, so the continued tokens are read against other audio than one long call's.

Every forward of Voxtral Realtime runs its causal audio encoder on the new text positions' audio through the encoder's
own self-attention cache (``encoder_cache``), which ``_update_model_kwargs_for_generation`` carries from step to step in
the model kwargs (modeling_voxtral_realtime.py:1177-1184). generate() returns the decoder cache only (``past_key_values``);
a call continued from it (``generate(input_ids=out.sequences, past_key_values=out.past_key_values, input_features=...)``,
the decoder cache honoured) slices the continuation's audio by the decoder cache's length
(``prepare_inputs_for_generation``, :1098-1105) but hands the encoder no cache: the encoder builds an empty
``DynamicCache`` (:559-560) and numbers the slice's positions from 0 (:562-565), with none of the earlier audio in
reach of its attention. One uncached pass, and one long generate() call, run the encoder over the whole audio.

Expected: the continued call's scores equal the long call's for the same positions (as for a text-only causal LM).
Exit 1 while they part (max |Δscore| above 1e-4 on the continued tokens), else 0. Needs only torch and transformers
(random weights, no download; the feature extractor with its defaults on seeded noise).
"""
import sys

import numpy as np
import torch
import transformers
from transformers import (
    VoxtralRealtimeConfig,
    VoxtralRealtimeFeatureExtractor,
    VoxtralRealtimeForConditionalGeneration,
)

TRANSFORMERS = ">=5.2"  # every release with the model (5.2.0-5.25.0 measured; tests/test_repros.py skips it elsewhere)
LIMIT = 1e-4


def build() -> VoxtralRealtimeForConditionalGeneration:
    torch.manual_seed(0)
    small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 16}
    config = VoxtralRealtimeConfig(text_config={**small, "vocab_size": 256, "num_key_value_heads": 2, "sliding_window": 64},
                                   audio_config={**small, "sliding_window": 32})
    return VoxtralRealtimeForConditionalGeneration(config).eval()


@torch.inference_mode()
def main() -> int:
    model = build()
    extractor = VoxtralRealtimeFeatureExtractor()
    prompt, first, then = 6, 4, 4
    positions = prompt + first + then + 1
    wave = (np.random.default_rng(0).random(positions * 8 * 160, dtype=np.float32) - 0.5)
    features = extractor(wave, sampling_rate=16000, return_tensors="pt")["input_features"]
    ids = torch.tensor([[1, 5, 6, 7, 8, 9]])
    common = {"input_features": features, "num_delay_tokens": 6, "do_sample": False, "return_dict_in_generate": True,
              "output_scores": True}
    whole = model.generate(input_ids=ids, max_new_tokens=first + then, **common)
    part = model.generate(input_ids=ids, max_new_tokens=first, **common)
    cache = part.past_key_values
    rest = model.generate(input_ids=part.sequences, past_key_values=cache, max_new_tokens=then, **common)
    same_tokens = torch.equal(rest.sequences, whole.sequences)
    deltas = [float((a - b).abs().max()) for a, b in zip(rest.scores, whole.scores[first:], strict=True)]
    print(f"transformers {transformers.__version__}: one call of {first + then} tokens vs {first} + {then} continued from "
          f"its returned cache: same tokens {same_tokens}; max |Δscore| per continued token "
          + ", ".join(f"{d:.3g}" for d in deltas))
    if max(deltas) > LIMIT:
        print("BUG: the continued call runs the audio encoder from position 0 with an empty encoder cache")
        return 1
    print("OK: the continued call reads the audio as the long call does")
    return 0


if __name__ == "__main__":
    sys.exit(main())
