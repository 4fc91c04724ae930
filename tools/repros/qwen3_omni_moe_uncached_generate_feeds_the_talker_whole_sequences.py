#!/usr/bin/env python3
"""Qwen3-Omni-MoE's generate(use_cache=False) builds the talker's inputs from whole-sequence thinker states: other codes.

Expected (model bug, transformers 5.24.0; other releases not run): Qwen3OmniMoeForConditionalGeneration.generate()
passes use_cache to the thinker's generate() only, and reads the thinker's per-step hidden states as one position
each: `thinker_embed = torch.cat([hidden_states[0] for hidden_states in thinker_result.hidden_states], dim=1)`
(modeling_qwen3_omni_moe.py:4163-4165 in 5.24.0), then slices the assistant turn out of it by token index
(`_get_talker_assistant_parts`, :4005-4062). A cached thinker step returns the embedding of its one new position; an
uncached step recomputes and returns the whole sequence, so with use_cache=False the assistant part (its first reply
token and trailing_text_hidden, the text the talker speaks) is read from the wrong positions.
The text the thinker generates is the same both ways, and the talker (always cached: use_cache does not reach it) is
handed other inputs_embeds and trailing_text_hidden, and returns other codes.
Exit 1 when the thinker's text agrees and the talker's inputs differ; 0 when the talker's inputs agree; 2 when the
thinker's text differs (then this script shows nothing).
"""
import sys

import torch
from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

TRANSFORMERS = ">=5.15"  # 5.15.1-5.25.0 measured; 5.14 and earlier refuse batched audio output (tests/test_repros.py skips it elsewhere)

SEED, BATCH, TEXT, THINKER_TOKENS, CODES = 0, 2, 6, 4, 8
ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [3, 2, 3], "interleaved": True}
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "moe_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2,
         "norm_topk_prob": True, "rope_parameters": ROPE}
CONFIG = {  # the published layout (Qwen3-Omni-30B-A3B-Instruct), shrunk: see kvconform/families/families.yaml
    "im_start_token_id": 255, "im_end_token_id": 254, "tts_pad_token_id": 253, "tts_bos_token_id": 252,
    "tts_eos_token_id": 251, "system_token_id": 250, "user_token_id": 249, "assistant_token_id": 248,
    "thinker_config": {"text_config": {**SMALL, "vocab_size": 256}, "vision_start_token_id": 247,
                       "audio_start_token_id": 246, "audio_token_id": 245, "image_token_id": 244, "video_token_id": 243,
                       "audio_config": {"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4,
                                        "encoder_ffn_dim": 128, "output_dim": 64, "downsample_hidden_size": 8},
                       "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
                                         "out_hidden_size": 64, "deepstack_visual_indexes": [0, 1]}},
    "talker_config": {"text_config": {**SMALL, "vocab_size": 1280, "shared_expert_intermediate_size": 128},
                      "code_predictor_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                                "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
                                                "vocab_size": 256, "num_code_groups": 16},
                      "num_code_groups": 16, "thinker_hidden_size": 64, "accept_hidden_layer": 1, "spatial_merge_size": 2,
                      "codec_pad_id": 356, "codec_bos_id": 357, "codec_eos_token_id": 358, "codec_nothink_id": 363,
                      "codec_think_bos_id": 364, "codec_think_eos_id": 365, "speaker_id": {"chelsie": 509},
                      "audio_token_id": 245, "image_token_id": 244, "video_token_id": 243, "vision_start_token_id": 247,
                      "audio_start_token_id": 246},
    "code2wav_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
                        "num_hidden_layers": 2, "codebook_size": 256, "codebook_dim": 64, "decoder_dim": 64,
                        "num_quantizers": 16},
}


def talker_call(model, prompt, use_cache):
    """The thinker's text and what generate() hands talker.generate (a stand-in that keeps its arguments)."""
    kept = {}
    original = model.talker.generate

    def keep(**call):
        kept.update(call)
        return original(**call)

    model.talker.generate = keep
    try:
        text, _ = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), speaker="chelsie",
                                 use_cache=use_cache, thinker_max_new_tokens=THINKER_TOKENS, thinker_do_sample=False,
                                 talker_max_new_tokens=CODES, talker_do_sample=False)
    finally:
        del model.talker.generate
    return text, kept


@torch.inference_mode()
def main():
    torch.manual_seed(SEED)
    model = Qwen3OmniMoeForConditionalGeneration(Qwen3OmniMoeConfig(**CONFIG)).float().eval()
    config = model.config
    text = torch.randint(3, 240, (BATCH, TEXT), generator=torch.Generator().manual_seed(SEED))

    def ids(*values):
        return torch.tensor([values]).expand(BATCH, -1)

    newline = 198
    prompt = torch.cat([ids(config.im_start_token_id, config.user_token_id, newline), text,
                        ids(config.im_end_token_id, newline, config.im_start_token_id, config.assistant_token_id, newline)], dim=1)
    (cached_text, cached), (uncached_text, uncached) = talker_call(model, prompt, True), talker_call(model, prompt, False)
    if not torch.equal(cached_text, uncached_text):
        print("the thinker's text differs with and without the cache: this script shows nothing here")
        return 2
    print(f"thinker text (the same both ways): {cached_text[:, prompt.shape[1]:].tolist()}")
    embeds = float((cached["inputs_embeds"] - uncached["inputs_embeds"]).abs().max())
    shapes = [list(call["trailing_text_hidden"].shape) for call in (cached, uncached)]
    same = shapes[0] == shapes[1] and torch.allclose(cached["trailing_text_hidden"], uncached["trailing_text_hidden"], atol=1e-5)
    print(f"talker inputs_embeds max |Δ| {embeds:.3g} (its last position: the first reply token's embedding); "
          f"trailing_text_hidden use_cache=True {shapes[0]}, use_cache=False {shapes[1]}, {'equal' if same else 'not equal'}")
    if embeds > 1e-5 or not same:
        print("BUG: generate(use_cache=False) slices the talker's assistant part out of whole-sequence thinker states")
        return 1
    print("generate() hands the talker the same inputs with and without the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
