#!/usr/bin/env python3
"""transformers <5.16: a Qwen omni thinker's decode step without an attention_mask forgets the image's rotary offset.

Expected (model bug): the thinkers number a prompt's image tokens on a (temporal, height, width) grid (get_rope_index),
so an image of h x w merged tokens spans max(h, w) positions and the text after it continues from the largest one + 1;
the forward keeps the offset to plain numbering as `self.rope_deltas` and numbers every later token
(cache length + rope_deltas). Up to 5.15 that whole block, the rotary index of a prefill and the offset of a decode
step, runs only `if attention_mask is not None and position_ids is None`
(Qwen2_5OmniThinkerForConditionalGeneration.forward, modeling_qwen2_5_omni.py:1955-1976 in 5.6.2, :1971-1992 in
5.15.1, :2050 in 5.0.0; Qwen3OmniMoeThinkerForConditionalGeneration.forward, modeling_qwen3_omni_moe.py:2196-2217 in
5.6.2, :2136-2157 in 5.15.1, :2255 in 5.0.0). A decode step given only the new token and the cache, as a hand-written
loop after a prefill over the processor's output passes it (`out = model(**inputs, use_cache=True)`, then
`model(input_ids=next_token, past_key_values=out.past_key_values)`), gets position_ids=None: the text model numbers
it by the cache length (its cache_position), without the image's offset, so each step's query and key sit
(h x w - max(h, w)) positions away from where one pass over the whole sequence puts them. generate() is not hurt: it
passes the mask at every step. 5.16 moves the block to compute_3d_position_ids, whose decode branch needs only the
stored offset: `elif self.rope_deltas is not None and (past_key_values_length > 0 or input_ids is None)` numbers a step
without a mask arange(cache length, ...) + rope_deltas (modeling_qwen2_5_omni.py:1866-1904 in 5.16.1;
modeling_qwen3_omni_moe.py:1986-2024 in 5.16.1).

Shown on both thinkers of the published geometry (Qwen/Qwen2.5-Omni-7B: 14-pixel patches, Qwen/Qwen3-Omni-30B-A3B:
16-pixel patches, both merged 2 x 2 with 2 frames a temporal patch, multimodal rotary sections over (temporal, height,
width); vision_start_token_id set as every published thinker_config sets it), narrower and shallower, with one image
of 4 x 8 patches made by the models' image processor (Qwen2VLImageProcessor: 2 x 4 = 8 placeholders, rope_deltas -4)
between text tokens, laid out as the processor lays a prompt out, with the tokenizer's attention_mask (all ones). The
prefill gets the mask; 4 greedy decode steps get the new token and the cache only; their logits are compared with one
uncached pass over the whole sequence with its mask. generate() over the same inputs (greedy, its logits returned) is
the control: it passes the mask (up to 5.15) or position_ids (from 5.16) at every step and agrees.
Exit 1 when either thinker's decode steps without the mask leave the uncached pass, 0 when both agree.
"""
import inspect
import sys

import numpy as np
import torch
import transformers
from PIL import Image

TRANSFORMERS = "<5.16"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

VISION_START, VISION_END, IMAGE = 249, 248, 252
AUDIO = dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, d_model=64, output_dim=64,
             max_source_positions=64)


def text(**extra):
    return dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.15,
                rope_parameters={"rope_theta": 1e6, "rope_type": "default", "mrope_section": [2, 3, 3]}, **extra)


def vision(patch_size, **extra):
    return dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, patch_size=patch_size, spatial_merge_size=2,
                temporal_patch_size=2, out_hidden_size=64, **extra)


def thinkers():
    from transformers import Qwen2_5OmniThinkerConfig, Qwen2_5OmniThinkerForConditionalGeneration
    yield "Qwen2.5-Omni thinker", 14, Qwen2_5OmniThinkerForConditionalGeneration, Qwen2_5OmniThinkerConfig(
        audio_config=AUDIO, vision_config=vision(14), text_config=text(), vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END, image_token_index=IMAGE, video_token_index=253, audio_token_index=255,
        audio_start_token_id=251, audio_end_token_id=250, user_token_id=247)
    from transformers import Qwen3OmniMoeThinkerConfig, Qwen3OmniMoeThinkerForConditionalGeneration
    yield "Qwen3-Omni-MoE thinker", 16, Qwen3OmniMoeThinkerForConditionalGeneration, Qwen3OmniMoeThinkerConfig(
        audio_config=AUDIO, vision_config=vision(16, deepstack_visual_indexes=[1], num_position_embeddings=64),
        text_config=text(moe_intermediate_size=64, num_experts_per_tok=2, num_experts=4),
        vision_start_token_id=VISION_START, image_token_id=IMAGE, video_token_id=253, audio_token_id=255,
        audio_start_token_id=251, user_token_id=247)


