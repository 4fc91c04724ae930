#!/usr/bin/env python3
"""transformers 5.24: Voxtral Realtime's generate(prefill_chunk_size=k) restarts its streaming audio encoder at every
chunk, so the prompt's later chunks and every generated token read other audio states than generate() without chunks.

Every forward of Voxtral Realtime runs its causal audio encoder on the new text positions' audio through the encoder's
own self-attention cache (``encoder_cache``), which ``_update_model_kwargs_for_generation`` carries from step to step in
the model kwargs (modeling_voxtral_realtime.py:1177-1184). The chunked prefill (GenerationMixin._prefill) carries only
the decoder cache from chunk to chunk (``model_kwargs["cache"] = outputs.cache``, generation/utils.py:4408 in 5.24.0):
each chunk's encoder builds an empty ``DynamicCache`` (modeling_voxtral_realtime.py:559-560) and numbers its slice of the
audio from position 0 (:562-565), none of the earlier chunks' audio in reach, and the decode steps continue from the
last chunk's encoder cache. The slice itself is right: prepare_inputs_for_generation cuts the audio by the decoder
cache's length (:1130-1138). Carrying each chunk's outputs.encoder_cache and padding_cache into the next chunk, as
_update_model_kwargs_for_generation does between decode steps, makes the scores agree (max |Δscore| 1.3e-7 on 5.24.0).

Expected: generate(prefill_chunk_size=2) on a 6-token prompt gives the scores of generate() without chunks (as a
text-only causal LM does). Exit 1 while they part (max |Δscore| above 1e-4), else 0. Needs only torch and transformers
(random weights, no download; the feature extractor with its defaults on seeded noise): the build and audio of
voxtral_realtime_continued_generate_restarts_the_encoder.py, its sibling (a continued call restarts the encoder too).
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

TRANSFORMERS = ">=5.4"  # 5.4.0-5.25.0 measured; 5.2-5.3 drop the audio from the chunks (tests/test_repros.py skips it elsewhere)
LIMIT = 1e-4


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 16}
    config = VoxtralRealtimeConfig(text_config={**small, "vocab_size": 256, "num_key_value_heads": 2, "sliding_window": 64},
                                   audio_config={**small, "sliding_window": 32})
    model = VoxtralRealtimeForConditionalGeneration(config).eval()
    new = 8
    wave = (np.random.default_rng(0).random((6 + new + 1) * 8 * 160, dtype=np.float32) - 0.5)
    features = VoxtralRealtimeFeatureExtractor()(wave, sampling_rate=16000, return_tensors="pt")["input_features"]
    ids = torch.tensor([[1, 5, 6, 7, 8, 9]])
    common = {"input_features": features, "num_delay_tokens": 6, "do_sample": False, "return_dict_in_generate": True,
              "output_scores": True, "max_new_tokens": new}
    plain = model.generate(input_ids=ids, **common)
    chunked = model.generate(input_ids=ids, prefill_chunk_size=2, **common)
    deltas = [float((a - b).abs().max()) for a, b in zip(chunked.scores, plain.scores, strict=True)]
    print(f"transformers {transformers.__version__}: generate(prefill_chunk_size=2) against generate() on a 6-token prompt: "
          f"same tokens {torch.equal(chunked.sequences, plain.sequences)}; max |Δscore| per generated token "
          + ", ".join(f"{d:.3g}" for d in deltas))
    return 1 if max(deltas) > LIMIT else 0


if __name__ == "__main__":
    sys.exit(main())
