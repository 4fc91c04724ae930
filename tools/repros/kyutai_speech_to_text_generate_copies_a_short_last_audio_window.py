#!/usr/bin/env python3
"""transformers 5.0-5.14: Kyutai speech-to-text's generate() raises once it reaches an audio window shorter than the
others (the audio's last, when its frame count is no multiple of the window).

Expected (model bug, transformers < 5.15; 5.15 fixes it): generate() on a waveform transcribes it window by window:
prepare_inputs_for_generation encodes the next audio_window_size frames with the codec once the text passes the
current window and copies them into its audio_tokens buffer (`audio_tokens.copy_(new_audio_tokens)`,
modeling_kyutai_speech_to_text.py:905 in 5.14.1). The last window of an audio whose frames are no multiple of the
window holds fewer frames than the buffer, and the copy raises RuntimeError ("The size of tensor a (W) must match the
size of tensor b (w)"). 5.15 copies the overlap only (`n = min(...)`, "last window can be shorter than
audio_window_size, copy only the overlap").
Exit 1 when generate() on 0.8 s of audio (10 frames, in windows of the shrunk codec's) raises that error; 0 when it runs.
Needs only torch and transformers (random weights, no download).
"""
import sys

import numpy as np
import torch
import transformers
from transformers import (
    KyutaiSpeechToTextConfig,
    KyutaiSpeechToTextFeatureExtractor,
    KyutaiSpeechToTextForConditionalGeneration,
)

TRANSFORMERS = "<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    torch.manual_seed(0)
    codec = {"model_type": "mimi", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "upsample_groups": 64,
             "max_position_embeddings": 64}
    config = KyutaiSpeechToTextConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, ffn_dim=128, max_position_embeddings=64, pad_token_id=3,
                                      bos_token_id=253, audio_pad_token_id=256 + 32 * 2049, codec_config=codec)
    model = KyutaiSpeechToTextForConditionalGeneration(config).eval()
    audio = np.random.default_rng(0).random(19200, dtype=np.float32) - 0.5
    inputs = KyutaiSpeechToTextFeatureExtractor()(audio, sampling_rate=24000, return_tensors="pt")
    try:
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False)
    except RuntimeError as exc:
        if "must match the size of tensor b" not in str(exc):
            raise
        print(f"transformers {transformers.__version__}: generate() raised RuntimeError: {exc}")
        return 1
    print(f"transformers {transformers.__version__}: generate() ran, {out.shape[1]} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
