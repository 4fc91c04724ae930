#!/usr/bin/env python3
"""Qwen2.5-Omni's generate(use_cache=False) builds the talker's inputs from whole-sequence thinker states: other codes.

Expected (model bug, transformers 5.24.0; other releases not run): Qwen2_5OmniForConditionalGeneration.generate()
passes use_cache to the thinker's generate() too, and reads its per-step hidden states as one position each: the reply
part is `torch.cat(thinker_hidden_states[1:], dim=1) + torch.cat(thinker_token_embeds[1:], dim=1)` and the talker's
last prompt position `thinker_reply_part[:, :1, :]` (modeling_qwen2_5_omni.py:3943-3985 in 5.24.0). A cached thinker
step returns the states of its one new position; an uncached step recomputes and returns the whole sequence, so with
use_cache=False the talker's prompt ends with position 0's state instead of the first reply token's, and its reply part
holds every step's whole sequence (25 embeddings for 4 generated tokens after a 6-token prompt instead of 4).
The text the thinker generates is the same both ways, and the talker's own generate() given the same inputs returns the
same codes with and without the cache (the control): the difference is in what generate() hands the talker.
Exit 1 when the talker's inputs (and codes) differ while the control agrees; 0 when they agree; 2 when the control
disagrees (then this script shows nothing).
"""
import sys

import torch
from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

TRANSFORMERS = ">=5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SEED, BATCH, TEXT, THINKER_TOKENS, CODES = 0, 2, 6, 4, 8
ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]}
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "rope_parameters": ROPE}
CONFIG = {
    "thinker_config": {"text_config": {**SMALL, "vocab_size": 256}, "vision_start_token_id": 245, "audio_token_index": 255,
                       "image_token_index": 254, "video_token_index": 253, "audio_start_token_id": 252,
                       "audio_end_token_id": 251, "user_token_id": 250,
                       "audio_config": {"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4,
                                        "encoder_ffn_dim": 128, "output_dim": 64},
                       "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
                                         "out_hidden_size": 64, "fullatt_block_indexes": [1]}},
    "talker_config": {**SMALL, "head_dim": 16, "vocab_size": 256, "embedding_size": 64, "tts_text_start_token_id": 252,
                      "tts_text_end_token_id": 251, "tts_text_pad_token_id": 250, "tts_codec_start_token_id": 249,
                      "tts_codec_end_token_id": 248, "tts_codec_pad_token_id": 247, "tts_codec_mask_token_id": 246,
                      "vision_start_token_id": 245, "audio_token_index": 255, "image_token_index": 254,
                      "video_token_index": 253, "audio_start_token_id": 243, "audio_end_token_id": 242},
    "token2wav_config": {"dit_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                        "head_dim": 16, "emb_dim": 64, "ff_mult": 2},
                         "bigvgan_config": {"upsample_initial_channel": 64}},
}


def talker_inputs(model, text, use_cache):
    """What generate() hands talker.generate (a stand-in that keeps its arguments and stops there), and the thinker's text."""
    kept = {}

    class Stop(Exception):
        pass

    def keep(**call):
        kept.update(call)
        raise Stop

    model.talker.generate = keep
    try:
        model.generate(input_ids=text, attention_mask=torch.ones_like(text), speaker="Chelsie", use_cache=use_cache,
                       thinker_max_new_tokens=THINKER_TOKENS, thinker_do_sample=False)
    except Stop:
        pass
    finally:
        del model.talker.generate
    return kept


def talker_codes(model, call, use_cache):
    settings = {k: v for k, v in call.items() if k not in ("use_cache", "do_sample", "top_k", "top_p", "temperature", "max_new_tokens")}
    settings = {k: v.clone() if torch.is_tensor(v) else v for k, v in settings.items()}
    return model.talker.generate(**settings, max_new_tokens=CODES, do_sample=False, use_cache=use_cache)[:, -CODES:]


@torch.inference_mode()
def main():
    torch.manual_seed(SEED)
    model = Qwen2_5OmniForConditionalGeneration(Qwen2_5OmniConfig(**CONFIG)).float().eval()
    talker = model.config.talker_config
    model.speaker_map["Chelsie"] = {"bos_token": talker.tts_text_start_token_id, "cond": torch.zeros(1, 192),
                                    "ref_mel": torch.zeros(1, 30, 80)}
    text = torch.randint(3, 240, (BATCH, TEXT), generator=torch.Generator().manual_seed(SEED))
    cached, uncached = talker_inputs(model, text, True), talker_inputs(model, text, False)
    control = torch.equal(talker_codes(model, cached, True), talker_codes(model, cached, False))
    print(f"control: the talker's own generate() on generate()'s cached-run inputs, with and without the cache: "
          f"{'the same codes' if control else 'other codes'}")
    if not control:
        print("the control disagrees: this script shows nothing here")
        return 2
    reply = (cached["thinker_reply_part"].shape, uncached["thinker_reply_part"].shape)
    last = float((cached["inputs_embeds"][:, -1] - uncached["inputs_embeds"][:, -1]).abs().max())
    print(f"thinker_reply_part: use_cache=True {list(reply[0])}, use_cache=False {list(reply[1])}; "
          f"talker prompt's last embedding max |Δ| {last:.3g}")
    codes = talker_codes(model, cached, True), talker_codes(model, uncached, True)
    print(f"talker codes from each run's inputs: {codes[0].tolist()} vs {codes[1].tolist()}")
    if reply[0] != reply[1] or last > 1e-5:
        print("BUG: generate(use_cache=False) hands the talker whole-sequence thinker states as if one position each")
        return 1
    print("generate() hands the talker the same inputs with and without the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