def image_processor(patch_size):
    try:  # the PIL backend's class from 5.4 on; before it the slow class is the PIL/numpy one
        from transformers import Qwen2VLImageProcessorPil as processor_class
    except ImportError:
        from transformers import Qwen2VLImageProcessor as processor_class
    return processor_class(patch_size=patch_size, temporal_patch_size=2, merge_size=2)


def prompt(patch_size):
    """The processor's output for text, an image of 4 x 8 patches, text: ids, the tokenizer's mask, the pixels."""
    pixels = np.random.default_rng(0).integers(0, 256, (4 * patch_size, 8 * patch_size, 3), dtype=np.uint8)
    try:
        media = image_processor(patch_size)(images=[Image.fromarray(pixels)], return_tensors="pt")
    except ImportError:  # 5.4.0's PIL class asks for torchvision: the processor's layout by hand, 32 normalised patches
        media = {"pixel_values": torch.randn(32, 3 * 2 * patch_size**2, generator=torch.Generator().manual_seed(0)),
                 "image_grid_thw": torch.tensor([[1, 4, 8]])}
    grid = media["image_grid_thw"]
    placeholders = int(grid.prod()) // 4
    ids = torch.tensor([[5, 6, 7, VISION_START, *[IMAGE] * placeholders, VISION_END, 10, 11, 12]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": media["pixel_values"],
            "image_grid_thw": grid}


def decode(model, inputs, steps):
    """Prefill over the processor's output, then greedy steps with the new token and the cache only."""
    keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(**inputs, use_cache=True)
    ids, cache, logits = inputs["input_ids"], out.past_key_values, []
    for _ in range(steps):
        token = out.logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, token], dim=1)
        out = model(input_ids=token, use_cache=True, **{keyword: cache})
        logits.append(out.logits[:, -1])
    return ids, torch.stack(logits, dim=1)


def generated(model, inputs, steps):
    """generate() over the same inputs, greedy: its tokens and the logits of its decode steps."""
    out = model.generate(**inputs, max_new_tokens=steps + 1, do_sample=False, pad_token_id=0, output_logits=True,
                         return_dict_in_generate=True)
    return out.sequences, torch.stack(out.logits[1:], dim=1)


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    wrong = False
    for name, patch_size, model_class, config in thinkers():
        torch.manual_seed(0)
        model = model_class(config).eval()
        inputs = prompt(patch_size)
        gaps = {}
        for path, run in (("loop", decode), ("generate", generated)):
            ids, logits = run(model, inputs, 4)
            media = {k: inputs[k] for k in ("pixel_values", "image_grid_thw")}
            whole = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False, **media).logits
            reference = whole[:, inputs["input_ids"].shape[1]:inputs["input_ids"].shape[1] + 4]
            gaps[path] = (logits - reference).abs().amax(dim=(0, 2)).tolist()
        deltas = getattr(model, "rope_deltas", None)
        print(f"{name}: image grid {inputs['image_grid_thw'].tolist()}, rope_deltas after the prefill "
              f"{deltas.flatten().tolist() if deltas is not None else None}")
        print(f"{name}: decode steps with the new token and the cache only vs one uncached pass, max |Δlogit| per step: "
              f"{[f'{g:.2e}' for g in gaps['loop']]}")
        print(f"{name}: generate()'s decode steps vs one uncached pass (control): {[f'{g:.2e}' for g in gaps['generate']]}")
        if max(gaps["generate"]) > 1e-4:
            print(f"{name}: generate() leaves the uncached pass too: this script cannot tell the cause")
            return 2
        wrong |= max(gaps["loop"]) > 1e-4
    return int(wrong)


if __name__ == "__main__":
    sys.exit(main())
